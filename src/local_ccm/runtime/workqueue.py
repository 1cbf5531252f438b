"""The keys a controller's one worker has to look at: each queued once however often it is
added, and a key whose work failed added again after a delay that doubles per failure up to a
cap (on the injected clock), as client-go's rate-limited work queue does."""

from __future__ import annotations

import asyncio

from local_ccm.clock import Clock


class WorkQueue:
    def __init__(self, clock: Clock, backoff: tuple[float, float]) -> None:
        self.clock, self.backoff = clock, backoff  # first and longest retry delay
        self.pending: asyncio.Queue[str] = asyncio.Queue()
        self.queued: set[str] = set()
        self.failures: dict[str, int] = {}  # failed attempts per key, for the delay
        self.retries: set[asyncio.Task[None]] = set()

    def add(self, key: str) -> None:
        if key and key not in self.queued:
            self.queued.add(key)
            self.pending.put_nowait(key)

    def qsize(self) -> int:
        return self.pending.qsize()

    async def get(self) -> str:
        key = await self.pending.get()
        self.queued.discard(key)
        return key

    def done(self, key: str) -> None:
        """The work on `key` succeeded (or the key is gone): its next failure starts over."""
        self.failures.pop(key, None)

    def retry(self, key: str) -> None:
        tries = self.failures[key] = self.failures.get(key, 0) + 1
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
