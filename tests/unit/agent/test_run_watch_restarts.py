"""Why the Node watch was re-established (``local_ccm_agent_watch_restarts_total{reason}``):
the agent asks no ``timeoutSeconds``, so a stream the server ends within
``SERVER_TIMEOUT_FLOOR`` (60 s) is ``closed``; a later end is the server's own ``timeout``."""

from __future__ import annotations

import asyncio
import random

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.run import Agent, LoopSettings
from local_ccm.kube.errors import Transient
from local_ccm.kube.informer import SERVER_TIMEOUT_FLOOR
from tests.fakes.agent import FakeDetector, run_async, start_loop, stop
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi
from tests.unit.agent.test_run_loop import BOTH, CONFIG, tainted_api

QUIET = LoopSettings(node_name="n1", reconcile_interval=100.0, resync_interval=3600.0)


async def started() -> tuple[FakeNodeApi, FakeClock, Agent, asyncio.Task[int]]:
    """The loop over a tainted Node, 2 s after its first pass."""
    api, clock = tainted_api(FakeNodeApi("n1")), FakeClock()
    agent = Agent(
        QUIET, CONFIG, api, FakeDetector(BOTH), clock=clock, metrics=AgentMetrics(),
        rng=random.Random(3),
    )  # fmt: skip
    task = await start_loop(agent, clock)
    await clock.advance(2)
    return api, clock, agent, task


def end_stream(api: FakeNodeApi, item: Transient | None = None) -> None:
    """The server ends every open watch (``None``) or fails it."""
    api.end_watches(item)


def restarts(agent: Agent, reason: str) -> float:
    value: float = agent.metrics.watch_restarts.labels(reason).get()
    return value


def touch(api: FakeNodeApi) -> None:
    """Another writer changes the Node: the open watch delivers an event."""
    assert api.node is not None
    api.put({**api.node, "metadata": {**api.node["metadata"], "labels": {"touched": "yes"}}})


def watches(api: FakeNodeApi) -> int:
    return sum(1 for c in api.calls if c.startswith("watch"))


@run_async
async def test_a_server_close_before_the_requested_timeout_counts_as_closed() -> None:
    api, clock, agent, task = await started()
    touch(api)
    opened = watches(api)
    await clock.advance(SERVER_TIMEOUT_FLOOR / 2)
    end_stream(api)
    await clock.advance(0)
    assert (restarts(agent, "closed"), restarts(agent, "timeout")) == (1, 0)
    assert watches(api) == opened + 1  # events were seen: reconnect at once
    await stop(task)


@run_async
async def test_an_end_after_the_shortest_requested_timeout_counts_as_timeout() -> None:
    api, clock, agent, task = await started()
    await clock.advance(300)
    end_stream(api)
    await clock.advance(0)
    assert (restarts(agent, "timeout"), restarts(agent, "closed")) == (1, 0)
    await stop(task)


@run_async
async def test_a_watch_closed_at_once_without_events_reconnects_after_a_backoff() -> None:
    api, clock, agent, task = await started()
    end_stream(api)  # the start-up watch delivered (the echoes of the first writes)...
    await clock.advance(0)
    opened = watches(api)  # ...so it was reopened at once
    end_stream(api)  # this one delivered nothing: a server that hangs up at once
    await clock.advance(0.3)
    assert watches(api) == opened  # WATCH_BACKOFF: 0.5 s ±20 %
    await clock.advance(1.0)
    assert watches(api) == opened + 1
    assert restarts(agent, "closed") == 2
    await stop(task)


@run_async
async def test_a_failed_watch_counts_as_error() -> None:
    api, clock, agent, task = await started()
    end_stream(api, Transient(0, "ConnectionReset", "connection reset"))
    await clock.advance(1.0)
    assert (restarts(agent, "error"), restarts(agent, "closed")) == (1, 0)
    await stop(task)
