"""The lifecycle controller with NodeBMCs, run by the kit's worker as the binary runs it: an
in-memory Node API and NodeBMC API, a FakeProber and a FakeClock. What reaches the API: the
power-off request (guarded, once), the deletion for a System absent (no probe), the quorum
re-read of the NodeBMC before acting."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from local_ccm.cli.lifecycle import WORKERS
from local_ccm.kube import errors as ke
from local_ccm.kube.informer import Page
from local_ccm.lifecycle.api import Obj
from local_ccm.lifecycle.core.model import OUT_OF_SERVICE_ANNOTATION
from local_ccm.lifecycle.core.state import LoopConfig
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.run import Controller
from local_ccm.names import POWER_OFF_ANNOTATION
from local_ccm.runtime.events import rfc3339
from local_ccm.runtime.worker import Worker
from tests.fakes.clock import START_WALL, FakeClock, settle
from tests.fakes.informer import FakeListWatch
from tests.fakes.lifecycle import FakeProber, raw_node
from tests.fakes.nodes import FakeNodeApi, apply_json_patch
from tests.unit.lifecycle.test_run_loop import INTERVAL, config

BMC = {"bmc_power_state": True}
FENCING = {**BMC, "out_of_service_taint": True, "bmc_fencing": True}


def nodebmc(name: str, power: str, **status: Any) -> Obj:
    reachable, reason = ("False", "SystemNotFound") if power == "Absent" else ("True", "Contacted")
    return {
        "metadata": {"name": name, "uid": f"b-{name}", "resourceVersion": "1", "generation": 1},
        "status": {"observedGeneration": 1, "powerState": power,
                   "lastContact": rfc3339(START_WALL),
                   "conditions": [{"type": "Reachable", "status": reachable, "reason": reason}],
                   **status},
    }  # fmt: skip


class FakeBmcApi:
    """NodeBMCs held in memory: listed and watched through a `FakeListWatch`, read afresh,
    patched with JSON Patches (a failed `test` is a Conflict); `fresh` overrides what a
    quorum read answers (the object changed after the cache saw it)."""

    def __init__(self, objs: Sequence[Obj]) -> None:
        self.objs = {o["metadata"]["name"]: copy.deepcopy(o) for o in objs}
        self.source = FakeListWatch()
        self.source.pages.append(Page(list(self.objs.values()), "1"))
        self.fresh: dict[str, Obj] = {}
        self.patches: list[tuple[str, list[Obj]]] = []

    def list_watch_nodebmcs(self) -> FakeListWatch:
        return self.source

    async def get_nodebmc(self, name: str) -> Obj:
        found = self.fresh.get(name) or self.objs.get(name)
        if found is None:
            raise ke.NotFound(404, "NotFound", name)
        return copy.deepcopy(found)

    async def patch_nodebmc(self, name: str, operations: Sequence[Obj]) -> Obj:
        self.patches.append((name, list(operations)))
        stored = apply_json_patch(self.objs[name], operations)
        stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        self.objs[name] = stored
        self.send("MODIFIED", stored)
        return copy.deepcopy(stored)

    def send(self, kind: str, obj: Obj) -> None:
        self.objs[obj["metadata"]["name"]] = copy.deepcopy(obj)
        if self.source.streams:
            self.source.stream.send(kind, obj)


class Harness:
    def __init__(self, nodes: FakeNodeApi, bmcs: FakeBmcApi, cfg: LoopConfig) -> None:
        self.api, self.bmcs, self.prober = nodes, bmcs, FakeProber()
        self.clock = FakeClock(wall=START_WALL)
        self.metrics = LifecycleMetrics()
        self.controller = Controller(cfg, nodes, self.prober, self.clock, metrics=self.metrics,
                                     identity="test", bmcs=bmcs)  # fmt: skip
        self.worker = Worker(self.controller, clock=self.clock, backoff=(INTERVAL, INTERVAL),
                             metrics=self.metrics.queue, workers=WORKERS)  # fmt: skip

    def value(self, name: str, **labels: str) -> float:
        sample = self.metrics.registry.get_sample_value("local_ccm_lifecycle_" + name, labels)
        return sample or 0.0


def run(nodes: Sequence[Obj], bmcs: Sequence[Obj] | FakeBmcApi, settings: dict[str, Any],
        body: Callable[[Harness], Awaitable[None]]) -> Harness:  # fmt: skip
    async def main() -> Harness:
        fake = bmcs if isinstance(bmcs, FakeBmcApi) else FakeBmcApi(bmcs)
        h = Harness(FakeNodeApi(nodes=nodes), fake, config(settings=settings))
        task = asyncio.create_task(h.worker.run())
        await settle()
        try:
            await body(h)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return h

    return asyncio.run(main())


def test_bm10_a_system_absent_deletes_the_node_without_a_probe() -> None:
    async def body(h: Harness) -> None:
        await h.clock.run_until(lambda: "w1" not in h.api.nodes, timeout=10)

    h = run([raw_node("w1")], [nodebmc("w1", "Absent")], BMC, body)
    assert h.api.deletes == [("w1", False)]
    assert h.prober.calls == []
    assert h.value("nodes_deleted_total", source="bmc") == 1
    [deleting] = [e for e in h.api.events if e["reason"] == "DeletingNode"]
    assert "powerState Absent" in deleting["message"]


def test_the_quorum_read_of_the_nodebmc_must_still_say_absent() -> None:
    async def body(h: Harness) -> None:
        await h.clock.advance(5 * INTERVAL)

    bmcs = FakeBmcApi([nodebmc("w1", "Absent")])
    bmcs.fresh["w1"] = nodebmc("w1", "On")  # the cache lags: the System is back
    h = run([raw_node("w1")], bmcs, BMC, body)
    assert h.api.deletes == []
    assert "DeletionAborted" in h.api.reasons("w1")
    assert h.value("deletions_total", result="aborted") >= 1


def test_bm12_the_power_off_is_requested_once_then_off_taints_and_deletes() -> None:
    async def body(h: Harness) -> None:
        await h.clock.run_until(lambda: bool(h.bmcs.patches), timeout=10)
        await h.clock.advance(5 * INTERVAL)
        assert len(h.bmcs.patches) == 1  # requested once: the request stands
        assert h.api.deletes == []
        assert h.api.patches == []  # no out-of-service taint while the BMC reads On
        request = h.bmcs.objs["w1"]["metadata"]["annotations"][POWER_OFF_ANNOTATION]
        # node-bmc's part: recorded, sent, confirmed.
        record = {"request": request, "sentAt": rfc3339(START_WALL),
                  "confirmedAt": rfc3339(START_WALL)}  # fmt: skip
        done = nodebmc("w1", "Off", powerOff=record, lastContact=rfc3339(h.clock.now()))
        done["metadata"] = h.bmcs.objs["w1"]["metadata"]
        h.bmcs.send("MODIFIED", done)
        await h.clock.run_until(lambda: "w1" not in h.api.nodes, timeout=10)

    h = run([raw_node("w1")], [nodebmc("w1", "On")], FENCING, body)
    [(_, patch)] = h.bmcs.patches
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}
    assert patch[1]["value"][POWER_OFF_ANNOTATION].startswith("uid-w1@")
    reasons = h.api.reasons("w1")
    assert reasons.index("FencingNode") < reasons.index("OutOfServiceTaintAdded")
    assert h.api.deletes == [("w1", False)]
    assert OUT_OF_SERVICE_ANNOTATION in str(h.api.patches[0].body)
    assert h.value("fence_requests_total", result="requested") == 1
    assert h.value("nodes_deleted_total", source="probe") == 1


def test_no_power_off_when_the_quorum_read_no_longer_reads_on() -> None:
    async def body(h: Harness) -> None:
        await h.clock.advance(5 * INTERVAL)

    bmcs = FakeBmcApi([nodebmc("w1", "On")])
    bmcs.fresh["w1"] = nodebmc("w1", "PoweringOff")
    h = run([raw_node("w1")], bmcs, FENCING, body)
    assert h.bmcs.patches == []
    assert h.value("fence_requests_total", result="aborted") >= 1


def test_nothing_is_evaluated_before_the_nodebmcs_are_listed() -> None:
    async def body(h: Harness) -> None:
        await h.clock.advance(5 * INTERVAL)
        assert h.controller.ready() == (False, "the NodeBMC cache is not synced (is the "
                                        "NodeBMC CRD installed?)")  # fmt: skip

    bmcs = FakeBmcApi([])
    bmcs.source.pages.clear()
    bmcs.source.pages.extend(ke.NotFound(404, "NotFound", "no CRD") for _ in range(20))
    h = run([raw_node("w1")], bmcs, BMC, body)
    assert (h.api.deletes, h.prober.calls) == ([], [])
