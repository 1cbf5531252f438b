"""Turns served in the order they were taken, for a controller with several workers whose
decisions must still be taken one at a time and in the work queue's order (service-lb-ipam:
each address decision reads the ledger the previous one left), while the writes around them
overlap.

A sync takes its turn when it starts, before its first await (the worker calls `sync` as soon
as it took the key from the queue, so turns are taken in the queue's order), waits for it just
before it decides, and leaves the line once its decision is recorded (`with`: also when it
fails or is cancelled), so the next one may decide while its own write is in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Turns:
    """The line: the first turn taken and not left is the one that may decide."""

    def __init__(self) -> None:
        self._line: deque[asyncio.Future[None]] = deque()

    def take(self) -> Turn:
        """A place at the end of the line (on the running event loop)."""
        ready = asyncio.get_running_loop().create_future()
        if not self._line:
            ready.set_result(None)
        self._line.append(ready)
        return Turn(self, ready)

    def __len__(self) -> int:
        return len(self._line)

    def _leave(self, ready: asyncio.Future[None]) -> None:
        first = self._line[0] is ready
        self._line.remove(ready)
        if first and self._line and not self._line[0].done():
            self._line[0].set_result(None)


class Turn:
    """One place in the line: `await wait()` returns once every turn taken before it has left;
    leaving (`leave()`, or the end of a `with` block) lets the next one go."""

    def __init__(self, line: Turns, ready: asyncio.Future[None]) -> None:
        self._line, self._ready, self._left = line, ready, False

    async def wait(self) -> None:
        await self._ready  # no suspension when it is already this turn's

    def leave(self) -> None:
        if not self._left:
            self._left = True
            self._line._leave(self._ready)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()
