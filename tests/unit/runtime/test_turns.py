"""Turns: served in the order taken, whatever order their holders come to wait in; a turn left
early (a failed write before the decision) or cancelled lets the next one go."""

from __future__ import annotations

import asyncio

import pytest

from local_ccm.runtime.turns import Turn, Turns
from tests.fakes.clock import settle


async def decide(turn: Turn, name: str, ready: asyncio.Event, order: list[str]) -> None:
    with turn:
        await ready.wait()  # its write before the decision
        await turn.wait()
        order.append(name)


def test_turns_are_served_in_the_order_taken_not_the_order_their_holders_are_ready() -> None:
    async def scenario() -> list[str]:
        turns, order = Turns(), list[str]()
        ready = {name: asyncio.Event() for name in "abc"}
        tasks = [asyncio.create_task(decide(turns.take(), n, ready[n], order)) for n in "abc"]
        for name in "cb":
            ready[name].set()
        await settle()
        assert order == [], "b or c decided before a"
        ready["a"].set()
        await asyncio.gather(*tasks)
        assert len(turns) == 0
        return order

    assert asyncio.run(scenario()) == ["a", "b", "c"]


def test_the_first_turn_needs_no_wait() -> None:
    async def scenario() -> bool:
        turns = Turns()
        with turns.take() as turn:
            waited = turn.wait()
            try:
                waited.send(None)  # a coroutine that returns without suspending
            except StopIteration:
                return True
            return False

    assert asyncio.run(scenario())


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
def test_a_turn_that_ends_before_its_decision_lets_the_next_one_go(ending: str) -> None:
    async def scenario() -> list[str]:
        turns, order = Turns(), list[str]()
        first, second = turns.take(), turns.take()
        blocked = asyncio.Event()

        async def fails() -> None:
            with first:
                await blocked.wait()
                raise RuntimeError("its write failed")

        failing = asyncio.create_task(fails())
        ready = asyncio.Event()
        ready.set()
        later = asyncio.create_task(decide(second, "b", ready, order))
        await settle()
        assert order == []
        if ending == "failed":
            blocked.set()
        else:
            failing.cancel()
        await asyncio.gather(failing, return_exceptions=True)
        await later
        return order

    assert asyncio.run(scenario()) == ["b"]


def test_a_waiting_turn_cancelled_leaves_the_line_without_blocking_the_ones_behind() -> None:
    async def scenario() -> list[str]:
        turns, order = Turns(), list[str]()
        ready = {name: asyncio.Event() for name in "abc"}
        tasks = [asyncio.create_task(decide(turns.take(), n, ready[n], order)) for n in "abc"]
        ready["b"].set()
        ready["c"].set()
        await settle()  # b and c wait for their turn behind a
        tasks[1].cancel()
        await settle()
        ready["a"].set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert len(turns) == 0
        return order

    assert asyncio.run(scenario()) == ["a", "c"]
