"""Tie-breaks (I11), empty selectors (I14), start-up family mismatch (I16), vanished pools
(I20) and the reuse delay (I25)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam.conftest import EVENT_NAMESPACE, FIXTURE_U_FLAGS, StartIpam
from tests.integration.ipam.objects import condition, event_reasons
from tests.integration.ipam.test_i01_i10_allocation import delete_and_wait, gets, name_of
from tests.support import resources as r
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("crds")
MakePool = Callable[..., Obj]
NewNode = Callable[..., Obj]
V4V6 = {"ipv4": "true", "ipv6": "true"}
AB = {"apv4": "true", "bpv6": "true"}

# Row pools: (suffix, ipv4, ipv6, bits, selector)
ROW_A = [
    ("single-label-match-cc", "192.168.0.0/23", "fd00:30:100::/119", 8, {"match": "single"}),
    ("double-label-match-cc", "10.0.0.0/23", "fd12:30:200::/119", 8, V4V6),
]
ROW_B = [
    ROW_A[0],
    ("double-label-match-cc", "10.0.0.0/20", "fd12:30:200::/116", 8, V4V6),
    ("few-alloc-cc", "172.16.0.0/23", "fd34:30:100::/119", 8, V4V6),
]
ROW_C = [*ROW_B, ("low-pernodehostbits-cc", "172.31.0.0/24", "fd35:30:100::/120", 7, V4V6)]
ROW_D = [*ROW_C, ("low-alpha-cc", "192.169.0.0/24", "fd12:40:100::/120", 7, AB)]
ROW_E = [*ROW_D, ("low-ip-cc", "10.1.0.0/24", "fd00:10:100::/120", 7, AB)]
ROWS = {
    "a": (ROW_A, {}, ["10.0.0.0/24", "fd12:30:200::/120"]),
    "b": (ROW_B, {}, ["172.16.0.0/24", "fd34:30:100::/120"]),
    "c": (ROW_C, {}, ["172.31.0.0/25", "fd35:30:100::/121"]),
    "d": (ROW_D, AB, ["192.169.0.0/25", "fd12:40:100::/121"]),
    "e": (ROW_E, AB, ["10.1.0.0/25", "fd00:10:100::/121"]),
}


def ready(kube: Client, pool: str) -> bool:
    return condition(kube.get(r.CLUSTER_CIDRS, pool), "Ready") == ("True", "Ready")


def wait_ready(kube: Client, pools: list[str]) -> None:
    eventually(lambda: all(ready(kube, p) for p in pools), timeout=10, message="pools Ready")


@pytest.mark.parametrize("row", sorted(ROWS))
def test_i11_tie_breaks(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode, row: str
) -> None:
    pools, extra, expected = ROWS[row]
    start_ipam().wait_ready()
    names = [
        name_of(make_pool(suffix, bits=bits, ipv4=v4, ipv6=v6, sel=sel))
        for suffix, v4, v6, bits, sel in pools
    ]
    wait_ready(kube, names)
    node = new_node("n", labels={**V4V6, "match": "single", **extra})
    gets(kube, name_of(node), expected)


def test_i11_row_f_complete_tie_goes_to_the_lower_name(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    start_ipam().wait_ready()
    spec: dict[str, Any] = {"bits": 7, "ipv4": "10.1.0.0/24", "ipv6": "fd00:10:100::/120"}
    tie_b = name_of(make_pool("tie-b", sel={"match": "single"}, **spec))
    tie_a = name_of(make_pool("tie-a", sel={"match": "single"}, **spec))
    wait_ready(kube, [tie_a, tie_b])
    gets(
        kube,
        name_of(new_node("n", labels={"match": "single"})),
        ["10.1.0.0/25", "fd00:10:100::/121"],
    )
    eventually(lambda: (kube.get(r.CLUSTER_CIDRS, tie_a).get("status") or {}).get("nodes") == 1,
               timeout=10)  # fmt: skip


def test_i14_empty_term_vs_empty_list(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("empty-term-cc", bits=8, ipv4="10.52.0.0/24",
              node_selector={"nodeSelectorTerms": [{}]})  # fmt: skip
    make_pool("all-cc", bits=6, ipv4="10.53.0.0/24", node_selector={"nodeSelectorTerms": []})
    start_ipam(*FIXTURE_U_FLAGS).wait_ready()
    gets(kube, name_of(new_node("n", labels={"x": "y"})), ["10.53.0.0/26"])


def test_i16_family_mismatch_at_start_up(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = name_of(make_pool("v4-catch", bits=8, ipv4="10.60.0.0/16"))
    new_node("legacy-dual", pod_cidrs=["10.60.0.0/24", "fd00:60::/120"])
    proc = start_ipam()
    proc.wait_ready(timeout=10)

    def counted() -> bool:
        status = kube.get(r.CLUSTER_CIDRS, pool).get("status") or {}
        return status.get("nodes") == 1 and (status.get("ipv4") or {}).get("allocated") == 1

    eventually(counted, timeout=10, message="v4-catch counts the dual-stack Node")
    assert proc.metric("local_ccm_ipam_unowned_cidrs") == 1
    gets(kube, name_of(new_node("new")), ["10.60.1.0/24"])


def test_i20a_pool_created_and_deleted_while_stopped(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    ghost = name_of(make_pool("ghost", bits=8, ipv4="10.74.0.0/24", sel={"g": "1"}))
    delete_and_wait(kube, r.CLUSTER_CIDRS, ghost)
    start_ipam(*FIXTURE_U_FLAGS).wait_ready()
    gets(kube, name_of(new_node("n", labels={"g": "1"})), ["10.96.0.0/24", "fd00:10:96::/120"])


def test_i20b_pool_removed_without_the_finalizer_path(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    spec: dict[str, Any] = {"bits": 8, "ipv4": "10.75.0.0/23", "sel": {"g": "2"}}
    gone = name_of(make_pool("gone-cc", **spec))
    start_ipam(*FIXTURE_U_FLAGS).wait_ready()
    p = name_of(new_node("p", labels={"g": "2"}))
    gets(kube, p, ["10.75.0.0/24"])
    kube.delete(r.CLUSTER_CIDRS, gone)
    obj = kube.get(r.CLUSTER_CIDRS, gone)
    kube.patch(r.CLUSTER_CIDRS, gone, [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": obj["metadata"]["resourceVersion"]},
        {"op": "remove", "path": "/metadata/finalizers"},
    ], patch_type="json")  # fmt: skip
    eventually(lambda: "ClusterCIDRRemoved" in event_reasons(kube, EVENT_NAMESPACE, "Node", p),
               timeout=10)  # fmt: skip
    again = name_of(make_pool("again-cc", **spec))
    # The default pool would catch a Node created before the new pool is Ready.
    wait_ready(kube, [again])
    gets(kube, name_of(new_node("q", labels={"g": "2"})), ["10.75.1.0/24"])


def test_i25_reuse_delay(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("two", bits=8, ipv4="10.86.0.0/23", sel={"d": "1"})
    start_ipam("--cidr-reuse-delay=10s").wait_ready()
    first = name_of(new_node("a", labels={"d": "1"}))
    gets(kube, first, ["10.86.0.0/24"])
    gets(kube, name_of(new_node("b", labels={"d": "1"})), ["10.86.1.0/24"])
    delete_and_wait(kube, r.NODES, first)
    started = time.monotonic()
    c = name_of(new_node("c", labels={"d": "1"}))
    while time.monotonic() - started < 8.0:
        assert not (kube.get(r.NODES, c).get("spec") or {}).get("podCIDRs")
        time.sleep(0.5)
    gets(kube, c, ["10.86.0.0/24"], timeout=max(1.0, 15.0 - (time.monotonic() - started)))
