"""A test helper's periodic thread: `tick()` every `interval` seconds while a ``with`` runs."""

from __future__ import annotations

import threading
from typing import Self


class Ticker:
    """`tick()` every `interval` seconds in a daemon thread, from ``with`` until its end: the
    first tick an interval after the start, or, with `at_once`, in ``with`` itself before the
    thread starts. The thread is joined for at most `join` seconds."""

    def __init__(self, interval: float, *, at_once: bool = False, join: float = 5.0) -> None:
        self.interval, self._at_once, self._join = interval, at_once, join
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)

    def __enter__(self) -> Self:
        if self._at_once:
            self.tick()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._join)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError
