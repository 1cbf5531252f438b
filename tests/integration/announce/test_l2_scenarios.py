"""L2 announcement with real agents, real frames and the real apiserver (docs/l2-announcement.md).

L2-01 a dual-stack Service's addresses, given by the real service-lb-ipam, are resolved by
the client (iputils' arping, the client kernel's NDP) to the MAC of the Node holding each
address's Lease, exactly one holder each; the Service's annotation and an `L2Announcing`
Event name the announcer. L2-02 the holder's agent is killed: another Node takes the
address over and the client's neighbour entry moves to it, within the published bound
(measured and printed). L2-03 `externalTrafficPolicy: Local` follows the EndpointSlice's Node,
and a moved endpoint moves the address. L2-04 removing `l2Announcement` from the pool
releases the Lease and stops every answer, and the released Lease is deleted (the clean-up).
Throughout, the capture on the bridge never shows an address answered by a MAC after another
one took over (never two at once).
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import pytest

from local_ccm.announce.api import POOLS
from local_ccm.announce.core.hold import lease_name
from local_ccm.announce.run import announcer_annotation
from local_ccm.kube.client import Obj
from tests.integration.announce.conftest import L2, IPAddress, Node, kill
from tests.netns.announce.segment import arping, neighbour, resolve, resolved, switches
from tests.support import lb
from tests.support import resources as r
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(300)
# The published failover bound with the default timings after a holder dies: lease duration
# + skew margin (6 + 1 s) plus the watch latency and a write; the test allows generously more.
PUBLISHED_BOUND = 7.0
TEST_BOUND = 25.0
POOL4, POOL6 = "192.0.2.64/28", "2001:db8:0:1::40/124"
SLICES = r.Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)


def addresses(world: L2, name: str, count: int) -> list[IPAddress]:
    return [ipaddress.ip_address(a) for a in lb.allocated(world.space, name, count)]


def answered_by(world: L2, address: IPAddress) -> Node:
    """The Node whose MAC the client resolves `address` to (arping for IPv4, the kernel's NDP
    for IPv6), checked against the Lease's holder."""
    if address.version == 4:
        macs = eventually(lambda: arping(world.client, address, count=1), timeout=30,
                          interval=0.5, message=f"an answer for {address}")  # fmt: skip
        assert len(macs) == 1, macs
        mac = next(iter(macs))
    else:
        mac = eventually(lambda: resolved(world.client, address), timeout=30, interval=0.5,
                         message=f"{address} resolved")  # fmt: skip
    node = world.by_mac(mac)
    assert world.holder(address) == node.name
    return node


def no_address_answered_twice(world: L2, *watched: IPAddress) -> None:
    """Over the whole capture, each address's answering MAC changes only forward: no MAC
    answers again after another took over."""
    answers = world.capture.answers()
    for address in watched:
        order = switches(answers, address)
        assert len(order) == len(set(order)), f"{address} answered by {order}"


def service_events(world: L2, name: str) -> list[Obj]:
    return [e for e in world.space.events(name) if e.get("reason") == "L2Announcing"]


