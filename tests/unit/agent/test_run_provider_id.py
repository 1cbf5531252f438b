"""--enable-azure-provider-id in the loop with a scripted
:class:`ProviderIdSource`: nothing here contacts instance metadata."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.options import AgentOptions
from local_ccm.agent.providerid import AzureImds, ProviderIdError
from local_ccm.agent.run import Agent
from local_ccm.cli.agent import build_agent
from local_ccm.kube.config import ClusterConfig
from tests.fakes.agent import FakeDetector, run_async, start_loop, stop
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi, SentPatch
from tests.support.options import load_agent as load_options
from tests.unit.agent.test_run_loop import BOTH, CONFIG, SETTINGS, tainted_api, tainted_node

AZURE_ID = "azure:///subscriptions/s-1/resourceGroups/rg/providers/Microsoft.Compute/vm/n1"


@dataclass
class ScriptedSource:
    """Answers ``fetch()`` from a script: a value, or a ProviderIdError to raise."""

    script: list[str | ProviderIdError] = field(default_factory=list)
    calls: int = 0

    async def fetch(self) -> str:
        self.calls += 1
        answer = self.script.pop(0)
        if isinstance(answer, ProviderIdError):
            raise answer
        return answer


def refused() -> ProviderIdError:
    return ProviderIdError("ConnectionRefusedError: [Errno 111]", transport=True)


def http_500() -> ProviderIdError:
    return ProviderIdError("HTTP 500 Internal Server Error", transport=False)


def agent_with(source: ScriptedSource, api: FakeNodeApi, clock: FakeClock) -> Agent:
    return Agent(
        SETTINGS,
        CONFIG,
        api,
        FakeDetector(BOTH),
        clock=clock,
        metrics=AgentMetrics(),
        rng=random.Random(7),
        provider_ids=source,
    )


async def started(agent: Agent, clock: FakeClock) -> asyncio.Task[int]:
    task = await start_loop(agent, clock, timeout=60)
    await clock.advance(0)
    return task


def main_patches(api: FakeNodeApi) -> list[SentPatch]:
    return [p for p in api.patches if p.subresource is None]


def provider_id(api: FakeNodeApi) -> str | None:
    assert api.node is not None
    value = api.node["spec"].get("providerID")
    return None if value is None else str(value)


@run_async
async def test_fetched_provider_id_is_set_in_the_taint_removal_patch() -> None:
    api, clock, source = tainted_api(FakeNodeApi("n1")), FakeClock(), ScriptedSource([AZURE_ID])
    task = await started(agent_with(source, api, clock), clock)
    [patch] = main_patches(api)
    ops = [(op["op"], op["path"]) for op in patch.operations]
    assert ("add", "/spec/providerID") in ops
    assert ("remove", "/spec/taints/0") in ops
    assert provider_id(api) == AZURE_ID
    assert "ProviderIDSet" in api.reasons()
    await stop(task)


@run_async
async def test_transport_error_means_not_azure_asks_once_and_blocks_nothing() -> None:
    api, clock, source = tainted_api(FakeNodeApi("n1")), FakeClock(), ScriptedSource([refused()])
    agent = agent_with(source, api, clock)
    task = await started(agent, clock)
    await clock.advance(120)
    assert source.calls == 1
    assert provider_id(api) is None
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    blocked = agent.metrics.blocked.labels("provider_id_unavailable").get()
    assert blocked == 0
    await stop(task)


@run_async
async def test_error_answers_are_retried_with_backoff_and_given_up_after_three() -> None:
    api, clock = FakeNodeApi("n1"), FakeClock()
    source = ScriptedSource([http_500(), http_500(), http_500()])
    api.put(tainted_node())
    start = clock.monotonic()
    task = await started(agent_with(source, api, clock), clock)
    assert clock.monotonic() - start >= 0.8 + 1.6  # two backoff waits (±20 % jitter)
    await clock.advance(600)
    assert source.calls == 3
    assert provider_id(api) is None
    assert api.node is not None
    assert not api.node["spec"].get("taints")  # giving up does not block the taint
    await stop(task)


@run_async
async def test_an_error_answer_then_a_value_sets_the_provider_id() -> None:
    api, clock = FakeNodeApi("n1"), FakeClock()
    source = ScriptedSource([http_500(), AZURE_ID])
    api.put(tainted_node())
    task = await started(agent_with(source, api, clock), clock)
    assert source.calls == 2
    assert provider_id(api) == AZURE_ID
    await stop(task)


@run_async
async def test_the_result_is_cached_for_the_process_and_reused_for_a_recreated_node() -> None:
    api, clock, source = tainted_api(FakeNodeApi("n1")), FakeClock(), ScriptedSource([AZURE_ID])
    task = await started(agent_with(source, api, clock), clock)
    api.put(None)
    await clock.advance(2)
    fresh = tainted_node()
    fresh["metadata"]["uid"] = "uid-2"
    api.put(fresh, "ADDED")
    await clock.advance(3)
    assert source.calls == 1
    assert provider_id(api) == AZURE_ID
    await stop(task)


@run_async
async def test_run_once_sets_the_fetched_provider_id_and_exits_0() -> None:
    api, clock, source = tainted_api(FakeNodeApi("n1")), FakeClock(), ScriptedSource([AZURE_ID])
    assert await agent_with(source, api, clock).run_once() == 0
    assert provider_id(api) == AZURE_ID


@run_async
async def test_run_once_on_a_machine_without_instance_metadata_still_exits_0() -> None:
    api, clock, source = tainted_api(FakeNodeApi("n1")), FakeClock(), ScriptedSource([refused()])
    assert await agent_with(source, api, clock).run_once() == 0
    assert provider_id(api) is None


@run_async
async def test_an_existing_different_provider_id_is_reported_and_not_changed() -> None:
    api, clock, source = FakeNodeApi("n1"), FakeClock(), ScriptedSource([AZURE_ID])
    node = tainted_node()
    node["spec"]["providerID"] = "local://elsewhere"
    api.put(node)
    task = await started(agent_with(source, api, clock), clock)
    assert provider_id(api) == "local://elsewhere"
    assert "ProviderIDMismatch" in api.reasons()
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    await stop(task)


def fake_resolve(kubeconfig: str, apiserver: str, env: Mapping[str, str]) -> ClusterConfig:
    return ClusterConfig(server="https://192.0.2.1:6443", source="fake")


def test_the_flag_wires_azure_imds_and_nothing_is_fetched_while_building() -> None:
    argv = ["--node-name=n1", "--enable-azure-provider-id"]
    opts = load_options(argv, {}, resolve=fake_resolve)
    assert isinstance(opts, AgentOptions)
    agent = build_agent(opts, FakeNodeApi("n1"))
    assert isinstance(agent.provider_ids, AzureImds)
    assert agent.fetched_provider_id is None
    plain = load_options(["--node-name=n1"], {}, resolve=fake_resolve)
    assert isinstance(plain, AgentOptions)
    assert build_agent(plain, FakeNodeApi("n1")).provider_ids is None
