"""The agent loop with a FakeClock, a fake Node API and fake detection."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from local_ccm import names
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.config import AgentConfig, TypeSettings
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.options import AgentOptions
from local_ccm.agent.run import EXIT_PRECONDITION, Agent, LoopSettings
from local_ccm.cli.agent import permissions
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import Conflict, Invalid, Transient
from local_ccm.kube.nodes import Access
from local_ccm.runtime.process import Process, run_process
from local_ccm.runtime.serve import Servers
from tests.fakes.agent import FakeDetector, FakeKernel, run_async, start_loop, stop
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi, SentPatch
from tests.support.options import load_agent as load_options
from tests.unit.agent.builders import EXT4, INT4, UNINITIALIZED, found, no_route, node

CONFIG = AgentConfig(
    internal=TypeSettings(targets=(found("192.0.2.1").address,)),
    external=TypeSettings(targets=(found("203.0.113.1").address,)),
)
SETTINGS = LoopSettings(
    node_name="n1", reconcile_interval=1.0, resync_interval=60.0, settle_time=1.0
)
BOTH: dict[DetectorKey, Detection] = {INT4: found("192.0.2.10"), EXT4: found("198.51.100.10")}


def make(
    api: FakeNodeApi,
    detector: FakeDetector,
    clock: FakeClock,
    settings: LoopSettings = SETTINGS,
    kernel: FakeKernel | None = None,
) -> Agent:
    changes = None if kernel is None else kernel.changes
    return Agent(settings, CONFIG, api, detector, clock=clock, metrics=AgentMetrics(),
                 changes=changes)  # fmt: skip


def tainted_node() -> dict[str, Any]:
    return node("", taints=[UNINITIALIZED])


A = TypeVar("A", bound=FakeNodeApi)


def tainted_api(api: A) -> A:
    """``api`` holding a tainted Node."""
    api.put(tainted_node())
    return api


def tainted() -> tuple[FakeNodeApi, FakeDetector, FakeClock]:
    """A tainted Node ``n1``, both detectors finding an address, a fake clock."""
    return tainted_api(FakeNodeApi("n1")), FakeDetector(BOTH), FakeClock()


async def started(
    api: FakeNodeApi, detector: FakeDetector, clock: FakeClock, kernel: FakeKernel | None = None
) -> tuple[Agent, asyncio.Task[int]]:
    agent = make(api, detector, clock, kernel=kernel)
    task = await start_loop(agent, clock)
    await clock.advance(0)
    return agent, task


def paths(patch: SentPatch) -> list[str]:
    return [f"{op['op']} {op['path']}" for op in patch.operations]


def addresses(api: FakeNodeApi) -> list[tuple[str, str]]:
    assert api.node is not None
    return [(a["type"], a["address"]) for a in api.node["status"]["addresses"]]


@run_async
async def test_startup_lists_writes_addresses_then_removes_taint_then_watches_from_the_write() -> (
    None
):
    api, detector, clock = tainted()
    _agent, task = await started(api, detector, clock)
    assert api.calls[0] == "watch initial"  # a LIST and a WATCH in one request
    assert "list" not in api.calls
    assert [p.subresource for p in api.patches] == ["status", None]
    assert "add /status/addresses" in paths(api.patches[0])
    assert "remove /spec/taints/0" in paths(api.patches[1])
    assert addresses(api) == [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.10")]
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    assert any(c.startswith("watch") for c in api.calls)
    assert {"AddressesUpdated", "NodeInitialized"} <= set(api.reasons())
    await stop(task)


@run_async
async def test_ticks_make_no_api_request_when_nothing_changed() -> None:
    api, detector, clock = tainted()
    agent, task = await started(api, detector, clock)
    await clock.advance(5)  # let the echo of our writes and the Events settle
    before, runs = api.api_calls(), detector.runs
    await clock.advance(30)
    assert detector.runs >= runs + 25  # one detection per tick ...
    assert api.api_calls() == before  # ... and no request
    noop = agent.metrics.passes.labels("tick", "noop").get()
    assert noop >= 25
    await stop(task)


@run_async
async def test_a_burst_of_triggers_is_debounced_into_one_pass() -> None:
    api, detector, clock = tainted()
    settings = LoopSettings(node_name="n1", reconcile_interval=100.0, resync_interval=600.0)
    kernel = FakeKernel()
    agent = make(api, detector, clock, settings, kernel)
    task = await start_loop(agent, clock)
    await clock.advance(2)
    runs = detector.runs
    for _ in range(5):
        kernel.fire()
        await clock.advance(0.1)
    await clock.advance(0.1)
    assert detector.runs == runs  # quiet for only 200 ms: no pass yet
    await clock.advance(0.1)
    assert detector.runs == runs + 1
    await stop(task)


@run_async
async def test_a_continuous_burst_still_passes_at_most_one_second_after_its_first_trigger() -> None:
    api, detector, clock = tainted()
    settings = LoopSettings(node_name="n1", reconcile_interval=100.0, resync_interval=600.0)
    kernel = FakeKernel()
    agent = make(api, detector, clock, settings, kernel)
    task = await start_loop(agent, clock)
    await clock.advance(2)
    runs = detector.runs
    for _ in range(15):  # a trigger every 100 ms for 1.5 s
        kernel.fire()
        await clock.advance(0.1)
    assert detector.runs == runs + 1
    await stop(task)


@run_async
async def test_conflict_rereads_and_recomputes_and_never_resends_the_stale_patch() -> None:
    api, detector, clock = tainted()
    raced: list[bool] = []

    def racer(fake: FakeNodeApi) -> None:
        if not raced:  # another writer adds a taint between our read and our write
            raced.append(True)
            assert fake.node is not None
            other = {"key": "example.com/other", "effect": "NoSchedule"}
            fake.put({**fake.node, "spec": {"taints": [other, *fake.node["spec"]["taints"]]}})

    api.before_patch = racer
    agent, task = await started(api, detector, clock)
    first, second = api.patches[0], api.patches[1]
    assert first.operations[0]["value"] != second.operations[0]["value"]  # fresh RV
    assert api.calls[:4] == ["watch initial", "patch status", "list", "patch status"]
    assert api.node is not None
    assert [t["key"] for t in api.node["spec"]["taints"]] == ["example.com/other"]
    conflicts = agent.metrics.writes.labels("addresses", "conflict").get()
    assert conflicts == 1
    await stop(task)


@run_async
async def test_five_conflicts_in_a_row_fall_back_to_backoff() -> None:
    api, detector, clock = tainted()
    api.fail_next = [Conflict(409, "Conflict", "conflict") for _ in range(5)]
    agent, task = await started(api, detector, clock)
    assert api.calls.count("patch status") == 5
    assert agent.metrics.passes.labels("startup", "failed").get() == 1
    await clock.run_until(lambda: api.calls.count("patch status") == 6, timeout=2)
    assert api.node is not None
    assert addresses(api)
    await stop(task)


@run_async
async def test_transient_error_is_retried_after_a_backoff_honouring_retry_after() -> None:
    api, detector, clock = tainted()
    api.fail_next = [Transient(429, "TooManyRequests", "busy", retry_after=7.0)]
    _agent, task = await started(api, detector, clock)
    assert api.calls.count("patch status") == 1
    await clock.advance(6.5)
    assert api.calls.count("patch status") == 1
    await clock.advance(2)
    assert api.calls.count("patch status") == 2
    await stop(task)


@run_async
async def test_an_invalid_write_is_not_retried_until_the_inputs_change() -> None:
    api, detector, clock = tainted()
    api.fail_next = [Invalid(422, "Invalid", "Node is invalid")]
    _agent, task = await started(api, detector, clock)
    await clock.advance(10)
    assert api.calls.count("patch status") == 1
    assert "NodeUpdateRejected" in api.reasons()
    detector.set({INT4: found("192.0.2.11"), EXT4: found("198.51.100.10")})
    await clock.advance(2)
    assert api.calls.count("patch status") == 2
    await stop(task)


@run_async
async def test_a_replacement_is_written_only_after_the_settle_time() -> None:
    api, detector, clock = tainted()
    kernel = FakeKernel()
    _agent, task = await started(api, detector, clock, kernel)
    await clock.advance(3)
    writes = api.calls.count("patch status")
    detector.set({INT4: found("192.0.2.10"), EXT4: found("198.51.100.20")})
    kernel.fire()
    await clock.advance(0.5)
    assert api.calls.count("patch status") == writes  # first sighting: settling
    await clock.advance(1.5)
    assert api.calls.count("patch status") == writes + 1
    assert ("ExternalIP", "198.51.100.20") in addresses(api)
    await stop(task)


@run_async
async def test_an_address_dropped_and_readded_within_the_settle_time_is_never_written() -> None:
    api, detector, clock = tainted()
    kernel = FakeKernel()
    agent, task = await started(api, detector, clock, kernel)
    await clock.advance(3)
    before = agent.metrics.writes.labels("addresses", "success").get()
    for _ in range(5):
        detector.set({INT4: found("192.0.2.10"), EXT4: found("198.51.100.99")})
        kernel.fire()
        await clock.advance(0.3)
        detector.set(BOTH)
        kernel.fire()
        await clock.advance(0.3)
    await clock.advance(5)
    assert agent.metrics.writes.labels("addresses", "success").get() == before
    await stop(task)


@run_async
async def test_a_failed_detector_keeps_the_last_good_address_and_reports_the_failure_once() -> None:
    api, detector, clock = tainted()
    _agent, task = await started(api, detector, clock)
    detector.set({INT4: found("192.0.2.10"), EXT4: no_route()})
    await clock.advance(5)
    assert ("ExternalIP", "198.51.100.10") in addresses(api)
    assert api.node is not None
    condition = [
        c for c in api.node["status"]["conditions"] if c["type"] == names.ADDRESSES_SYNCED_CONDITION
    ]
    assert (condition[0]["status"], condition[0]["reason"]) == ("False", "NoRoute")
    assert api.reasons().count("AddressDetectionFailed") == 1
    detector.set(BOTH)
    await clock.advance(3)
    assert "AddressDetectionRecovered" in api.reasons()
    await stop(task)


@run_async
async def test_node_deleted_sends_nothing_and_a_recreated_node_is_initialised() -> None:
    api, detector, clock = tainted()
    agent, task = await started(api, detector, clock)
    await clock.advance(2)
    api.put(None)
    await clock.advance(1)
    patches = len(api.patches)
    await clock.advance(10)
    assert len(api.patches) == patches
    assert agent.metrics.node_present.get() == 0
    fresh = tainted_node()
    fresh["metadata"]["uid"] = "uid-2"
    api.put(fresh, "ADDED")
    await clock.advance(2)
    assert addresses(api) == [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.10")]
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    assert agent.metrics.node_present.get() == 1
    await stop(task)


class AccessReviews:
    """The process runtime's access reviews (no rules review), logged as "ssar" in the fake
    API's calls: `denied` holds permissions answered False, as "verb resource[/sub]";
    `fail_next` are raised by the next reviews."""

    def __init__(self, api: FakeNodeApi) -> None:
        self.api, self.denied, self.fail_next = api, set[str](), list[Exception]()

    async def rules(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return ()

    async def allowed(self, permission: Access) -> bool:
        self.api.calls.append("ssar")
        if self.fail_next:
            raise self.fail_next.pop(0)
        sub = f"/{permission.subresource}" if permission.subresource else ""
        return f"{permission.verb} {permission.resource}{sub}" not in self.denied


def agent_process(agent: Agent, reviews: AccessReviews, clock: FakeClock) -> Process:
    """The agent's loop as its binary runs it: the runtime's access review first."""
    cluster = ClusterConfig(server="https://192.0.2.1:6443", source="fake")
    options = load_options(["--node-name=n1"], {}, resolve=lambda *_: cluster)
    assert isinstance(options, AgentOptions)
    return Process(
        prog=names.AGENT, clock=clock, stop=asyncio.Event(),
        serve=lambda healthz, readyz: Servers([], None, None), reviews=reviews,
        permissions=permissions(options), work=lambda _: agent.run_loop(),
    )  # fmt: skip


@run_async
async def test_missing_permissions_exit_4() -> None:
    api, detector, clock = tainted()
    reviews = AccessReviews(api)
    reviews.denied = {"patch nodes/status", "create events"}
    agent = make(api, detector, clock)
    assert await run_process(agent_process(agent, reviews, clock)) == EXIT_PRECONDITION
    assert "list" not in api.calls


@run_async
async def test_an_unreachable_api_server_during_the_permission_check_is_waited_for() -> None:
    api, detector, clock = tainted()
    refused = Transient(0, "ConnectionRefused", "connection refused")
    reviews = AccessReviews(api)
    reviews.fail_next = [refused for _ in range(3)]
    agent = make(api, detector, clock)
    process = agent_process(agent, reviews, clock)
    task = asyncio.get_running_loop().create_task(run_process(process))
    await clock.run_until(lambda: agent.health.first_pass, timeout=60)
    assert not task.done()
    assert api.calls[:4] == ["ssar"] * 4
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    await stop(task)


@run_async
async def test_run_once_succeeds_when_the_final_state_is_reached() -> None:
    api, detector, clock = tainted()
    assert await make(api, detector, clock).run_once() == 0
    assert api.node is not None
    assert not api.node["spec"].get("taints")


@run_async
async def test_run_once_fails_without_any_address_and_for_a_missing_node() -> None:
    api, detector, clock = (
        tainted_api(FakeNodeApi("n1")),
        FakeDetector({INT4: no_route()}),
        FakeClock(),
    )
    assert await make(api, detector, clock).run_once() == 1
    assert api.node is not None
    assert api.node["spec"]["taints"]
    missing = FakeNodeApi("n1")
    assert await make(missing, detector, clock).run_once() == 1


@run_async
async def test_run_once_retries_transient_errors_a_bounded_number_of_times() -> None:
    api, detector, clock = tainted()
    api.fail_next = [Transient(503, "ServiceUnavailable", "down") for _ in range(10)]
    agent = make(api, detector, clock)
    task = asyncio.get_running_loop().create_task(agent.run_once())
    await clock.run_until(task.done, timeout=600)
    assert task.result() == 1
    assert api.calls.count("patch status") == 4  # one attempt + 3 retries


@run_async
async def test_a_server_without_initial_events_is_listed_then_watched_from_the_list() -> None:
    """Before Kubernetes 1.32 (WatchList off) the streaming read is refused: LIST, then WATCH."""
    api, detector, clock = tainted()
    api.serves_initial_events = False
    _agent, task = await started(api, detector, clock)
    assert api.calls[:2] == ["watch initial", "list"]
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    assert any(c.startswith("watch 1") for c in api.calls)  # from the list's version
    await stop(task)


class BrokenOnce(FakeDetector):
    """A detector with a bug that shows once: its first call raises."""

    async def __call__(self) -> Mapping[DetectorKey, Detection]:
        if self.runs == 0:
            self.runs += 1
            raise RuntimeError("a bug in detection")
        return await super().__call__()


@run_async
async def test_an_unexpected_error_in_a_pass_is_retried_with_backoff_not_the_end_of_the_agent() -> (
    None
):
    api = tainted_api(FakeNodeApi("n1"))
    detector, clock = BrokenOnce(BOTH), FakeClock()
    agent = make(api, detector, clock)
    task = asyncio.get_running_loop().create_task(agent.run_loop())
    await clock.advance(0.5)
    assert detector.runs == 1  # the first pass failed ...
    assert not api.patches
    assert not task.done()  # ... and the agent still runs
    await clock.run_until(lambda: agent.health.first_pass, timeout=5)  # the worker's backoff
    assert addresses(api) == [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.10")]
    assert api.node is not None
    assert not api.node["spec"].get("taints")
    await stop(task)
