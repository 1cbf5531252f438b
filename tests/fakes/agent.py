"""The agent's detection and kernel-notification seams, played by the test, and how the loop
tests drive the loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.run import Agent
from local_ccm.netlink import Change
from tests.fakes.clock import FakeClock


@dataclass
class FakeDetector:
    """Detection results the test sets; counts the passes that detected."""

    results: dict[DetectorKey, Detection] = field(default_factory=dict)
    runs: int = 0

    def set(self, results: Mapping[DetectorKey, Detection]) -> None:
        self.results = dict(results)

    async def __call__(self) -> Mapping[DetectorKey, Detection]:
        self.runs += 1
        return dict(self.results)


class FakeKernel:
    """The kernel's address notifications, as `Agent(changes=kernel.changes)` reads them:
    `fire()` sends one batch (an address change)."""

    def __init__(self) -> None:
        self.batches: asyncio.Queue[Sequence[Change]] = asyncio.Queue()

    def fire(self) -> None:
        self.batches.put_nowait([Change("address")])

    async def changes(self) -> AsyncIterator[Sequence[Change]]:
        while True:
            yield await self.batches.get()


# ------------------------------------------------------------------ driving the loop
def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """A coroutine test as a plain one: pytest passes its fixtures, ``asyncio.run`` awaits it."""

    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return sync


async def start_loop(agent: Agent, clock: FakeClock, *, timeout: float = 5) -> asyncio.Task[int]:
    """``agent.run_loop`` until its first pass has completed."""
    task = asyncio.get_running_loop().create_task(agent.run_loop())
    await clock.run_until(lambda: agent.health.first_pass, timeout=timeout)
    return task


async def stop(task: asyncio.Task[int]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
