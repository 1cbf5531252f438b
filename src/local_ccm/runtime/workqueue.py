"""The keys a controller's workers have to look at: each queued once however often it is
added, never worked on by two workers at once (a key added while it is worked on waits until
that work ends, client-go's dirty set), and a key whose work failed added again after a delay
that doubles per failure up to a cap (on the injected clock), as client-go's rate-limited work
queue does. A key waits for one delayed addition at a time, the earliest asked for (client-go's
delaying queue): a controller that asks to look again after its period on every sync keeps one
timer, not one per sync. With `metrics`, the queue reports client-go's `workqueue_*` series and its
workers' controller-runtime `controller_runtime_reconcile_*` (a key's work fails when it is
queued again meanwhile by `retry` or `requeue`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from local_ccm.clock import Clock
from local_ccm.runtime.metrics import QueueMetrics


class WorkQueue:
    def __init__(
        self, clock: Clock, backoff: tuple[float, float], metrics: QueueMetrics | None = None
    ) -> None:
        self.clock, self.backoff = clock, backoff  # first and longest retry delay
        self.pending: asyncio.Queue[str] = asyncio.Queue()
        self.queued: dict[str, float] = {}  # key: when it was added (monotonic)
        self.failures: dict[str, int] = {}  # failed attempts per key, for the delay
        self.waiting: dict[str, tuple[float, asyncio.Task[None]]] = {}  # key: (due, its timer)
        self.processing: dict[str, float] = {}  # key: when its work started
        self.failed: set[str] = set()  # keys being worked on that were retried meanwhile
        self.metrics = metrics
        if metrics is not None:
            metrics.in_flight = self._running

    def _running(self) -> list[float]:
        now = self.clock.monotonic()
        return [now - started for started in list(self.processing.values())]

    def add(self, key: str) -> None:
        if key and key not in self.queued:
            self.queued[key] = self.clock.monotonic()
            if self.metrics is not None:
                self.metrics.adds.labels(self.metrics.name).inc()
            if key not in self.processing:  # else it is put back when that work ends
                self._put(key)

    def _put(self, key: str) -> None:
        self.pending.put_nowait(key)
        if self.metrics is not None:
            self.metrics.depth.labels(self.metrics.name).set(self.pending.qsize())

    def qsize(self) -> int:
        return self.pending.qsize()

    async def get(self) -> str:
        key = await self.pending.get()
        added = self.queued.pop(key, None)
        if self.metrics is not None:
            now = self.clock.monotonic()
            self.metrics.depth.labels(self.metrics.name).set(self.pending.qsize())
            if added is not None:
                self.metrics.queue_duration.labels(self.metrics.name).observe(now - added)
        return key

    async def process(self, work: Callable[[str], Awaitable[None]]) -> None:
        """Wait for the next key and do `work` on it, timed: the worker's one step."""
        key = await self.get()
        self.processing[key] = self.clock.monotonic()
        try:
            await work(key)
        finally:
            seconds = self.clock.monotonic() - self.processing.pop(key)
            failed = key in self.failed
            self.failed.discard(key)
            if key in self.queued:  # added meanwhile: its turn now
                self._put(key)
            if self.metrics is not None:
                self.metrics.reconciled(seconds, failed)

    def done(self, key: str) -> None:
        """The work on `key` succeeded (or the key is gone): its next failure starts over."""
        self.failures.pop(key, None)

    def retry(self, key: str) -> None:
        """The work on `key` failed: again after its backoff (`workqueue_retries_total`)."""
        tries = self.failures[key] = self.failures.get(key, 0) + 1
        if key in self.processing:
            self.failed.add(key)
        if self.metrics is not None:
            self.metrics.retries.labels(self.metrics.name).inc()
        first, cap = self.backoff
        self.add_after(key, min(first * 2 ** (tries - 1), cap))

    def requeue(self, key: str) -> None:
        """The work on `key` failed in a way worth trying again at once (a conflict)."""
        if key in self.processing:
            self.failed.add(key)
        self.add(key)

    def add_after(self, key: str, delay: float) -> None:
        """Add `key` after `delay` seconds (not a failure), unless it is already due sooner."""
        due = self.clock.monotonic() + delay
        waiting = self.waiting.get(key)
        if waiting is not None:
            if waiting[0] <= due:
                return
            waiting[1].cancel()
        self.waiting[key] = (due, asyncio.create_task(self._after(delay, key)))

    async def _after(self, delay: float, key: str) -> None:
        await self.clock.sleep(delay)
        del self.waiting[key]
        self.add(key)

    async def close(self) -> None:
        """Cancel the delayed additions."""
        timers = [task for _, task in self.waiting.values()]
        self.waiting.clear()
        for task in timers:
            task.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
