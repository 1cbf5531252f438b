"""An Informer on its own event loop in a thread, for integration tests written synchronously
(they wait with `eventually` or on a queue, never with a fixed sleep)."""

from __future__ import annotations

import asyncio
import queue
import random
import threading
from collections.abc import Iterator
from typing import Any

from local_ccm.clock import SystemClock
from local_ccm.kube.backoff import Backoff
from local_ccm.kube.informer import Change, Informer, ListWatch, StreamEnd
from local_ccm.kube.request import WatchEvent

Obj = dict[str, Any]
FAST = Backoff(initial=0.1, cap=1.0)


def whole(obj: Obj) -> Obj:
    """The projection that keeps the whole object (tests look at every field)."""
    return obj


class Running:
    """Runs `informer` until `stop()`; iterating yields its changes as WatchEvents (the
    object is the new projection, or the old one for DELETED)."""

    def __init__(self, source: ListWatch, *, timeouts: tuple[int, int] | None = (300, 600)) -> None:
        self.ends: list[StreamEnd] = []
        self.informer: Informer[Obj] = Informer(
            source, whole, clock=SystemClock(), rng=random.Random(), name="test",
            on_end=self.ends.append, backoff=FAST, timeouts=timeouts,
        )  # fmt: skip
        self._events: queue.Queue[WatchEvent | None] = queue.Queue()
        self.informer.add_handler(self._put)
        self._loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="informer", daemon=True)
        self.thread.start()

    def _put(self, change: Change[Obj]) -> None:
        obj = change.new if change.new is not None else change.old
        self._events.put(WatchEvent(change.type, obj or {}))

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self.informer.run())
        finally:
            self._events.put(None)
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        while (event := self._events.get()) is not None:
            yield event

    def stop(self, timeout: float = 30.0) -> None:
        self._loop.call_soon_threadsafe(self.informer.stop)
        self.thread.join(timeout)
