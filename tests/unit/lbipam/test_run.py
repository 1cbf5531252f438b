"""The controller's loop against a fake API: what a decision taken on a stale cached Service
may and may not change in the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

import pytest

from local_ccm.kube.errors import Conflict, NotFound, Transient
from local_ccm.kube.informer import Change, ListWatch
from local_ccm.lbipam import run as lbipam_run
from local_ccm.lbipam.api import Obj
from local_ccm.lbipam.core.status import conflicts
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lbipam.run import Controller
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import Unused

POOL = {"apiVersion": "lb.local-ccm.io/v1alpha1", "kind": "LoadBalancerIPPool",
        "metadata": {"name": "p", "uid": "pu"},
        "spec": {"addresses": ["198.18.0.0/24"]}}  # fmt: skip


class FakeLbApi:
    """Services by "namespace/name"; a JSON Patch whose resourceVersion test fails is a
    Conflict, as the client reports it."""

    def __init__(self) -> None:
        self.stored: dict[str, Obj] = {}
        self.patches = 0

    def list_watch(self, what: str) -> ListWatch:
        return Unused()

    def _apply(self, key: str, patch: list[Obj]) -> Obj:
        self.patches += 1
        if key not in self.stored:
            raise NotFound(404, "NotFound", key)
        obj = copy.deepcopy(self.stored[key])
        for op in patch:
            if op["op"] == "test":
                if obj["metadata"]["resourceVersion"] != op["value"]:
                    raise Conflict(409, "Conflict", key)
            elif op["path"] == "/status":
                obj["status"] = op["value"]
            elif op["path"] == "/metadata/finalizers":
                obj["metadata"]["finalizers"] = op["value"]
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        self.stored[key] = obj
        return copy.deepcopy(obj)

    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        return self._apply(f"{namespace}/{name}", patch)

    async def patch_service_status(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        return self._apply(f"{namespace}/{name}", patch)

    async def write_pool_status(self, name: str, status: Obj) -> Obj:
        return {}

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return body


def service(name: str, uid: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "LoadBalancer", "ipFamilies": ["IPv4"],
                     "ipFamilyPolicy": "SingleStack",
                     "ports": [{"name": "p", "protocol": "TCP", "port": 80}]}}  # fmt: skip


def ips(obj: Obj) -> list[Any]:
    return [e["ip"] for e in obj.get("status", {}).get("loadBalancer", {}).get("ingress", [])]


def test_a_decision_on_a_stale_service_never_frees_what_its_last_write_showed() -> None:
    """The watch event of the status write can arrive after a later sync began: the cached
    Service then shows no address yet. Its write fails (resourceVersion), and the
    address its status does show stays held, so the next Service gets another one."""
    api = FakeLbApi()
    cached = [service("a", "ua"), service("b", "ub")]
    for obj in cached:
        api.stored[f"ns/{obj['metadata']['name']}"] = copy.deepcopy(obj)
    made = Controller(api, Unused(), metrics=LbMetrics(), clock=FakeClock())
    made.services.prime(cached, "1")  # never updated: the cache stays at resourceVersion 1
    made.pool_objects.prime([POOL], "1")
    made.namespaces.prime([{"metadata": {"name": "ns"}}], "1")
    made.nodes.prime([], "1")

    async def scenario() -> None:
        made._rebuild()
        await made.sync("ns/a")  # written: stored at resourceVersion 2
        made.written.forget("ns/a")  # as if the copy it returned were not known (see the next test)
        with pytest.raises(Conflict):  # again from the stale cache: the write fails
            await made.sync("ns/a")
        await made.sync("ns/b")

    asyncio.run(scenario())
    first, second = ips(api.stored["ns/a"]), ips(api.stored["ns/b"])
    assert first
    assert second
    assert first != second, "one address shown by two Services"


def test_a_service_whose_cache_lags_its_own_write_is_decided_on_what_the_write_returned() -> None:
    """Until the watch delivers the version this controller wrote, a sync of the Service uses
    the copy the write returned: nothing to write, no refused write."""
    api = FakeLbApi()
    cached = [service("a", "ua")]
    api.stored["ns/a"] = copy.deepcopy(cached[0])
    made = Controller(api, Unused(), metrics=LbMetrics(), clock=FakeClock())
    made.services.prime(cached, "1")
    made.pool_objects.prime([POOL], "1")
    made.namespaces.prime([{"metadata": {"name": "ns"}}], "1")
    made.nodes.prime([], "1")

    async def scenario() -> None:
        made._rebuild()
        await made.sync("ns/a")
        await made.sync("ns/a")  # the cache still shows resourceVersion 1

    asyncio.run(scenario())
    assert api.patches == 1  # the status write; the second sync wrote nothing
    assert ips(api.stored["ns/a"]) == ["198.18.0.1"]


class PoolWrites(FakeLbApi):
    """Records, for each pool status write, how often the fence had been asked by then."""

    def __init__(self) -> None:
        super().__init__()
        self.fenced = 0
        self.writes: list[tuple[str, int]] = []

    async def fence(self) -> None:
        self.fenced += 1

    async def write_pool_status(self, name: str, status: Obj) -> Obj:
        self.writes.append((name, self.fenced))
        return {}


def test_the_pool_status_loop_awaits_the_fence_before_each_pool_s_write() -> None:
    """The Lease can age while one write after another goes out: each asks the fence."""
    api = PoolWrites()
    made = Controller(api, Unused(), metrics=LbMetrics(), clock=FakeClock())
    pools = [copy.deepcopy(POOL) for _ in range(3)]
    for n, pool in enumerate(pools):
        pool["metadata"] = {"name": f"p{n}", "uid": f"pu{n}"}
        pool["spec"] = {"addresses": [f"198.18.{n}.0/24"]}
    made.services.prime([], "1")
    made.pool_objects.prime(pools, "1")
    made.namespaces.prime([], "1")
    made.nodes.prime([], "1")

    async def scenario() -> None:
        made._rebuild()  # marks the pool status dirty
        loop = asyncio.create_task(made._pool_status_loop(api.fence))
        await settle()  # then it sleeps `status_every` on the fake clock
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(scenario())
    assert api.writes == [("p0", 1), ("p1", 2), ("p2", 3)]


def test_a_pool_s_conflicts_are_looked_at_again_only_when_pools_or_node_networks_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every address taken or freed writes the pool's counts again; its overlaps with the
    Nodes' networks (a thousand Nodes: tens of ms of parsing) are computed again only after a
    Node's networks or the pools changed, and still show the overlap a new Node brings."""
    calls: list[int] = []

    def counted(*args: Any) -> list[str]:
        calls.append(len(args[3]))
        return conflicts(*args)

    monkeypatch.setattr(lbipam_run, "conflicts", counted)
    api = PoolWrites()
    made = Controller(api, Unused(), metrics=LbMetrics(), clock=FakeClock())
    made.services.prime([], "1")
    made.pool_objects.prime([POOL], "1")
    made.namespaces.prime([], "1")
    node = {"metadata": {"name": "n1", "uid": "n1u", "resourceVersion": "1"},
            "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.9"}]}}  # fmt: skip
    made.nodes.prime([], "1")
    made._rebuild()

    async def scenario() -> None:
        for _ in range(3):  # three allocations or releases
            await made._write_pool_statuses(api.fence)
        assert calls == [0]
        made.nodes.prime([node], "2")  # the watch's ADDED, as the informer hands it on
        made._on_node(Change("ADDED", "n1", None, made.nodes.cache["n1"]))
        await made._write_pool_statuses(api.fence)

    asyncio.run(scenario())
    assert calls == [0, 1]
    assert any("198.18.0.9 of Node n1" in c for c in made.overlaps["p"][1])


