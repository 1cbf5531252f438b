"""The agent's detection seam, played by the test, and how the loop tests drive the loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.loop import Agent
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
