"""An in-memory `IpamApi` and a scenario runner for node-ipam-controller on the kit (used by
tests/unit/ipam/test_run_controller.py and test_readiness.py).

The fake stands in for API semantics only as far as the loop relies on them (podCIDRs
set-once, the uid `test`); the real semantics are proven in tests/integration/ipam.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from local_ccm.ipam.api import Obj, Watched
from local_ccm.ipam.core.model import FINALIZER
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.run import Controller, Settings
from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound, Transient
from local_ccm.kube.informer import Page, WatchStatus
from local_ccm.kube.request import WatchEvent
from local_ccm.runtime.worker import Worker
from tests.fakes.clock import FakeClock

_uids = itertools.count(1)


def node_obj(
    name: str,
    labels: Mapping[str, str] | None = None,
    cidrs: list[str] | None = None,
    *,
    managers: list[str] | None = None,
) -> Obj:
    stamp = f"2026-01-01T00:00:{next(_uids) % 60:02d}Z"
    meta: Obj = {"name": name, "uid": f"uid-{name}-{next(_uids)}", "labels": dict(labels or {}),
                 "resourceVersion": "1", "creationTimestamp": stamp}  # fmt: skip
    if managers:
        meta["managedFields"] = [
            {"manager": m, "fieldsV1": {"f:spec": {"f:podCIDRs": {}}}} for m in managers
        ]
    spec: Obj = {}
    if cidrs:
        spec = {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)}
    return {"metadata": meta, "spec": spec}


def pool_obj(
    name: str,
    *,
    bits: int = 8,
    ipv4: str | None = None,
    ipv6: str | None = None,
    labels: Mapping[str, str] | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
    generation: int = 1,
) -> Obj:
    spec: Obj = {"perNodeHostBits": bits}
    if ipv4:
        spec["ipv4"] = ipv4
    if ipv6:
        spec["ipv6"] = ipv6
    if labels is not None:
        exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()]
        spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": exprs}]}
    meta: Obj = {"name": name, "uid": f"uid-{name}", "generation": generation,
                 "resourceVersion": "5", "finalizers": list(finalizers or [])}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec}


class FakeApi:
    """An in-memory IpamApi: server-side Nodes and ClusterCIDRs plus recorded writes."""

    def __init__(
        self, nodes: Sequence[Obj] = (), pools: Sequence[Obj] = (), *, served: bool = True
    ) -> None:
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pools = {p["metadata"]["name"]: copy.deepcopy(p) for p in pools}
        self.served = served
        self.queues: dict[str, asyncio.Queue[WatchEvent | Exception]] = {}
        self.node_patches: list[tuple[str, list[Obj]]] = []
        self.pool_patches: list[tuple[str, list[Obj]]] = []
        self.statuses: list[tuple[str, Obj]] = []
        self.events: list[Obj] = []
        self.fail_patch: list[ApiError] = []  # raised by the next node patches, in order
        self.fail_get: list[ApiError] = []
        self.land_before_failing = False  # the failing patch landed anyway (timeout case)
        self.pool_patch_gate: asyncio.Event | None = None  # set: pool patches may answer
        self.watch_statuses: dict[str, WatchStatus] = _Statuses(self)  # absent = connected

    async def cluster_cidrs_served(self) -> bool:
        return self.served

    def list_watch(self, what: Watched) -> _FakeListWatch:
        self.queues[what] = asyncio.Queue()
        return _FakeListWatch(self, what)

    def send(self, what: Watched, kind: str, obj: Obj) -> None:
        self.queues[what].put_nowait(WatchEvent(kind, copy.deepcopy(obj)))

    async def get_node(self, name: str) -> Obj:
        if self.fail_get:
            raise self.fail_get.pop(0)
        if name not in self.nodes:
            raise NotFound(404, "NotFound", name)
        return copy.deepcopy(self.nodes[name])

    async def patch_node(self, name: str, operations: Sequence[Obj]) -> Obj:
        ops = list(operations)
        self.node_patches.append((name, ops))
        if self.fail_patch:
            error = self.fail_patch.pop(0)
            if self.land_before_failing:
                self._apply_node(name, ops)
            raise error
        return self._apply_node(name, ops)

    def _apply_node(self, name: str, ops: list[Obj]) -> Obj:
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(404, "NotFound", name)
        if node["metadata"]["uid"] != ops[0]["value"]:
            raise Conflict(409, "Conflict", "test failed")
        spec = node.setdefault("spec", {})
        if spec.get("podCIDRs") and spec["podCIDRs"] != ops[2]["value"]:
            raise Invalid(422, "Invalid", "spec.podCIDRs: Forbidden: may not change")
        spec["podCIDR"], spec["podCIDRs"] = ops[1]["value"], ops[2]["value"]
        return copy.deepcopy(node)

    async def patch_cluster_cidr(self, name: str, ops: list[Obj]) -> Obj:
        self.pool_patches.append((name, ops))
        if self.pool_patch_gate is not None:
            await self.pool_patch_gate.wait()
        pool = self.pools[name]
        finalizers = pool["metadata"].setdefault("finalizers", [])
        if ops[-1]["op"] == "remove":
            finalizers.remove(FINALIZER)
        else:
            finalizers.append(FINALIZER)
        pool["metadata"]["resourceVersion"] = str(int(pool["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(pool)

    async def patch_cluster_cidr_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        self.statuses.append((name, dict(status)))
        self.pools[name]["status"] = dict(status)
        return copy.deepcopy(self.pools[name])

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        self.events.append(body)
        return body

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events if e["involvedObject"]["name"] == name]


class _Statuses(dict[str, WatchStatus]):
    """Setting a watch `failing` fails its open stream once; while not `connected` its next
    streams stay without a connection (`is_open` False)."""

    def __init__(self, api: FakeApi) -> None:
        super().__init__()
        self._api = api

    def __setitem__(self, what: str, status: WatchStatus) -> None:
        super().__setitem__(what, status)
        if status == "failing" and what in self._api.queues:
            self._api.queues[what].put_nowait(Transient(0, "ConnectionReset", "reset"))


class _FakeListWatch:
    """One page of everything the fake holds, then the watch fed by `FakeApi.send`."""

    def __init__(self, api: FakeApi, what: Watched) -> None:
        self._api, self._what = api, what

    async def list_page(self, continue_token: str | None) -> Page:
        items = self._api.nodes if self._what == "nodes" else self._api.pools
        return Page([copy.deepcopy(obj) for obj in items.values()], "9")

    def watch(self, resource_version: str, timeout_seconds: int | None) -> _FakeStream:
        return _FakeStream(self._api, self._what)


class _FakeStream:
    def __init__(self, api: FakeApi, what: Watched) -> None:
        self._api, self._what = api, what

    @property
    def is_open(self) -> bool:
        return self._api.watch_statuses.get(self._what, "connected") == "connected"

    def __aiter__(self) -> _FakeStream:
        return self

    async def __anext__(self) -> WatchEvent:
        item = await self._api.queues[self._what].get()
        if isinstance(item, Exception):
            raise item
        return item


async def settle(rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


Scenario = Callable[[Controller, FakeApi], Awaitable[None]]


def run_scenario(api: FakeApi, scenario: Scenario, **settings: Any) -> Controller:
    """Run the controller on the kit's worker, then `scenario`, with time jumping whenever
    the loop is idle."""

    async def autojump(clock: FakeClock) -> None:
        while True:
            await settle(50)
            clock.jump()

    async def main() -> Controller:
        clock = FakeClock(wall=datetime(2026, 1, 1, tzinfo=UTC), frozen_wall=True)
        config = Settings(**settings)
        controller = Controller(api, config, IpamMetrics(), clock)
        worker = Worker(controller, clock=clock, backoff=config.backoff,
                        workers=config.concurrent_node_syncs)  # fmt: skip
        task = asyncio.ensure_future(worker.run())
        jumper = asyncio.ensure_future(autojump(clock))
        await settle()
        try:
            await scenario(controller, api)
            await settle(500)
        finally:
            task.cancel()
            jumper.cancel()
            await asyncio.gather(task, jumper, return_exceptions=True)
        return controller

    return asyncio.run(main())


def cidrs(api: FakeApi, name: str) -> list[str]:
    return list(api.nodes[name].get("spec", {}).get("podCIDRs") or [])


async def nothing(controller: Controller, api: FakeApi) -> None:
    return None