class NoAnswer(FakeLbApi):
    """The next status write gets no answer: it lands (`landed`) or not, and raises Transient."""

    def __init__(self, *, landed: bool) -> None:
        super().__init__()
        self.landed, self.silent = landed, 1

    async def patch_service_status(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        if self.silent:
            self.silent -= 1
            if self.landed:
                self._apply(f"{namespace}/{name}", patch)
            raise Transient(0, "", "timed out")
        return self._apply(f"{namespace}/{name}", patch)


def _made(api: FakeLbApi, *services: Obj) -> Controller:
    for obj in services:
        api.stored[f"ns/{obj['metadata']['name']}"] = copy.deepcopy(obj)
    made = Controller(api, Unused(), metrics=LbMetrics(), clock=FakeClock())
    made.services.prime(services, "1")
    made.pool_objects.prime([POOL], "1")
    made.namespaces.prime([{"metadata": {"name": "ns"}}], "1")
    made.nodes.prime([], "1")
    return made


def _held(made: Controller, key: str) -> list[str]:
    assert made.ledger is not None
    return [str(a) for a in made.ledger.held_by(key)]


def test_a_problem_decision_frees_what_the_service_no_longer_shows() -> None:
    """Its status cleared while its decision is a problem (here: no pool any more), the
    address the ledger held for it is free again, and the Services waiting are looked at."""
    api = FakeLbApi()
    made = _made(api, service("a", "ua"))

    async def scenario() -> Any:
        made._rebuild()
        await made.sync("ns/a")
        assert _held(made, "ns/a") == ["198.18.0.1"]
        made.pool_objects.prime([], "2")  # the pool is gone: a's decision is a problem
        made.services.prime([api.stored["ns/a"]], "2")
        await made.sync("ns/a")
        assert _held(made, "ns/a") == ["198.18.0.1"], "what it shows stays held"
        cleared = copy.deepcopy(api.stored["ns/a"])
        cleared["status"]["loadBalancer"] = {}
        cleared["metadata"]["resourceVersion"] = "9"
        api.stored["ns/a"] = cleared
        made.services.prime([cleared], "9")
        return await made.sync("ns/a")

    done = asyncio.run(scenario())
    assert _held(made, "ns/a") == []
    assert made.metrics.releases.collect()[0].samples[0].value == 1
    assert done.others == ()  # no other Service waits


@pytest.mark.parametrize("landed", [True, False])
def test_a_write_without_an_answer_keeps_its_address_until_the_service_shows_a_newer_version(
    landed: bool,
) -> None:
    """A status write that got no answer may land later: a problem decision taken on the
    version it was guarded by frees nothing; on a newer version the Service shows the truth."""
    api = NoAnswer(landed=landed)
    made = _made(api, service("a", "ua"))

    async def scenario() -> None:
        made._rebuild()
        with pytest.raises(Transient):
            await made.sync("ns/a")
        made.pool_objects.prime([], "2")  # a problem from now on; the cache still shows v1
        # Its condition's write is guarded by v1 too: refused if the first write landed.
        with pytest.raises(Conflict) if landed else contextlib.nullcontext():
            await made.sync("ns/a")
        assert _held(made, "ns/a") == ["198.18.0.1"], "freed while the write may land"
        newer = copy.deepcopy(api.stored["ns/a"])
        newer["metadata"]["resourceVersion"] = "9"  # whatever happened meanwhile, it shows
        api.stored["ns/a"] = newer
        made.services.prime([newer], "9")
        await made.sync("ns/a")

    asyncio.run(scenario())
    assert _held(made, "ns/a") == (["198.18.0.1"] if landed else [])
