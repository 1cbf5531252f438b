"""What wakes the agent's worker and what its health checks read.

:class:`Triggers` coalesces triggers into bursts and runs the timers that fire them;
:class:`Health` holds plain timestamps the HTTP thread reads and the loop writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from local_ccm.agent.core.timing import debounce_wait
from local_ccm.clock import Clock

WATCH_GRACE = 60.0  # readiness tolerates a reconnecting watch this long
TIMERS = frozenset({"tick", "resync"})  # a burst of only these starts at once: no debounce


class Triggers:
    """Bursts as ``timing.debounce_wait`` times them; kinds in order of first appearance. A
    timer alone does not wait for more (a periodic pass on a quiet node wakes once)."""

    def __init__(self, clock: Clock, quiet: float, longest: float) -> None:
        self._clock, self._quiet, self._longest = clock, quiet, longest
        self._pending: list[str] = []
        self._last = 0.0
        self._event = asyncio.Event()
        self._later: asyncio.Task[None] | None = None

    def fire(self, kind: str) -> None:
        if kind not in self._pending:
            self._pending.append(kind)
        self._last = self._clock.monotonic()
        self._event.set()

    def fire_later(self, delay: float, kind: str = "retry") -> None:
        """One pending delayed trigger (a settle wait, a backoff): a new one replaces it."""
        self.cancel_later()
        self._later = asyncio.get_running_loop().create_task(self._fire_after(delay, kind))

    def cancel_later(self) -> None:
        if self._later is not None:
            self._later.cancel()

    async def _fire_after(self, delay: float, kind: str) -> None:
        await self._clock.sleep(delay)
        self.fire(kind)

    async def fire_every(self, kind: str, interval: Callable[[], float]) -> None:
        """A timer: ``kind`` after every ``interval()`` seconds, until cancelled."""
        while True:
            await self._clock.sleep(interval())
            self.fire(kind)

    async def next_burst(self) -> list[str]:
        await self._event.wait()
        first = self._clock.monotonic()
        while not TIMERS.issuperset(self._pending) and (wait := self._wait(first)) > 0:
            await self._clock.sleep(wait)
        kinds, self._pending = self._pending, []
        self._event.clear()
        return kinds

    def _wait(self, first: float) -> float:
        now = self._clock.monotonic()
        return debounce_wait(first, self._last, now, quiet=self._quiet, longest=self._longest)


class Health:
    """/healthz and /readyz checks over timestamps the loop keeps current."""

    def __init__(self, clock: Clock, pass_budget: float) -> None:
        self._clock = clock
        self.pass_budget = pass_budget
        self.last_pass = clock.monotonic()
        self.first_pass = False
        self.watch_down_since: float | None = None
        self.forbidden: str | None = None

    def pass_ok(self) -> tuple[bool, str]:
        age = self._clock.monotonic() - self.last_pass
        return age < self.pass_budget, f"last pass completed {age:.1f}s ago"

    def first_pass_ok(self) -> tuple[bool, str]:
        return self.first_pass, "the first pass has not completed"

    def watch_ok(self) -> tuple[bool, str]:
        since = self.watch_down_since
        if since is None:
            return True, "connected"
        down = self._clock.monotonic() - since
        return down < WATCH_GRACE, f"watch reconnecting for {down:.0f}s"

    def writes_ok(self) -> tuple[bool, str]:
        return self.forbidden is None, f"last write was forbidden: {self.forbidden}"
