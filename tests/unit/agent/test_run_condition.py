"""The condition for Nodes without an InternalIP:
``False/NoInternalIP`` only while gate 3 holds the taint (or there is no IP at all); an
ExternalIP-only Node that was initialised is ``True`` and gets a rate-limited warning."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from local_ccm import names
from local_ccm.agent.core.addresses import AddressPlan
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.config import AgentConfig, TypeSettings
from local_ccm.agent.core.gates import desired_condition
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.run import Agent
from tests.fakes.agent import FakeDetector, run_async, start_loop, stop
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi
from tests.unit.agent.builders import EXT4, addrs, detections, found
from tests.unit.agent.test_run_loop import SETTINGS, tainted_api

EXTERNAL_ONLY = AgentConfig(  # the original's documented default: ExternalIP detection only
    internal=TypeSettings(), external=TypeSettings(targets=(found("203.0.113.1").address,))
)
EXT: dict[DetectorKey, Detection] = {EXT4: found("198.51.100.10")}


def condition(api: FakeNodeApi) -> tuple[str, str]:
    assert api.node is not None
    for c in api.node["status"].get("conditions") or ():
        if c["type"] == names.ADDRESSES_SYNCED_CONDITION:
            return str(c["status"]), str(c["reason"])
    raise AssertionError("no condition")


async def started(
    config: AgentConfig, api: FakeNodeApi, clock: FakeClock
) -> tuple[Agent, asyncio.Task[int]]:
    agent = Agent(SETTINGS, config, api, FakeDetector(EXT), clock=clock, metrics=AgentMetrics())
    task = await start_loop(agent, clock)
    await clock.advance(2)
    return agent, task


def no_internal_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        1
        for r in caplog.records
        if r.levelno == logging.WARNING and "without an InternalIP" in r.getMessage()
    )


# ------------------------------------------------------------------ the pure function
def test_external_only_plan_with_every_detector_found_is_true() -> None:
    plan = AddressPlan(addrs("Ext 198.51.100.10"), (), ())
    got = desired_condition(plan, detections(ext4=found("198.51.100.10")))
    assert (got.status, got.reason) == ("True", "AddressesSynced")


def test_no_internal_ip_when_gate_3_holds_the_taint() -> None:
    plan = AddressPlan(addrs("Ext 198.51.100.10"), (), ())
    got = desired_condition(plan, EXT, blocked=("no_internal_ip",))
    assert (got.status, got.reason) == ("False", "NoInternalIP")


def test_no_internal_ip_when_there_is_no_ip_at_all() -> None:
    plan = AddressPlan(addrs("Hostname n1"), (), ())
    got = desired_condition(plan, {})
    assert (got.status, got.reason) == ("False", "NoInternalIP")


# ------------------------------------------------------------------ in the loop
@run_async
async def test_an_external_only_node_is_initialised_with_condition_true_and_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock = tainted_api(FakeNodeApi("n1")), FakeClock()
    with caplog.at_level(logging.WARNING):
        _agent, task = await started(EXTERNAL_ONLY, api, clock)
        assert api.node is not None
        assert not api.node["spec"].get("taints")
        assert condition(api) == ("True", "AddressesSynced")
        assert no_internal_warnings(caplog) == 1
        await clock.advance(300)  # passes on every tick: still one warning
        assert no_internal_warnings(caplog) == 1
        await clock.advance(301)  # once per 10 min
        assert no_internal_warnings(caplog) == 2
    assert "InitializationBlocked" not in api.reasons()
    await stop(task)


@run_async
async def test_require_internal_ip_holds_an_external_only_node_with_no_internal_ip() -> None:
    api, clock = tainted_api(FakeNodeApi("n1")), FakeClock()
    agent, task = await started(replace(EXTERNAL_ONLY, require_internal_ip=True), api, clock)
    assert api.node is not None
    assert api.node["spec"]["taints"]
    assert condition(api) == ("False", "NoInternalIP")
    assert "InitializationBlocked" in api.reasons()
    assert agent.metrics.blocked.labels("no_internal_ip").get() == 1
    await stop(task)


@run_async
async def test_with_remove_taint_false_a_tainted_external_only_node_is_not_reported_as_held() -> (
    None
):
    api, clock = tainted_api(FakeNodeApi("n1")), FakeClock()
    config = replace(EXTERNAL_ONLY, remove_taint=False, require_internal_ip=True)
    _agent, task = await started(config, api, clock)
    assert condition(api) == ("True", "AddressesSynced")  # nothing holds the taint
    await stop(task)
