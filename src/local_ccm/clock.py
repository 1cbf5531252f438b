"""Time as a seam: loops take a `Clock` so tests can drive time by hand.

Monotonic time measures intervals (lease expiry, deadlines, backoff); wall time
is only ever written into API objects (`renewTime`, Event timestamps) and never
compared with another machine's clock. The waits at the end return early once a
stop (SIGTERM) is requested.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Final, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps; only differences mean anything."""
        ...

    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock: `time.monotonic`, `datetime.now(UTC)` and `asyncio.sleep`."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def sleep_unless_stopped(clock: Clock, seconds: float, stop: asyncio.Event) -> None:
    """Sleep `seconds` of `clock`'s time, returning early once `stop` is set."""
    await race(clock.sleep(seconds), stop.wait())


class Stopped:
    """What :func:`unless_stopped` returns when `stop` was set before the work ended."""


STOPPED: Final = Stopped()


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | Stopped:
    """Await `work`, or cancel it once `stop` is set and return :data:`STOPPED`.

    For start-up steps that wait on the API server (the permission check): a signal must end
    the wait at once, not after the request's own timeout. A request already sent keeps its
    worker thread until the client is closed, which ends it (see ``HttpTransport.close``).
    """
    task = await race(work, stop.wait())
    return STOPPED if task.cancelled() else task.result()


async def race(work: Awaitable[T], rival: Awaitable[object]) -> asyncio.Future[T]:
    """Await `work` until it or `rival` ends; the loser is cancelled (and `work`, when it lost,
    awaited to its end). Returns `work`'s future: cancelled when the rival won."""
    task = asyncio.ensure_future(work)
    other = asyncio.ensure_future(rival)
    try:
        await asyncio.wait({task, other}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        other.cancel()
        if not task.done():
            task.cancel()
    if not task.done():
        await asyncio.gather(task, return_exceptions=True)
    return task
