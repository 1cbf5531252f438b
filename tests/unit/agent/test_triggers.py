"""Burst: a burst of netlink or watch triggers waits for quiet (debounce), at most `longest`
after its first trigger; a timer alone (tick, resync) starts its pass at once, so a quiet
node's periodic pass wakes the loop once."""

from __future__ import annotations

import asyncio

from local_ccm.agent.triggers import Burst
from tests.fakes.clock import FakeClock

QUIET, LONGEST = 0.25, 1.0


def test_a_timer_alone_is_not_debounced_and_others_are() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        burst = Burst(clock, QUIET, LONGEST)
        burst.add("tick")
        assert burst.wait() <= 0  # no quiet wait
        assert burst.take() == ["tick"]

        burst.add("netlink")
        burst.add("tick")
        await clock.advance(QUIET / 2)
        assert burst.wait() == QUIET / 2  # waiting for the burst to end
        await clock.advance(QUIET / 2)
        assert burst.wait() <= 0
        assert burst.take() == ["netlink", "tick"]
        assert burst.take() == []

    asyncio.run(scenario())


def test_a_continuous_burst_ends_at_most_longest_after_its_first_trigger() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        burst = Burst(clock, QUIET, LONGEST)
        for _ in range(9):
            burst.add("netlink")
            await clock.advance(0.1)
        assert burst.wait() > 0  # 0.9 s in, triggers still coming
        burst.add("watch")
        await clock.advance(0.1)
        assert burst.wait() <= 0  # 1 s after the first: over, though not quiet
        assert burst.take() == ["netlink", "watch"]

    asyncio.run(scenario())
