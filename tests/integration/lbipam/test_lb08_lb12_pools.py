"""LB08–LB12: pools on a real apiserver.

LB08 conflict detection (another pool, the Service CIDR, a Node's address and podCIDR), and
those addresses passed over by new allocations;
LB09 the kube-vip-cloud-provider ConfigMap read as pools, and kube-vip's annotation written for
kube-vip to announce; LB10 a restart rebuilds the
allocations from Service status (no write for what is held, a hand-made duplicate resolved
oldest-first); LB11 invalid pools rejected by the apiserver with clear messages, what
admission cannot see reported in `Ready`, and `l2Announcement` stored without changing the
allocation; LB12 a disabled pool gives nothing new.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import Invalid
from local_ccm.lbipam.api import CONFIGMAPS, POOLS, SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.waiting import eventually

SETTLE = lb.SETTLE
KUBEVIP = "kube-vip.io/loadbalancerIPs"


def conflict_message(kube: Client, pool: str, *parts: str) -> str:
    def check() -> str | None:
        cond = lb.pool_condition(kube, pool, "Conflict")
        text = str((cond or {}).get("message", ""))
        return text if cond and cond["status"] == "True" and all(p in text for p in parts) else None

    return eventually(check, timeout=SETTLE, message=f"{pool}: Conflict naming {parts}")


def _node(kube: Client, track: Tracker, labels: dict[str, str], pod_cidr: str, address: str) -> str:
    """A Node with a podCIDR and an InternalIP. The run's labels: the tracker deletes only what
    carries them (an unlabelled Node was left behind, and node IPAM's tests after it on the
    same plane counted its podCIDR)."""
    node = f"lb08-{secrets.token_hex(3)}"
    kube.create(r.NODES, {"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": node, "labels": labels},
                          "spec": {"podCIDRs": [pod_cidr]}})  # fmt: skip
    track(r.NODES, node)
    kube.patch(r.NODES, node, {"status": {"addresses": [{"type": "InternalIP",
               "address": address}]}}, patch_type="merge", subresource="status")  # fmt: skip
    return node


def test_lb08_conflicts_are_named_and_do_not_stop_the_pool(
    space: lb.Space, start_lb: StartLb, kube: Client, track: Tracker, test_labels: dict[str, str]
) -> None:
    net, other = lb.block(), lb.block()
    first = space.pool([f"{net}.0/28"])
    second = space.pool([f"{net}.8/29"])
    service_range = space.pool(["10.96.255.240/28"], priority=10)  # tried after the first two
    node = _node(kube, track, test_labels, f"{other}.128/25", f"{other}.5")
    near_node = space.pool([f"{other}.0/24"], priority=10)
    start_lb("--lb-service-cidrs=10.96.0.0/16,fd00:5e::/112")
    conflict_message(kube, first, f"overlaps pool {second}")
    conflict_message(kube, second, f"overlaps pool {first}")
    conflict_message(kube, service_range, "overlaps the Service CIDR 10.96.0.0/16")
    conflict_message(kube, near_node, f"address {other}.5 of Node {node}",
                     f"podCIDR {other}.128/25 of Node {node}")  # fmt: skip
    ready = lb.pool_condition(kube, near_node, "Ready")
    assert ready is not None
    assert ready["status"] == "True"
    space.service("still-served")
    served = lb.allocated(space, "still-served")[0]
    assert served.startswith(f"{net}.")  # from one of the overlapping pools
    assert 1 <= int(served.rsplit(".", 1)[1]) <= 14
    kube.delete(POOLS, second)
    eventually(lambda: (lb.pool_condition(kube, first, "Conflict") or {}).get("status") == "False",
               timeout=SETTLE, message="the conflict clears with the other pool gone")  # fmt: skip


def test_lb08_a_nodes_addresses_in_a_pool_are_passed_over_and_freed_with_it(
    space: lb.Space, start_lb: StartLb, kube: Client, track: Tracker, test_labels: dict[str, str]
) -> None:
    """A pool carved from the Nodes' subnet: its first free addresses are a Node's InternalIP
    and podCIDR, which a Service must not get (with L2 announcement it would take the Node's
    traffic). With the Node gone, the Service that waited for an address gets one."""
    net = lb.block()
    node = _node(kube, track, test_labels, f"{net}.2/31", f"{net}.1")
    pool = space.pool([f"{net}.0/29"])  # .1 to .6 without the CIDR's first and last
    start_lb()
    conflict_message(kube, pool, f"address {net}.1 of Node {node}", f"podCIDR {net}.2/31")
    for name in ("one", "two", "three"):
        space.service(name)
    given = {name: lb.allocated(space, name)[0] for name in ("one", "two", "three")}
    assert sorted(given.values()) == [f"{net}.4", f"{net}.5", f"{net}.6"]
    space.service("waits")
    lb.refused(space, "waits", "PoolExhausted")
    kube.delete(r.NODES, node)
    assert lb.allocated(space, "waits") == [f"{net}.1"]  # the first address freed


@pytest.mark.parametrize(("data", "first"), [({}, ".1"), ({"search-order": "desc"}, ".3")])
def test_lb09_kube_vip_configmap_pools(
    space: lb.Space, start_lb: StartLb, kube: Client, data: dict[str, str], first: str
) -> None:
    net = lb.block()
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kubevip", "namespace": space.name},
            "data": {f"cidr-{space.name}": f"{net}.0/30", **data}}  # fmt: skip
    kube.create(CONFIGMAPS, body, namespace=space.name)
    start_lb(f"--lb-kubevip-configmap={space.name}/kubevip")
    space.service("vip")
    assert lb.allocated(space, "vip") == [f"{net}{first}"]  # kube-vip never gives .0
    # a change of the ConfigMap applies without a restart
    more = f"{net}.0/30,{net}.100/32"
    kube.patch(CONFIGMAPS, "kubevip", {"data": {f"cidr-{space.name}": more}},
               patch_type="merge", namespace=space.name)  # fmt: skip
    space.service("more", annotations={"kube-vip.io/loadbalancerIPs": f"{net}.100"})
    assert lb.allocated(space, "more") == [f"{net}.100"]


def test_lb09_kube_vip_annotation_for_kube_vip_to_announce(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    flags = ("--lb-kubevip-annotation", "--lb-kubevip-configmap=")
    first = start_lb(*flags)
    space.service("vip")
    address = lb.allocated(space, "vip")[0]

    def annotation() -> str | None:
        return (space.get("vip")["metadata"].get("annotations") or {}).get(KUBEVIP)

    assert eventually(annotation, timeout=SETTLE, message="kube-vip's annotation") == address
    version = space.get("vip")["metadata"]["resourceVersion"]
    first.stop(grace=5)
    start_lb(*flags)  # the annotation is read back as what the Service holds, not a request
    space.service("next")
    assert lb.allocated(space, "next") != [address]
    assert space.get("vip")["metadata"]["resourceVersion"] == version
    kube.patch(SERVICES, "vip", {"spec": {"type": "ClusterIP"}}, patch_type="merge",
               namespace=space.name)  # fmt: skip
    eventually(lambda: annotation() is None and not lb.has_finalizer(space.get("vip")),
               timeout=SETTLE, message="annotation and finalizer removed")  # fmt: skip


def test_lb10_restart_rebuilds_from_status(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28"])
    controller = start_lb()
    held = {}
    for name in ("a", "b", "c"):
        space.service(name)
        held[name] = lb.allocated(space, name)
    versions = {n: space.get(n)["metadata"]["resourceVersion"] for n in held}
    controller.stop(grace=5)
    space.service("late")
    # a hand edit while it is down: the newest Service claims b's address
    late = space.get("late")
    late["status"]["loadBalancer"] = {"ingress": [{"ip": held["b"][0], "ipMode": "VIP"}]}
    kube.update(SERVICES, late, namespace=space.name, subresource="status")
    space.service("d")
    start_lb()
    fresh = lb.allocated(space, "d")
    claimed = held["b"][0]

    def moved_away() -> list[str] | None:
        return [ip for ip in lb.ips(space.get("late")) if ip != claimed] or None

    moved = eventually(moved_away, timeout=SETTLE, message="the newer claimant moves")
    taken = {ip for ips in held.values() for ip in ips}
    assert fresh[0] not in taken
    assert moved[0] not in taken
    assert moved != fresh
    for name, ips in held.items():
        svc = space.get(name)
        assert lb.ips(svc) == ips
        assert svc["metadata"]["resourceVersion"] == versions[name]  # nothing rewritten


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"addresses": []}, "spec.addresses"),
    ({"addresses": ["not-a-cidr"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.0/33"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.9-10.0.0.1"]}, "must not start after it ends"),
    ({"addresses": ["10.0.0.0/24"], "priority": "high"}, "spec.priority"),
    ({"addresses": ["10.0.0.0/24"], "serviceSelector": {"matchExpressions": [
        {"key": "a", "operator": "Bogus"}]}}, "operator"),
    ({"addresses": ["10.0.0.0/24"], "namespaceSelector": {"matchExpressions": [
        {"key": "a", "operator": "In"}]}}, "values"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"nodeSelector": {"matchExpressions": [
        {"key": "a", "operator": "Exists", "values": ["b"]}]}}}, "values"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"interfaces": [""]}}, "interfaces[0]"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"interfaces": ["eth/0"]}}, "interfaces[0]"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"interfaces": ["eth 0"]}}, "interfaces[0]"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"interfaces": ["averyveryverylongname"]}},
     "IFNAMSIZ"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": {"interfaces": ["eth0", "eth0"]}},
     "interfaces[1]"),
    ({"addresses": ["10.0.0.0/24"], "l2Announcement": "yes"}, "l2Announcement"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "named"), INVALID)
def test_lb11_invalid_pools_are_rejected_by_the_apiserver(
    kube: Client, crds: object, spec: dict[str, Any], named: str
) -> None:
    body = {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
            "metadata": {"name": f"lb11-{secrets.token_hex(3)}"}, "spec": spec}  # fmt: skip
    with pytest.raises(Invalid) as refused:
        kube.create(POOLS, body)
    assert named in str(refused.value)


def test_lb11_what_admission_cannot_see_is_reported_in_ready(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    bad = space.pool([f"{net}.1/24", "fd00:18:9::9-fd00:18:9::1"],
                     l2Announcement={"interfaces": ["bond[0"]})  # fmt: skip
    start_lb()

    def invalid() -> str | None:
        cond = lb.pool_condition(kube, bad, "Ready")
        return str(cond["message"]) if cond and cond["reason"] == "Invalid" else None

    message = eventually(invalid, timeout=SETTLE, message="Ready False, reason Invalid")
    assert "spec.addresses[0]" in message
    assert "spec.addresses[1]" in message  # every problem, not just the first
    assert "spec.l2Announcement.interfaces[0]" in message  # an unclosed '[' passes admission
    conflict = lb.pool_condition(kube, bad, "Conflict")
    assert conflict is not None
    assert conflict["status"] == "Unknown"
    space.service("nothing")
    eventually(lambda: (lb.condition(space.get("nothing")) or {}).get("reason") == "NoPool",
               timeout=SETTLE)  # fmt: skip


def test_lb11_a_pool_edited_to_fewer_families_or_made_invalid_loses_their_counts(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    """The status is a merge patch: counts of a family the pool no longer has go too."""
    net = lb.block()
    name = space.pool([f"{net}.0/30", "fd00:18:a::/120"])
    start_lb()
    eventually(lambda: {"ipv4", "ipv6"} <= set(lb.pool_status(kube, name)), timeout=SETTLE,
               message="counts of both families")  # fmt: skip
    kube.patch(POOLS, name, {"spec": {"addresses": [f"{net}.0/30"]}}, patch_type="merge")
    eventually(lambda: "ipv6" not in lb.pool_status(kube, name), timeout=SETTLE,
               message="the IPv6 counts gone")  # fmt: skip
    assert lb.pool_status(kube, name)["ipv4"]["total"] == "2"
    kube.patch(POOLS, name, {"spec": {"addresses": [f"{net}.1/30"]}}, patch_type="merge")
    eventually(lambda: "ipv4" not in lb.pool_status(kube, name), timeout=SETTLE,
               message="an invalid pool shows no counts")  # fmt: skip
    assert (lb.pool_condition(kube, name, "Ready") or {}).get("reason") == "Invalid"


def test_lb11_a_pool_announced_on_l2_allocates_as_any_other(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    l2 = {"nodeSelector": {"matchLabels": {"edge": "true"}}, "interfaces": ["eth0", "bond*"]}
    pool = space.pool([f"{net}.0/30"], l2Announcement=l2)
    assert kube.get(POOLS, pool)["spec"]["l2Announcement"] == l2  # stored, not pruned
    start_lb()
    space.service("first")
    assert lb.allocated(space, "first") == [f"{net}.1"]
    eventually(lambda: (lb.pool_condition(kube, pool, "Ready") or {}).get("reason") == "Ready",
               timeout=SETTLE)  # fmt: skip


def test_lb12_a_disabled_pool_gives_nothing_new_and_keeps_what_is_held(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.0/28"])
    start_lb()
    space.service("before")
    held = lb.allocated(space, "before")
    kube.patch(POOLS, pool, {"spec": {"disabled": True}}, patch_type="merge")
    eventually(lambda: (lb.pool_condition(kube, pool, "Ready") or {}).get("reason") == "Disabled",
               timeout=SETTLE)  # fmt: skip
    space.service("after")
    eventually(lambda: (lb.condition(space.get("after")) or {}).get("reason") == "NoPool",
               timeout=SETTLE)  # fmt: skip
    assert lb.ips(space.get("before")) == held
