"""Time as a seam: loops take a `Clock` so tests can drive time by hand.

Monotonic time measures intervals (lease expiry, deadlines, backoff); wall time
is only ever written into API objects (`renewTime`, Event timestamps) and never
compared with another machine's clock.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


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
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        stopper.cancel()
