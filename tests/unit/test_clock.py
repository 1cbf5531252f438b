"""The waits that end early on a stop request."""

from __future__ import annotations

import asyncio

import pytest

from local_ccm.clock import STOPPED, unless_stopped


def test_unless_stopped_returns_what_the_work_returns() -> None:
    async def scenario() -> object:
        async def work() -> str:
            return "answered"

        return await unless_stopped(work(), asyncio.Event())

    assert asyncio.run(scenario()) == "answered"


def test_a_stop_cancels_work_that_never_ends() -> None:
    cancelled = []

    async def scenario() -> object:
        stop = asyncio.Event()

        async def hang() -> None:
            try:
                await asyncio.Event().wait()  # an API server that never answers
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        asyncio.get_running_loop().call_soon(stop.set)
        return await unless_stopped(hang(), stop)

    assert asyncio.run(scenario()) is STOPPED
    assert cancelled == [True]


def test_an_error_of_the_work_is_raised() -> None:
    async def scenario() -> object:
        async def fail() -> None:
            raise LookupError("refused")

        return await unless_stopped(fail(), asyncio.Event())

    with pytest.raises(LookupError, match="refused"):
        asyncio.run(scenario())