def test_l2_01_l2_02_dual_stack_answered_by_the_holder_then_taken_over(world: L2) -> None:
    world.pool(POOL4, POOL6)
    world.space.service("web", ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4", "IPv6"])
    v4, v6 = addresses(world, "web", 2)
    holder4, holder6 = answered_by(world, v4), answered_by(world, v6)
    eventually(lambda: world.space.get("web")["metadata"].get("annotations", {}).get(
        announcer_annotation(v4)) == holder4.name, timeout=10, message="annotation")  # fmt: skip
    annotations = world.space.get("web")["metadata"]["annotations"]
    assert annotations[announcer_annotation(v6)] == holder6.name
    events = eventually(lambda: service_events(world, "web"), timeout=10)
    assert any(holder4.name in e["message"] and str(v4) in e["message"] for e in events)

    resolve(world.client, v4)
    start = time.monotonic()
    kill(holder4)  # L2-02
    moved, took = moves(world, v4, holder4, start)
    print(
        f"\nL2-02 takeover of {v4}: the client's entry moved to {moved.name} after "
        f"{took:.2f}s (published bound {PUBLISHED_BOUND:.0f}s + watch latency + a write)"
    )
    assert world.holder(v4) == moved.name
    if holder6 is holder4:
        assert answered_by(world, v6) is not holder4
    time.sleep(3)  # the new holder's announcement rounds
    no_address_answered_twice(world, v4, v6)


def moves(world: L2, address: IPAddress, old: Node, start: float) -> tuple[Node, float]:
    """The Node the client's entry for `address` moves to from `old`, and the time since
    `start` (time.monotonic()) when it did."""
    moved = eventually(lambda: moved_from(world, address, old), timeout=TEST_BOUND,
                       interval=0.1, message=f"{address} moved from {old.name}")  # fmt: skip
    return moved, time.monotonic() - start


def moved_from(world: L2, address: IPAddress, dead: Node | None) -> Node | None:
    """The Node the client's neighbour entry for `address` names, once it is not `dead`'s."""
    mac = neighbour(world.client, address)
    if mac is None or (dead is not None and mac == dead.mac):
        resolve(world.client, address)  # a stale entry is probed, then asked again
        return None
    return world.by_mac(mac)


def test_l2_03_local_traffic_follows_the_endpoint_slices_node(world: L2) -> None:
    world.pool(POOL4, POOL6)
    world.space.service("local", externalTrafficPolicy="Local", ipFamilies=["IPv4"])
    (vip,) = addresses(world, "local", 1)
    first, then = world.nodes[2], world.nodes[0]
    body = endpoint_slice(world, "local", first.name)
    world.kube.create(SLICES, body, namespace=world.space.name)
    eventually(lambda: world.holder(vip) == first.name, timeout=30, message="the endpoint's Node")
    assert answered_by(world, vip) is first
    eventually(lambda: resolved(world.client, vip) == first.mac, timeout=10)  # a kernel entry
    current = world.kube.get(SLICES, "local-1", namespace=world.space.name)
    current["endpoints"][0]["nodeName"] = then.name
    start = time.monotonic()
    world.kube.update(SLICES, current, namespace=world.space.name)
    eventually(lambda: moved_from(world, vip, first) is then, timeout=TEST_BOUND, interval=0.1,
               message="the client follows the endpoint")  # fmt: skip
    print(f"\nL2-03 hand-over of {vip} after the endpoint moved: {time.monotonic() - start:.2f}s")
    assert world.holder(vip) == then.name
    time.sleep(3)
    no_address_answered_twice(world, vip)


def endpoint_slice(world: L2, service: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-1", "namespace": world.space.name,
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by": "l2-test"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.10"], "nodeName": node,
                       "conditions": {"ready": True}}],
        "ports": [{"name": "p0", "port": 80, "protocol": "TCP"}],
    }  # fmt: skip


def test_l2_04_removing_l2_announcement_from_the_pool_stops_every_answer(world: L2) -> None:
    pool = world.pool(POOL4, POOL6)
    world.space.service("gone", ipFamilies=["IPv4"])
    (vip,) = addresses(world, "gone", 1)
    holder = answered_by(world, vip)
    current = world.kube.get(POOLS, pool)
    del current["spec"]["l2Announcement"]
    world.kube.update(POOLS, current)
    # released (empty holder), then deleted by the clean-up: either may be seen first
    eventually(lambda: world.holder(vip) in ("", None), timeout=20,
               message="the holder releases")  # fmt: skip
    assert arping(world.client, vip, count=3) == set()
    eventually(lambda: world.holder(vip) is None, timeout=30,
               message="the released Lease deleted")  # fmt: skip
    assert arping(world.client, vip, count=3) == set()
    name = lease_name(vip)
    deleted = eventually(lambda: [n.name for n in world.nodes
                                  if f"Lease {name} deleted" in n.agent.log()],
                         timeout=10, message="the deleting agent's log")  # fmt: skip
    refused = sum(n.agent.log().count(f"Lease {name} not deleted") for n in world.nodes)
    print(
        f"L2-04: {name} deleted by {deleted} (released by {holder.name}); "
        f"{refused} delete(s) refused by the precondition"
    )
    assert len(deleted) == 1, deleted  # the precondition lets one DELETE succeed
    annotations = world.space.get("gone")["metadata"].get("annotations") or {}
    eventually(lambda: announcer_annotation(vip) not in (
        world.space.get("gone")["metadata"].get("annotations") or {}), timeout=10,
        message=f"the annotation naming {holder.name} removed")  # fmt: skip
    assert annotations is not None
    no_address_answered_twice(world, vip)
