"""Triggers: a burst of netlink or watch triggers waits for quiet (debounce); a timer alone
(tick, resync) starts its pass at once, so a quiet node's periodic pass wakes the loop once."""

from __future__ import annotations

import asyncio

from local_ccm.agent.triggers import Triggers
from tests.fakes.clock import FakeClock

QUIET, LONGEST = 0.25, 1.0


def test_a_timer_alone_is_not_debounced_and_others_are() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        triggers = Triggers(clock, QUIET, LONGEST)
        triggers.fire("tick")
        start = clock.monotonic()
        assert await triggers.next_burst() == ["tick"]
        assert clock.monotonic() == start  # no quiet wait

        triggers.fire("netlink")
        triggers.fire("tick")
        burst = asyncio.ensure_future(triggers.next_burst())
        await clock.advance(QUIET / 2)
        assert not burst.done()  # waiting for the burst to end
        await clock.advance(QUIET)
        assert await burst == ["netlink", "tick"]

    asyncio.run(scenario())
