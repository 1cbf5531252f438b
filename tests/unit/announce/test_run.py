"""The Lease loop's decisions carried out: writes with compare-and-swap, the fence the speaker
asks, the speaker's addresses, takeover announcements, annotations and failures, against an
in-memory Lease store and a speaker that records."""

from __future__ import annotations

import asyncio
import copy
import functools
import ipaddress
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, cast

import pytest

from local_ccm.announce.core import cleanup
from local_ccm.announce.core.hold import Timings, lease_name
from local_ccm.announce.core.interfaces import NodeInterface
from local_ccm.announce.links import InterfaceSource
from local_ccm.announce.run import (
    ALL,
    Announcer,
    Settings,
    announcer_annotation,
    lease_address,
    plan_annotations,
    project_service,
)
from local_ccm.announce.speaker import Counters
from local_ccm.kube.errors import Conflict, NotFound, Transient
from local_ccm.kube.informer import Informer, ListWatch, object_key
from local_ccm.runtime import controller as rc
from local_ccm.runtime.promtext import Registry
from tests.fakes.clock import FakeClock
from tests.fakes.informer import Unused

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
VIP = ipaddress.ip_address("192.0.2.10")
VIP6 = ipaddress.ip_address("2001:db8::10")
NAMESPACE = "kube-system"
# node-a ranks before node-c for VIP (rendezvous order), so node-a tries first
ETH0 = NodeInterface("eth0", up=True, arp=True,
                     prefixes=(ipaddress.ip_network("192.0.2.0/24"),))  # fmt: skip


class FakeInformer:
    def __init__(self, project: Callable[[Obj], Any], name: str) -> None:
        self.project, self.name = project, name
        self.cache: dict[str, Any] = {}

    def put(self, obj: Obj) -> None:
        self.cache[object_key(obj)] = self.project(obj)

    def has_synced(self) -> bool:
        return True

    def add_handler(self, handler: Callable[[Any], None]) -> None:
        pass


