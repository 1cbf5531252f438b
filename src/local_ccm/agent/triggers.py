"""What wakes the agent's sync, and what its health checks read.

The agent runs on the controller kit (`runtime.worker.Worker`) with one key, its Node. Its
sources are the Node watch (`nodecache.NodeCache`), the kernel's address notifications
(:class:`KernelSource`) and two timers (`runtime.timer.Timer`: the periodic pass and the full
resync); each change names its kind ("watch", "netlink", "tick", "resync") to :class:`Burst`,
which the sync asks whether the burst is over (a burst of netlink events costs one pass) and
which kind started it (the ``trigger`` label of ``passes_total``). :class:`Health` holds plain
timestamps the HTTP thread reads and the loop writes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence

from local_ccm.agent.core.timing import MONITOR_BACKOFF, debounce_wait
from local_ccm.clock import Clock
from local_ccm.netlink import Change

WATCH_GRACE = 60.0  # readiness tolerates a reconnecting watch this long
TIMERS = frozenset({"tick", "resync"})  # a burst of only these starts at once: no debounce
ChangeSource = Callable[[], AsyncIterator[Sequence[Change]]]


class Burst:
    """The kinds of trigger since the last pass, in order of first appearance, timed as
    ``timing.debounce_wait`` times a burst. A timer alone does not wait for more (a periodic
    pass on a quiet node wakes once)."""

    def __init__(self, clock: Clock, quiet: float, longest: float) -> None:
        self._clock, self._quiet, self._longest = clock, quiet, longest
        self.kinds: list[str] = []
        self._first = self._last = 0.0

    def add(self, kind: str) -> None:
        now = self._clock.monotonic()
        if not self.kinds:
            self._first = now
        if kind not in self.kinds:
            self.kinds.append(kind)
        self._last = now

    def wait(self) -> float:
        """Seconds until the burst is over (``<= 0``: now)."""
        if TIMERS.issuperset(self.kinds):
            return 0.0
        now = self._clock.monotonic()
        return debounce_wait(self._first, self._last, now, quiet=self._quiet, longest=self._longest)

    def take(self) -> list[str]:
        """The burst's kinds; the next trigger starts a new one."""
        kinds, self.kinds = self.kinds, []
        return kinds


class KernelSource:
    """The kernel's notifications as a source of changes: ``"netlink"`` for every batch; a
    failed subscription is reopened after a backoff. ``on_batch`` counts the batch."""

    name = "netlink"

    def __init__(
        self,
        changes: ChangeSource,
        clock: Clock,
        rng: random.Random,
        on_batch: Callable[[Sequence[Change]], None],
        logger: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._changes, self._clock, self._rng, self._on_batch = changes, clock, rng, on_batch
        self._log = logger
        self._handlers: list[Callable[[str], None]] = []

    def add_handler(self, handler: Callable[[str], None]) -> None:
        self._handlers.append(handler)

    async def wait_synced(self) -> None:
        return  # the subscription opens as soon as run() starts, before the first pass

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                async for batch in self._changes():
                    failures = 0
                    self._on_batch(batch)
                    for handler in self._handlers:
                        handler(self.name)
            except OSError as exc:
                delay = MONITOR_BACKOFF.next_delay(failures, None, self._rng)
                failures += 1
                self._log.warning("netlink monitor failed (%s); reopening in %.1fs", exc, delay)
                await self._clock.sleep(delay)


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
