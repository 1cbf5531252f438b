"""A fake `Clock` that only moves when the test says so, and `settle()`."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

START_WALL = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


async def settle(max_rounds: int = 10_000) -> None:
    """Let every runnable task run until all of them wait on something.

    Relies on the default event loop's ready queue; without it, yields a fixed
    number of times.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    for _ in range(max_rounds if ready is not None else 100):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return


class FakeClock:
    """A `Clock` that only moves when the test says so.

    `sleep()` returns once `advance()`/`run_until()` has moved monotonic time past
    its deadline (or `jump()` moved time to it). Wall time moves with monotonic time unless
    `set_wall()` jumps it (to simulate a skewed or stepped wall clock) or it is frozen.
    """

    def __init__(
        self, *, monotonic: float = 1000.0, wall: datetime = START_WALL, frozen_wall: bool = False
    ) -> None:
        self._mono = monotonic
        self._wall, self._frozen_wall = wall, frozen_wall
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._wall

    def set_wall(self, wall: datetime) -> None:
        self._wall = wall

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), future))
        await future

    def _move_to(self, mono: float) -> None:
        if mono > self._mono:
            if not self._frozen_wall:
                self._wall += timedelta(seconds=mono - self._mono)
            self._mono = mono

    def _next_deadline(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)  # cancelled sleeps
        return self._sleepers[0][0] if self._sleepers else None

    async def _wake_next(self) -> None:
        deadline, _, future = heapq.heappop(self._sleepers)
        self._move_to(deadline)
        future.set_result(None)
        await settle()

    def step(self, seconds: float) -> None:
        """Move time forward without running the loop (for synchronous tests)."""
        self._move_to(self._mono + seconds)

    def jump(self) -> None:
        """Move time to the earliest pending deadline and wake every sleeper due by then
        (for a task that moves time whenever the loop is idle)."""
        deadline = self._next_deadline()
        if deadline is None:
            return
        self._move_to(deadline)
        while (due := self._next_deadline()) is not None and due <= self._mono:
            heapq.heappop(self._sleepers)[2].set_result(None)

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking sleepers in deadline order."""
        target = self._mono + seconds
        await settle()
        while (deadline := self._next_deadline()) is not None and deadline <= target:
            await self._wake_next()
        self._move_to(target)
        await settle()

    async def run_until(self, predicate: Callable[[], bool], *, timeout: float) -> float:
        """Advance sleeper by sleeper until `predicate()` holds; the time it took.

        Raises AssertionError if it does not hold within `timeout` clock seconds.
        """
        start = self._mono
        await settle()
        while not predicate():
            deadline = self._next_deadline()
            if deadline is None or deadline > start + timeout:
                await self.advance(start + timeout - self._mono)
                if predicate():
                    break
                raise AssertionError(f"condition not met within {timeout}s of fake time")
            await self._wake_next()
        return self._mono - start
