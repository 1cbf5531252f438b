"""The lifecycle controller (local_ccm.lifecycle.run) run by the kit's worker as the binary
runs it, with an in-memory NodeApi, a FakeProber and a FakeClock: nothing sleeps, nothing
leaves the process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from local_ccm.cli.lifecycle import WORKERS
from local_ccm.kube import errors as ke
from local_ccm.kube.informer import StreamEnd
from local_ccm.lifecycle.api import Obj
from local_ccm.lifecycle.core.health import Scope
from local_ccm.lifecycle.core.state import LoopConfig, PipelineSettings
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.run import NODES, Controller
from local_ccm.runtime.controller import RequeueAfter
from local_ccm.runtime.process import Status
from local_ccm.runtime.worker import Worker
from local_ccm.validate import CountOrPercent
from tests.fakes.clock import START_WALL, FakeClock, settle
from tests.fakes.lifecycle import FakeProber, health_checks, raw_node
from tests.fakes.nodes import FakeNodeApi

INTERVAL = 1.0
SETTINGS = PipelineSettings(interval=INTERVAL, max_unhealthy=CountOrPercent(100, percent=True))


class Harness:
    def __init__(self, api: FakeNodeApi, prober: FakeProber, config: LoopConfig) -> None:
        self.api, self.prober, self.config = api, prober, config
        self.clock = FakeClock(wall=START_WALL)
        self.metrics = LifecycleMetrics()
        self.controller = Controller(
            config, api, prober, self.clock, metrics=self.metrics,
            identity="test_0123456789abcdef",
        )  # fmt: skip
        self.worker = Worker(self.controller, clock=self.clock, backoff=(INTERVAL, INTERVAL),
                             metrics=self.metrics.queue, workers=WORKERS)  # fmt: skip

    def value(self, name: str, **labels: str) -> float:
        sample = self.metrics.registry.get_sample_value("local_ccm_lifecycle_" + name, labels)
        return sample or 0.0


def config(**changes: Any) -> LoopConfig:
    settings = PipelineSettings(**{**SETTINGS.__dict__, **changes.pop("settings", {})})
    scope = changes.pop("scope", Scope())
    return LoopConfig(scope=scope, settings=settings, timeout=10.0, **changes)


def run(
    nodes: Sequence[Obj],
    body: Callable[[Harness], Awaitable[None]],
    *,
    prober: FakeProber | None = None,
    cfg: LoopConfig | None = None,
) -> Harness:
    async def main() -> Harness:
        harness = Harness(FakeNodeApi(nodes=nodes), prober or FakeProber(), cfg or config())
        task = asyncio.create_task(harness.worker.run())
        await settle()
        try:
            await body(harness)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return harness

    return asyncio.run(main())


def test_unreachable_eligible_node_is_deleted_once_with_events() -> None:
    async def body(h: Harness) -> None:
        await h.clock.run_until(lambda: "w1" not in h.api.nodes, timeout=10)
        await h.clock.advance(5 * INTERVAL)

    h = run([raw_node("w1")], body)
    assert h.api.deletes == [("w1", False)]
    assert h.api.reasons("w1")[:1] == ["CheckingReachability"]
    assert "DeletingNode" in h.api.reasons("w1")
    assert h.value("deletions_total", result="deleted") == 1
    assert h.value("probes_total", kind="icmp", family="ipv4", outcome="no_reply") >= 1
    assert h.api.lists == 1  # no periodic LIST


def test_reachable_node_is_kept_and_announced_once() -> None:
    async def body(h: Harness) -> None:
        await h.clock.advance(6 * INTERVAL)

    h = run([raw_node("r1", addresses=[("InternalIP", "127.0.0.2")])], body,
            prober=FakeProber({"127.0.0.2": "reply"}))  # fmt: skip
    assert h.api.deletes == []
    assert h.api.reasons("r1").count("NodeReachable") == 1
    assert h.value("probes_total", kind="icmp", family="ipv4", outcome="reply") >= 5


def test_dry_run_sends_a_dry_run_delete_once_per_episode() -> None:
    async def body(h: Harness) -> None:
        await h.clock.advance(6 * INTERVAL)

    h = run([raw_node("d1")], body, cfg=config(settings={"dry_run": True}))
    assert h.api.deletes == [("d1", True)]
    assert "d1" in h.api.nodes
    assert h.api.reasons("d1").count("NodeDeletionDryRun") == 1
    assert h.value("deletions_total", result="dry_run") == 1


class HookedProber(FakeProber):
    """Runs `hook` while probing: the world changes between the probe and the delete."""

    def __init__(self, hook: Callable[[], None]) -> None:
        super().__init__()
        self.hook = hook

    async def probe(self, addresses: Sequence[Any], kinds: Sequence[Any]) -> Any:
        self.hook()
        return await super().probe(addresses, kinds)


def test_node_recovered_before_delete_is_not_deleted_and_aborted() -> None:
    api = FakeNodeApi(nodes=[raw_node("a1")])

    def recover() -> None:
        # The API says Ready, the watch has not told the cache yet: the fresh GET decides.
        api.nodes["a1"]["status"]["conditions"][0]["status"] = "True"

    async def main() -> Harness:
        h = Harness(api, HookedProber(recover), config())
        task = asyncio.create_task(h.worker.run())
        await h.clock.advance(3 * INTERVAL)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return h

    h = asyncio.run(main())
    assert h.api.deletes == []
    assert h.api.reasons("a1").count("DeletionAborted") == 1
    assert h.value("deletions_total", result="aborted") >= 1


def test_changed_node_fails_the_precondition_and_survives() -> None:
    class RacingApi(FakeNodeApi):
        async def get_node(self, name: str) -> Obj:
            fresh = await super().get_node(name)
            self.store(self.nodes[name])  # someone writes between our GET and DELETE
            return fresh

    async def main() -> Harness:
        h = Harness(RacingApi(nodes=[raw_node("c1")]), FakeProber(), config())
        task = asyncio.create_task(h.worker.run())
        await h.clock.advance(2 * INTERVAL)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return h

    h = asyncio.run(main())
    assert "c1" in h.api.nodes
    assert h.value("deletions_total", result="precondition_failed") >= 1
    assert h.value("deletions_total", result="deleted") == 0


def test_protected_and_ready_nodes_are_never_probed() -> None:
    scope = Scope(protected=parse("team=db"))

    async def body(h: Harness) -> None:
        await h.clock.advance(3 * INTERVAL)

    nodes = [raw_node("p1", labels={"team": "db"}), raw_node("ok", ready="True")]
    h = run(nodes, body, cfg=config(scope=scope))
    assert h.prober.calls == []
    assert h.api.deletes == []


def parse(text: str) -> Any:
    from local_ccm.lifecycle.core.health import parse_protected  # noqa: PLC0415

    return parse_protected(text)


def test_watch_gone_relists_and_replaces_the_cache() -> None:
    async def body(h: Harness) -> None:
        del h.api.nodes["old"]  # deleted while the watch was expired: only a LIST tells
        h.api.store(raw_node("new", ready="True"))
        h.api.end_watches(ke.Gone(410, "Expired", "too old"))
        await settle()

    h = run([raw_node("old", ready="True")], body)
    assert set(h.controller.cache) == {"new"}
    assert h.api.lists == 2
    restarts = {"controller": "node-lifecycle", "resource": "nodes", "reason": "gone"}
    assert h.metrics.registry.get_sample_value("local_ccm_watch_restarts_total", restarts) == 1


def test_node_turning_eligible_is_evaluated_without_waiting_a_full_interval() -> None:
    since = START_WALL - timedelta(seconds=9.5)

    async def body(h: Harness) -> None:
        await h.clock.advance(0.6)

    h = run([raw_node("soon", since=since)], body, cfg=config(settings={"interval": 30.0}))
    assert h.prober.calls, "the Node became eligible 0.5 s in and must have been probed"


def test_breaker_open_blocks_deletion_and_reports() -> None:
    cfg = config(settings={"max_unhealthy": CountOrPercent(0, percent=False)})
    sick = raw_node("u1", taints=())  # untainted NotReady: counts as unhealthy

    async def body(h: Harness) -> None:
        await h.clock.advance(3 * INTERVAL)

    h = run([raw_node("z"), sick], body, cfg=cfg)
    assert h.api.deletes == []
    assert h.value("circuit_breaker_open") == 1
    assert "DeletionBlockedByCircuitBreaker" in h.api.reasons("z")


def test_readiness_fails_after_the_watch_is_down_for_two_intervals() -> None:
    h = Harness(FakeNodeApi(), FakeProber(), config())
    assert h.controller.ready() == (False, "the Node cache is not synced")
    h.controller.informer.prime([raw_node("n", ready="True")], "1")
    h.controller._stream_ended(StreamEnd("error", OSError("connection reset")))
    assert h.controller.ready() == (True, "ok")

    async def later() -> None:
        await h.clock.advance(2.5 * INTERVAL)

    asyncio.run(later())
    assert h.controller.ready() == (False, "the Node watch is disconnected")
    h.controller._watching()
    assert h.controller.ready() == (True, "ok")


def test_liveness_ignores_api_outages_but_not_a_stuck_loop() -> None:
    clock = FakeClock()
    status = Status(leading=True, last_tick=clock.monotonic())
    healthz, _ = health_checks(status, clock)
    assert all(ok for _, ok, _ in healthz.run())

    async def later() -> None:
        await clock.advance(11)

    asyncio.run(later())
    assert [name for name, ok, _ in healthz.run() if not ok] == ["loop"]


def test_liveness_fails_once_evaluations_stop_coming() -> None:
    async def main() -> tuple[list[str], list[str]]:
        h = Harness(FakeNodeApi(nodes=[raw_node("ok", ready="True")]), FakeProber(), config())
        h.controller.informer.prime([raw_node("ok", ready="True")], "1")
        assert isinstance(await h.controller.sync(NODES), RequeueAfter)
        healthz, _ = health_checks(Status(leading=True, last_tick=h.clock.monotonic()), h.clock,
                                   evaluating=h.controller.evaluating)  # fmt: skip
        before = [name for name, ok, _ in healthz.run() if not ok]
        h.clock.step(61.0)  # the event loop still turns, no evaluation came
        return before, [name for name, ok, detail in healthz.run() if not ok and "60s" in detail]

    assert asyncio.run(main()) == ([], ["evaluation"])
