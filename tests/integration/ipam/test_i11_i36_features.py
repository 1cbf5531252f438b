"""Fixed bugs, recovery, exhaustion, other writers and flags."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam.conftest import EVENT_NAMESPACE, FIXTURE_U_FLAGS, StartIpam
from tests.integration.ipam.objects import condition, event_reasons, events_for
from tests.integration.ipam.test_i01_i10_allocation import (
    delete_and_wait,
    gets,
    name_of,
)
from tests.support import resources as r
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("crds")
MakePool = Callable[..., Obj]
NewNode = Callable[..., Obj]
WAITS = 5.0  # "waits" = podCIDRs stay empty for 5 s


def stays_empty(kube: Client, name: str, seconds: float = WAITS) -> None:
    """A "waits" check: observed by a watch-free poll for `seconds`."""
    import time  # noqa: PLC0415

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        spec = kube.get(r.NODES, name).get("spec") or {}
        assert not spec.get("podCIDRs"), f"{name} unexpectedly got {spec.get('podCIDRs')}"
        time.sleep(0.25)


def status_of(kube: Client, pool: str) -> dict[str, Any]:
    return dict(kube.get(r.CLUSTER_CIDRS, pool).get("status") or {})


def wait_status(kube: Client, pool: str, check: Callable[[dict[str, Any]], bool]) -> None:
    eventually(lambda: check(status_of(kube, pool)), timeout=10,
               message=f"status of {pool}")  # fmt: skip


def has_event(kube: Client, ns: str, kind: str, name: str, reason: str) -> None:
    eventually(lambda: reason in event_reasons(kube, ns, kind, name), timeout=10,
               message=f"{reason} Event on {kind} {name}")  # fmt: skip


def test_i22_restart_recovery(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = name_of(make_pool("rec", bits=8, ipv4="10.76.0.0/22", sel={"r": "1"}))
    first = start_ipam()
    first.wait_ready()
    nodes = [name_of(new_node(f"r{i}", labels={"r": "1"})) for i in (1, 2, 3)]
    for i, node in enumerate(nodes):
        gets(kube, node, [f"10.76.{i}.0/24"])
    assert first.stop() == 0
    delete_and_wait(kube, r.NODES, nodes[1])
    second = start_ipam()
    second.wait_ready()
    r4 = name_of(new_node("r4", labels={"r": "1"}))
    gets(kube, r4, ["10.76.1.0/24"])
    r5 = name_of(new_node("r5", labels={"r": "1"}))
    gets(kube, r5, ["10.76.3.0/24"])
    assert second.metric("local_ccm_ipam_node_writes_total", {"code": "200"}) == 2  # fmt: skip
    wait_status(kube, pool, lambda s: (s.get("ipv4") or {}).get("allocated") == 4)


def test_i23_exhaustion_then_a_new_pool(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    small = name_of(make_pool("small", bits=8, ipv4="10.77.0.0/23", sel={"e": "1"}))
    proc = start_ipam()
    proc.wait_ready()
    served = []
    for i in (1, 2):
        served.append(name_of(new_node(f"n{i}", labels={"e": "1"})))
        gets(kube, served[-1], [f"10.77.{i - 1}.0/24"])
    n3 = name_of(new_node("n3", labels={"e": "1"}))
    has_event(kube, EVENT_NAMESPACE, "Node", n3, "CIDRNotAvailable")
    # The outbox posts in order: had n1 or n2 an Event of their allocation, it would be
    # there before n3's. A success posts none [compat] (docs/ipam.md).
    assert [event_reasons(kube, EVENT_NAMESPACE, "Node", node) for node in served] == [[], []]
    (event,) = [e for e in events_for(kube, EVENT_NAMESPACE, "Node", n3)
                if e["reason"] == "CIDRNotAvailable"]  # fmt: skip
    assert small in event["message"], event["message"]
    assert "exhausted" in event["message"], event["message"]
    wait_status(
        kube, small, lambda s: condition({"status": s}, "Exhausted") == ("True", "NoFreeBlocks")
    )
    has_event(kube, EVENT_NAMESPACE, "ClusterCIDR", small, "ClusterCIDRExhausted")
    eventually(lambda: proc.metric("local_ccm_ipam_nodes_waiting",
                                   {"reason": "exhausted"}) == 1, timeout=5)  # fmt: skip
    make_pool("more", bits=8, ipv4="10.78.0.0/24", sel={"e": "1"})
    gets(kube, n3, ["10.78.0.0/24"])


def test_i24_exhaustion_then_a_release(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("small", bits=8, ipv4="10.77.0.0/23", sel={"e": "1"})
    start_ipam().wait_ready()
    first = name_of(new_node("n1", labels={"e": "1"}))
    gets(kube, first, ["10.77.0.0/24"])
    gets(kube, name_of(new_node("n2", labels={"e": "1"})), ["10.77.1.0/24"])
    n3 = name_of(new_node("n3", labels={"e": "1"}))
    stays_empty(kube, n3, 2.0)
    kube.delete(r.NODES, first)
    gets(kube, n3, ["10.77.0.0/24"])


def test_i31_second_allocator(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("ka", bits=8, ipv4="10.82.0.0/16", sel={"k": "1"})
    proc = start_ipam()
    proc.wait_ready()
    foreign = name_of(new_node("foreign"))
    stays_empty(kube, foreign, 1.0)
    kcm = Client(kube.config, field_manager="kube-controller-manager")
    try:
        patch = [{"op": "add", "path": "/spec/podCIDR", "value": "10.82.0.0/24"},
                 {"op": "add", "path": "/spec/podCIDRs", "value": ["10.82.0.0/24"]}]  # fmt: skip
        kcm.patch(r.NODES, foreign, patch, patch_type="json")
    finally:
        kcm.close()
    has_event(kube, EVENT_NAMESPACE, "Node", foreign, "CIDRAssignedByOtherAllocator")
    (event,) = [e for e in events_for(kube, EVENT_NAMESPACE, "Node", foreign)
                if e["reason"] == "CIDRAssignedByOtherAllocator"]  # fmt: skip
    assert "kube-controller-manager" in event["message"]
    assert proc.metric("local_ccm_ipam_foreign_allocations_total",
                       {"manager": "kube-controller-manager"}) == 1  # fmt: skip
    gets(kube, name_of(new_node("k", labels={"k": "1"})), ["10.82.1.0/24"])


def test_i12_terms_are_ored(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = name_of(
        make_pool("or-cc", bits=8, ipv4="10.50.0.0/23", sel=[{"pool": "a"}, {"pool": "b"}])
    )
    first = start_ipam(*FIXTURE_U_FLAGS)
    first.wait_ready()
    gets(kube, name_of(new_node("b1", labels={"pool": "b"})), ["10.50.0.0/24"])
    has_event(kube, EVENT_NAMESPACE, "ClusterCIDR", pool, "SelectorSemanticsDiffer")
    first.stop()
    start_ipam(*FIXTURE_U_FLAGS, "--legacy-and-selector-terms").wait_ready()
    node = name_of(new_node("b2", labels={"pool": "b"}))
    eventually(lambda: (kube.get(r.NODES, node).get("spec") or {}).get("podCIDRs"), timeout=10)
    v4 = kube.get(r.NODES, node)["spec"]["podCIDRs"][0]
    assert v4.startswith("10.9"), v4
    assert v4.endswith("/24"), v4
    assert v4 != "10.94.0.0/24", v4


def test_i13_match_fields(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: MakePool,
    new_node: NewNode,
    node_name: Callable[[str], str],
) -> None:
    sel = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node_name("node-x")]}]}]}  # fmt: skip
    make_pool("name-cc", bits=4, ipv4="10.51.0.0/24", node_selector=sel)
    start_ipam(*FIXTURE_U_FLAGS).wait_ready()
    gets(kube, name_of(new_node("node-x")), ["10.51.0.0/28"])
    gets(kube, name_of(new_node("node-y")), ["10.96.0.0/24", "fd00:10:96::/120"])


def test_i15_terminating_catch_all(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    catch = name_of(make_pool("catch", bits=8, ipv4="10.54.0.0/23"))
    start_ipam().wait_ready()
    a = name_of(new_node("a"))
    gets(kube, a, ["10.54.0.0/24"])
    kube.delete(r.CLUSTER_CIDRS, catch)
    eventually(lambda: condition(kube.get(r.CLUSTER_CIDRS, catch), "Ready")
               == ("False", "Terminating"), timeout=10)  # fmt: skip
    b = name_of(new_node("b"))
    has_event(kube, EVENT_NAMESPACE, "Node", b, "CIDRNotAvailable")
    kube.delete(r.NODES, a)
    eventually(lambda: not _exists(kube, catch), timeout=15, message="catch disappears")
    stays_empty(kube, b, 2.0)


def _exists(kube: Client, pool: str) -> bool:
    try:
        kube.get(r.CLUSTER_CIDRS, pool)
    except Exception:  # NotFound is what we wait for
        return False
    return True


def test_i17_partial_exhaustion_leaks_nothing(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = name_of(make_pool("short-v6", bits=8, ipv4="10.70.0.0/22", ipv6="fd00:70::/119",
                             sel={"grp": "short"}))  # fmt: skip
    proc = start_ipam()
    proc.wait_ready()
    n1 = name_of(new_node("n1", labels={"grp": "short"}))
    gets(kube, n1, ["10.70.0.0/24", "fd00:70::/120"])
    gets(
        kube, name_of(new_node("n2", labels={"grp": "short"})), ["10.70.1.0/24", "fd00:70::100/120"]
    )
    n3 = name_of(new_node("n3", labels={"grp": "short"}))
    stays_empty(kube, n3, 3.0)

    def settled(s: dict[str, Any]) -> bool:
        v4 = s.get("ipv4") or {}
        exhausted = condition({"status": s}, "Exhausted")
        return (v4.get("allocated"), v4.get("free"), exhausted) == (2, 2, ("True", "NoFreeBlocks"))

    wait_status(kube, pool, settled)
    usage = proc.metric("local_ccm_ipam_cidrs_usage_ratio", {"cluster_cidr": "10.70.0.0/22"})
    assert usage == 0.5
    kube.delete(r.NODES, n1)
    gets(kube, n3, ["10.70.0.0/24", "fd00:70::/120"])


def test_i18_node_with_a_finalizer_keeps_its_block(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("fin", bits=8, ipv4="10.71.0.0/23", sel={"grp": "fin"})
    start_ipam().wait_ready()
    n = new_node("n", labels={"grp": "fin"})
    hold = [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}]
    kube.patch(r.NODES, name_of(n), hold, patch_type="json")
    gets(kube, name_of(n), ["10.71.0.0/24"])
    gets(kube, name_of(new_node("m", labels={"grp": "fin"})), ["10.71.1.0/24"])
    kube.delete(r.NODES, name_of(n))
    p = name_of(new_node("p", labels={"grp": "fin"}))
    stays_empty(kube, p, 3.0)
    release = [{"op": "remove", "path": "/metadata/finalizers"}]
    kube.patch(r.NODES, name_of(n), release, patch_type="json")
    gets(kube, p, ["10.71.0.0/24"])


def test_i19_relabelling_neither_moves_nor_leaks(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    a = name_of(make_pool("a", bits=8, ipv4="10.72.0.0/23", sel={"team": "a"}))
    make_pool("h", bits=8, ipv4="10.73.0.0/24", sel={"team": "b", "tier": "gold"})
    proc = start_ipam()
    proc.wait_ready()
    x = name_of(new_node("x", labels={"team": "a"}))
    gets(kube, x, ["10.72.0.0/24"])
    relabel = {"metadata": {"labels": {"team": "b", "tier": "gold"}}}
    kube.patch(r.NODES, x, relabel, patch_type="merge")
    stays_empty_change = kube.get(r.NODES, x)["spec"]["podCIDRs"]
    assert stays_empty_change == ["10.72.0.0/24"]
    wait_status(kube, a, lambda s: s.get("nodes") == 1)
    assert proc.metric("local_ccm_ipam_node_writes_total", {"code": "200"}) == 1  # fmt: skip
    delete_and_wait(kube, r.NODES, x)
    wait_status(kube, a, lambda s: s.get("nodes") == 0)
    gets(kube, name_of(new_node("y", labels={"team": "a"})), ["10.72.0.0/24"])


def test_i21_pre_existing_cidr_outside_the_matching_pools(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = name_of(make_pool("x-cc", bits=8, ipv4="10.80.0.0/16", sel={"team": "x"}))
    legacy = new_node("legacy", pod_cidrs=["10.80.0.0/24"])
    before = legacy["metadata"]["resourceVersion"]
    start_ipam().wait_ready()
    gets(kube, name_of(new_node("new", labels={"team": "x"})), ["10.80.1.0/24"])
    assert kube.get(r.NODES, name_of(legacy))["metadata"]["resourceVersion"] == before
    wait_status(kube, pool, lambda s: s.get("nodes") == 2)


def test_i29_status(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    st = name_of(make_pool("st", bits=8, ipv4="10.81.0.0/22", ipv6="fd00:81::/118", sel={"s": "1"}))
    start_ipam().wait_ready()
    for i in range(3):
        new_node(f"n{i}", labels={"s": "1"})
    family = {"allocated": 3, "unavailable": 0, "free": 1, "capacity": 4}

    def complete(s: dict[str, Any]) -> bool:
        return (
            s.get("observedGeneration") == 1 and s.get("nodes") == 3
            and s.get("ipv4") == {"blockPrefixLength": 24, **family}
            and s.get("ipv6") == {"blockPrefixLength": 120, **family}
            and condition({"status": s}, "Ready") == ("True", "Ready")
            and condition({"status": s}, "Exhausted") == ("False", "FreeBlocksAvailable")
        )  # fmt: skip

    wait_status(kube, st, complete)


def test_i30_overlapping_pools_of_different_sizes(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    big = name_of(make_pool("big-blocks", bits=8, ipv4="10.100.0.0/16", sel={"size": "big"}))
    make_pool("small-blocks", bits=6, ipv4="10.100.0.0/16", sel={"size": "small"})
    start_ipam().wait_ready()
    gets(kube, name_of(new_node("s1", labels={"size": "small"})), ["10.100.0.0/26"])
    gets(kube, name_of(new_node("b1", labels={"size": "big"})), ["10.100.1.0/24"])
    gets(kube, name_of(new_node("s2", labels={"size": "small"})), ["10.100.0.64/26"])
    wait_status(kube, big, lambda s: (s.get("ipv4") or {}).get("unavailable", 0) >= 1)


def test_i32_overlapping_node_cidrs_at_start_up(
    kube: Client, start_ipam: StartIpam, new_node: NewNode
) -> None:
    c1 = new_node("c1", pod_cidrs=["10.83.0.0/24"])
    c2 = new_node("c2", pod_cidrs=["10.83.0.0/25"])
    proc = start_ipam("--cluster-cidr=10.99.0.0/16")
    proc.wait_ready()
    for node in (c1, c2):
        has_event(kube, EVENT_NAMESPACE, "Node", name_of(node), "CIDRConflict")
        current = kube.get(r.NODES, name_of(node))["metadata"]["resourceVersion"]
        assert current == node["metadata"]["resourceVersion"]
    eventually(lambda: proc.metric("local_ccm_ipam_cidr_conflicts") == 1, timeout=5)


def test_i35_terminating_node_without_cidrs_is_left_alone(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    proc = start_ipam()
    proc.wait_ready()
    t = name_of(new_node("t", labels={"t": "1"}))
    hold = [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/hold"]}]
    kube.patch(r.NODES, t, hold, patch_type="json")
    kube.delete(r.NODES, t)
    make_pool("t", bits=8, ipv4="10.85.0.0/24", sel={"t": "1"})
    stays_empty(kube, t, 3.0)
    assert proc.metric("local_ccm_ipam_node_writes_total", {"code": "200"}) == 0  # fmt: skip
    kube.patch(r.NODES, t, [{"op": "remove", "path": "/metadata/finalizers"}], patch_type="json")