class Api:
    """Leases with the API server's compare-and-swap; every write recorded."""

    def __init__(self) -> None:
        self.leases: dict[str, Obj] = {}
        self.version = 0
        self.calls: list[str] = []
        self.fail: Exception | None = None
        self.patches: list[tuple[str, list[Obj]]] = []

    def list_watch(self, what: str) -> ListWatch:
        return Unused()

    def _store(self, body: Obj) -> Obj:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        stored["metadata"]["namespace"] = NAMESPACE
        stored["metadata"].setdefault("uid", "uid-" + stored["metadata"]["name"])
        self.leases[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def _failing(self, verb: str) -> None:
        self.calls.append(verb)
        if self.fail is not None:
            raise self.fail

    async def get_lease(self, name: str) -> Obj:
        if name not in self.leases:
            raise NotFound(404, "NotFound", "not found")
        return copy.deepcopy(self.leases[name])

    async def create_lease(self, body: Obj) -> Obj:
        self._failing("create")
        if body["metadata"]["name"] in self.leases:
            raise Conflict(409, "AlreadyExists", "exists")
        return self._store(body)

    async def update_lease(self, body: Obj) -> Obj:
        self._failing("update")
        current = self.leases.get(body["metadata"]["name"])
        if current is None:
            raise NotFound(404, "NotFound", "gone")
        if current["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "stale")
        return self._store(body)

    async def delete_lease(self, name: str, *, uid: str | None, resource_version: str) -> None:
        self._failing("delete")
        current = self.leases.get(name)
        if current is None:
            raise NotFound(404, "NotFound", "gone")
        meta = current["metadata"]
        if (meta["uid"], meta["resourceVersion"]) != (uid, resource_version):
            raise Conflict(409, "Conflict", "precondition failed")
        del self.leases[name]

    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        self.patches.append((f"{namespace}/{name}", patch))
        return {}

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return body


class FakeSpeaker:
    def __init__(self, answering: Callable[[bytes], bool]) -> None:
        self.answering = answering
        self.addresses: dict[str, frozenset[Any]] = {}
        self.announced: list[Any] = []
        self._counters = Counters()

    def set_addresses(self, interface: str, addresses: Iterable[Any]) -> None:
        self.addresses[interface] = frozenset(addresses)

    def announce(self, address: Any) -> bool:
        self.announced.append(address)
        return True

    async def run(self) -> None:
        await asyncio.Event().wait()

    @property
    def counters(self) -> Counters:
        return self._counters


class World:
    def __init__(self, me: str = "node-a", nodes: Iterable[str] = ("node-a",)) -> None:
        self.clock = FakeClock()
        self.api = Api()
        self.links = InterfaceSource(self.clock, 5.0)
        self.links.current = (ETH0,)
        self.informers: dict[str, FakeInformer] = {}
        self.speaker: FakeSpeaker | None = None

        def informer(source: object, project: Callable[[Obj], Any], name: str,
                     errors: object = None) -> FakeInformer:  # fmt: skip
            self.informers[name] = FakeInformer(project, name)
            return self.informers[name]

        def speaker(answering: Callable[[bytes], bool]) -> FakeSpeaker:
            self.speaker = FakeSpeaker(answering)
            return self.speaker

        self.registry = Registry()
        self.announcer = Announcer(
            self.api, Settings(node=me, lease_namespace=NAMESPACE, timings=Timings()), speaker,
            self.links, registry=self.registry, clock=self.clock,
            informer=cast(Callable[..., Informer[Any]], informer),
        )  # fmt: skip
        for name in nodes:
            self.put("nodes", node(name))
        self.put("pools", {"metadata": {"name": "p"}, "spec": {
            "addresses": ["192.0.2.0/28", "2001:db8::/124"], "l2Announcement": {}}})  # fmt: skip
        self.put("services", service("web", "192.0.2.10"))

    def put(self, informer: str, obj: Obj) -> None:
        self.informers[informer].put(obj)

    def put_lease(self, obj: Obj) -> None:
        self.informers["leases"].put(obj)

    async def sync(self, key: str = str(VIP)) -> rc.Result:
        if key != ALL:
            await self.announcer.sync(ALL)
        return await self.announcer.sync(key)

    def answering(self, address: Any = VIP) -> bool:
        assert self.speaker is not None
        return self.speaker.answering(address.packed)


def synchronous(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """An async test run on an event loop of its own (the fake clock moves time)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def node(name: str, ready: bool = True) -> Obj:
    status = "True" if ready else "False"
    return {"metadata": {"name": name, "labels": {}},
            "status": {"conditions": [{"type": "Ready", "status": status}]}}  # fmt: skip


def service(name: str, *ips: str, **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": "u-" + name},
        "spec": {"type": "LoadBalancer", **spec},
        "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}},
    }


# ---------------------------------------------------------------- names


def test_a_lease_name_maps_back_to_its_address() -> None:
    for address in (VIP, VIP6):
        assert lease_address(lease_name(address)) == address
    assert lease_address("kube-controller-manager") is None
    assert lease_address("l2-nonsense") is None


def test_the_annotation_plan_names_this_node_and_removes_only_its_own_name() -> None:
    obj: Obj = {"metadata": {"annotations": {}, "annotated": True},
           "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}  # fmt: skip
    path = "/metadata/annotations/local-ccm.io~1l2-192.0.2.10"
    assert plan_annotations(obj, "a", lambda _: True) == [{"op": "add", "path": path, "value": "a"}]
    assert plan_annotations(obj, "a", lambda _: False) == []
    obj["metadata"]["annotations"] = {announcer_annotation(VIP): "a"}
    assert plan_annotations(obj, "a", lambda _: True) == []
    assert plan_annotations(obj, "a", lambda _: False) == [
        {"op": "test", "path": path, "value": "a"},
        {"op": "remove", "path": path},
    ]
    assert plan_annotations(obj, "b", lambda _: False) == []  # another Node's name stays
    bare = {"metadata": {}, "status": obj["status"]}
    assert plan_annotations(bare, "a", lambda _: True)[0] == {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {},
    }


# ---------------------------------------------------------------- the loop


@synchronous
async def test_the_first_candidate_creates_the_lease_then_answers_and_announces() -> None:
    world = World()
    assert await world.sync(ALL) == rc.Done(others=(str(VIP),))
    result = await world.sync()
    assert world.api.calls == ["create"]
    assert world.api.leases[lease_name(VIP)]["spec"]["holderIdentity"] == "node-a"
    assert world.answering()
    assert world.speaker is not None
    assert world.speaker.addresses == {"eth0": frozenset({VIP})}
    assert world.speaker.announced == [VIP]
    assert result == rc.RequeueAfter(2.0, others=("service/ns/web",))
    assert world.announcer.metrics.takeovers.get() == 1
    assert world.announcer.metrics.announced.get() == 1


@synchronous
async def test_the_holder_renews_and_keeps_answering_without_announcing_again() -> None:
    world = World()
    await world.sync()
    world.clock.step(2.0)
    await world.sync()
    assert world.api.calls == ["create", "update"]
    assert world.answering()
    assert world.speaker is not None
    assert world.speaker.announced == [VIP]


@synchronous
async def test_a_failed_renewal_changes_nothing_and_the_fence_runs_out() -> None:
    world = World()
    await world.sync()
    world.clock.step(2.0)
    world.api.fail = Transient(0, "Timeout", "timed out")
    assert isinstance(await world.sync(), rc.Retry)
    assert world.answering()  # unknown is not lost: the fence keeps its time
    world.clock.step(2.0)  # renew deadline (4 s) after the last successful write was sent
    assert not world.answering()
    assert world.announcer.metrics.write_failures.labels("transient").get() == 1
    world.api.fail = None
    await world.sync()
    assert world.answering()
    assert world.speaker is not None
    assert world.speaker.announced == [VIP, VIP]  # answering started again: announced again


@synchronous
async def test_a_lease_taken_by_another_node_stops_the_answers_at_once() -> None:
    world = World(nodes=("node-a", "node-c"))
    await world.sync()
    stolen = copy.deepcopy(world.api.leases[lease_name(VIP)])
    stolen["spec"]["holderIdentity"] = "node-c"
    stolen["spec"]["renewTime"] = "2030-01-01T00:00:00.000000Z"
    world.put_lease(world.api._store(stolen))
    world.clock.step(0.5)
    result = await world.sync()
    assert not world.answering()
    assert world.speaker is not None
    assert world.speaker.addresses["eth0"] == frozenset()
    assert isinstance(result, rc.RequeueAfter)  # until node-c's Lease may have expired
    assert result.seconds == pytest.approx(6 + 1)


@synchronous
async def test_a_conflict_reads_the_lease_again_and_decides_on_it() -> None:
    world = World(nodes=("node-a", "node-c"))
    theirs = {"metadata": {"name": lease_name(VIP)},
              "spec": {"holderIdentity": "node-c", "leaseDurationSeconds": 6}}  # fmt: skip
    world.api._store(theirs)  # created after this agent's cache last saw the namespace
    result = await world.sync()
    assert world.api.calls == ["create"]
    assert result == rc.Done(others=(str(VIP),))
    assert world.announcer.metrics.write_failures.labels("conflict").get() == 1
    result = await world.sync()
    assert world.api.calls == ["create"]  # it waits for node-c's Lease to expire
    assert isinstance(result, rc.RequeueAfter)
    assert not world.answering()


@synchronous
async def test_no_longer_eligible_stops_answering_before_it_releases() -> None:
    world = World()
    await world.sync()
    world.put("nodes", node("node-a", ready=False))
    seen: list[bool] = []
    update = world.api.update_lease

    async def watching(body: Obj) -> Obj:
        seen.append(world.answering())
        return await update(body)

    world.api.update_lease = watching  # type: ignore[method-assign]
    await world.sync()
    assert seen == [False]
    assert world.api.leases[lease_name(VIP)]["spec"]["holderIdentity"] == ""
    assert world.announcer.metrics.releases.get() == 1


@synchronous
async def test_without_an_interface_on_the_segment_this_node_never_tries() -> None:
    world = World()
    world.links.current = (NodeInterface("eth1", up=True, arp=True),)
    assert await world.sync() == rc.DONE
    assert world.api.calls == []


@synchronous
async def test_local_traffic_follows_the_endpoints_node() -> None:
    world = World(nodes=("node-a", "node-c"))
    world.put("services", service("web", "192.0.2.10", externalTrafficPolicy="Local"))
    world.put("endpointslices", {
        "metadata": {"name": "web-1", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "endpoints": [{"nodeName": "node-c", "conditions": {"ready": True}}]})  # fmt: skip
    assert await world.sync() == rc.DONE
    assert world.api.calls == []


@synchronous
async def test_stopping_releases_the_held_leases() -> None:
    world = World()
    await world.sync()
    world.put_lease(world.api.leases[lease_name(VIP)])
    await world.announcer.release_all()
    assert not world.answering()
    assert world.api.leases[lease_name(VIP)]["spec"]["holderIdentity"] == ""


@synchronous
async def test_the_annotation_is_written_for_held_addresses() -> None:
    world = World()
    await world.sync()
    await world.announcer.sync("service/ns/web")
    assert world.api.patches == [("ns/web", [
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/local-ccm.io~1l2-192.0.2.10",
         "value": "node-a"}])]  # fmt: skip


# ---------------------------------------------------------------- the clean-up

UNANNOUNCED: Obj = {"metadata": {"name": "p"},
                    "spec": {"addresses": ["192.0.2.0/28", "2001:db8::/124"]}}  # fmt: skip


async def released_unannounced() -> World:
    """node-a held VIP, its pool stopped announcing it, node-a released; the cache shows it."""
    world = World()
    await world.sync()
    world.put_lease(world.api.leases[lease_name(VIP)])
    world.put("pools", UNANNOUNCED)
    await world.sync()
    assert world.api.calls == ["create", "update"]  # released first
    assert not world.answering()
    world.put_lease(world.api.leases[lease_name(VIP)])  # the watch shows the release
    return world


@synchronous
async def test_a_pool_no_longer_announced_the_holder_releases_then_deletes_the_lease() -> None:
    world = await released_unannounced()
    name = lease_name(VIP)
    result = await world.sync()
    assert world.api.calls == ["create", "update", "delete"]
    assert name not in world.api.leases
    assert result == rc.Done(others=(str(VIP),))
    assert world.announcer.metrics.deleted.get() == 1
    await world.sync()  # the cache still shows the released record: not deleted twice
    world.informers["leases"].cache.clear()  # the watch shows the deletion
    assert await world.sync() == rc.DONE
    assert world.api.calls == ["create", "update", "delete"]
    assert VIP not in world.announcer.states


@synchronous
async def test_a_conflict_on_delete_changes_nothing_and_the_lease_is_read_again() -> None:
    world = await released_unannounced()
    name = lease_name(VIP)
    rewritten = copy.deepcopy(world.api.leases[name])
    rewritten["spec"]["holderIdentity"] = "node-c"  # another agent wrote since the cache saw it
    stored = world.api._store(rewritten)
    result = await world.sync()
    assert world.api.calls == ["create", "update", "delete"]
    assert world.api.leases[name] == stored  # unchanged
    assert world.announcer.metrics.deleted.get() == 0
    assert world.announcer.metrics.write_failures.labels("conflict").get() == 0  # normal
    assert result == rc.Done(others=(str(VIP),))
    assert not world.answering()
    result = await world.sync()  # decided on the record read again: node-c's, fresh
    assert world.api.calls == ["create", "update", "delete"]
    assert isinstance(result, rc.RequeueAfter)


@synchronous
async def test_a_held_fresh_lease_of_an_address_not_announced_waits_for_the_takeover_wait() -> None:
    world = World(nodes=("node-a", "node-c"))
    world.put("pools", UNANNOUNCED)
    theirs = {"metadata": {"name": lease_name(VIP)},
              "spec": {"holderIdentity": "node-c", "leaseDurationSeconds": 6,
                       "renewTime": "2030-01-01T00:00:00.000000Z"}}  # fmt: skip
    world.put_lease(world.api._store(theirs))
    place = cleanup.place(VIP, frozenset({"node-a", "node-c"}), "node-a")
    assert place is not None
    wait = 6 + Timings().skew_margin + place * cleanup.CLEANUP_STEP
    result = await world.announcer.sync(ALL)  # a Lease in the cache is looked at
    assert result == rc.Done(others=(str(VIP),))
    result = await world.sync()
    assert isinstance(result, rc.RequeueAfter)
    assert result.seconds == pytest.approx(wait)
    world.clock.step(wait - 0.1)
    await world.sync()
    assert world.api.calls == []
    world.clock.step(0.1)
    await world.sync()
    assert world.api.calls == ["delete"]
    assert lease_name(VIP) not in world.api.leases


@synchronous
async def test_a_lease_of_a_still_announced_address_is_never_deleted() -> None:
    world = World(nodes=("node-a", "node-c"))
    world.links.current = (NodeInterface("eth1", up=True, arp=True),)  # not eligible itself
    released = {"metadata": {"name": lease_name(VIP)},
                "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}  # fmt: skip
    world.put_lease(world.api._store(released))
    for _ in range(3):
        assert await world.sync() == rc.DONE
        world.clock.step(60.0)
    assert world.api.calls == []


def test_the_projection_keeps_the_pool_annotations_and_the_announcers_only() -> None:
    obj = {
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "annotations": {
                "metallb.io/address-pool": "b",
                "local-ccm.io/l2-192.0.2.1": "n1",
                "other": "x",
            },
        }
    }
    kept = project_service(obj)["metadata"]["annotations"]
    assert kept == {"metallb.io/address-pool": "b", "local-ccm.io/l2-192.0.2.1": "n1"}
