"""The keys a controller's one worker has to look at: each queued once however often it is
added, and a key whose work failed added again after a delay that doubles per failure up to a
cap (on the injected clock), as client-go's rate-limited work queue does; with `metrics`, the
queue reports client-go's `workqueue_*` series and its worker controller-runtime's
`controller_runtime_reconcile_*` (a key's work fails when it is queued again meanwhile)."""

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
        self.retries: set[asyncio.Task[None]] = set()
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
            self.pending.put_nowait(key)
            if self.metrics is not None:
                self.metrics.adds.labels(self.metrics.name).inc()
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
            if self.metrics is not None:
                self.metrics.reconciled(seconds, failed)

    def done(self, key: str) -> None:
        """The work on `key` succeeded (or the key is gone): its next failure starts over."""
        self.failures.pop(key, None)

    def retry(self, key: str) -> None:
        tries = self.failures[key] = self.failures.get(key, 0) + 1
        if key in self.processing:
            self.failed.add(key)
        if self.metrics is not None:
            self.metrics.retries.labels(self.metrics.name).inc()
        first, cap = self.backoff
        task = asyncio.create_task(self._after(min(first * 2 ** (tries - 1), cap), key))
        self.retries.add(task)
        task.add_done_callback(self.retries.discard)

    async def _after(self, delay: float, key: str) -> None:
        await self.clock.sleep(delay)
        self.add(key)

    async def close(self) -> None:
        """Cancel the delayed additions."""
        for task in list(self.retries):
            task.cancel()
        await asyncio.gather(*self.retries, return_exceptions=True)
