"""Upstream's integration scenarios I01-I10 against a real apiserver,
with the controller as a subprocess of its entry point under the shipped RBAC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Invalid
from tests.integration.ipam.conftest import FIXTURE_U_FLAGS, StartIpam
from tests.integration.ipam.harness import IpamProcess
from tests.integration.ipam.objects import FINALIZER, condition
from tests.support import resources as r
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("crds")
GETS = 10.0  # "gets X" within 5 s, doubled for a loaded 2-core machine
MakePool = Callable[..., Obj]
NewNode = Callable[..., Obj]


def gets(kube: Client, name: str, expected: list[str], timeout: float = GETS) -> None:
    """PodCIDRs equal `expected` exactly, and podCIDR the first."""

    def check() -> bool:
        spec = kube.get(r.NODES, name).get("spec") or {}
        return spec.get("podCIDRs") == expected and spec.get("podCIDR") == expected[0]

    eventually(check, timeout=timeout, message=f"Node {name} gets {expected}")


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


@pytest.fixture
def fixture_u(
    make_pool: MakePool, new_node: NewNode, start_ipam: StartIpam
) -> Callable[..., IpamProcess]:
    """`initial-cc` and `initial-node` exist before the controller starts."""
    make_pool(
        "initial-cc", bits=8, ipv4="10.2.0.0/16", ipv6="fd00:20:96::/112", sel={"bootstrap": "true"}
    )
    new_node("initial-node", labels={"bootstrap": "true"})

    def start(*extra: str) -> IpamProcess:
        proc = start_ipam(*FIXTURE_U_FLAGS, *extra)
        proc.wait_ready()
        return proc

    return start


def test_i01_default_pool(kube: Client, fixture_u: Any, new_node: NewNode) -> None:
    fixture_u()
    node = new_node("default-node", labels={"label": "unmatched"})
    gets(kube, name_of(node), ["10.96.0.0/24", "fd00:10:96::/120"])


def test_i02_objects_existing_before_start_up(
    kube: Client, fixture_u: Any, new_node: NewNode, node_name: Callable[[str], str]
) -> None:
    fixture_u()
    gets(kube, node_name("initial-node"), ["10.2.0.0/24", "fd00:20:96::/120"])
    node = new_node("bootstrap-node", labels={"bootstrap": "true"})
    gets(kube, name_of(node), ["10.2.1.0/24", "fd00:20:96::100/120"])


def test_i03_ipv4_single_stack(
    kube: Client, fixture_u: Any, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("ipv4-cc", bits=8, ipv4="10.0.0.0/16", sel={"ipv4": "true", "singlestack": "true"})
    fixture_u()
    node = new_node("n", labels={"ipv4": "true", "singlestack": "true"})
    gets(kube, name_of(node), ["10.0.0.0/24"])


def test_i04_ipv6_single_stack(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("ipv6-cc", bits=8, ipv6="fd00:20:100::/112", sel={"ipv6": "true"})
    start_ipam().wait_ready()
    node = new_node("n", labels={"ipv6": "true"})
    gets(kube, name_of(node), ["fd00:20:100::/120"])


DUAL = {"ipv4": "true", "ipv6": "true"}


def test_i05_dual_stack(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("dual", bits=8, ipv4="192.168.0.0/16", ipv6="fd00:30:100::/112", sel=DUAL)
    start_ipam().wait_ready()
    node = new_node("n", labels=DUAL)
    gets(kube, name_of(node), ["192.168.0.0/24", "fd00:30:100::/120"])


def delete_and_wait(kube: Client, res: Any, name: str, timeout: float = 15.0) -> None:
    kube.delete(res, name)
    eventually(lambda: not _exists(kube, res, name), timeout=timeout, message=f"{name} gone")


def _exists(kube: Client, res: Any, name: str) -> bool:
    try:
        kube.get(res, name)
    except Exception:  # NotFound is what we wait for
        return False
    return True


def test_i06_release(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    make_pool("dual", bits=8, ipv4="192.168.0.0/23", ipv6="fd00:30:100::/119", sel=DUAL)
    start_ipam().wait_ready()
    n1 = name_of(new_node("n1", labels=DUAL))
    gets(kube, n1, ["192.168.0.0/24", "fd00:30:100::/120"])
    n2 = name_of(new_node("n2", labels=DUAL))
    gets(kube, n2, ["192.168.1.0/24", "fd00:30:100::100/120"])
    delete_and_wait(kube, r.NODES, n1)
    n3 = name_of(new_node("n3", labels=DUAL))
    gets(kube, n3, ["192.168.0.0/24", "fd00:30:100::/120"])


def test_pod_cidrs_are_set_once_and_guarded_by_uid(kube: Client, new_node: NewNode) -> None:
    """The podCIDRs write (a JSON Patch guarded by `test /metadata/uid`) against the real
    apiserver: a second write is rejected, and
    so is a write for another incarnation of the Node (stale uid)."""
    from ipaddress import ip_network  # noqa: PLC0415

    from local_ccm.ipam.core.status import node_patch  # noqa: PLC0415

    node = new_node("once")
    name, uid = name_of(node), node["metadata"]["uid"]
    first = (ip_network("10.60.0.0/24"), ip_network("fd00:60::/120"))
    written = kube.patch(r.NODES, name, node_patch(uid, first), patch_type="json")
    assert written["spec"]["podCIDRs"] == ["10.60.0.0/24", "fd00:60::/120"]
    again = (ip_network("10.60.1.0/24"),)
    with pytest.raises(Invalid) as info:
        kube.patch(r.NODES, name, node_patch(uid, again), patch_type="json")
    assert "podCIDR" in info.value.message
    same = kube.patch(r.NODES, name, node_patch(uid, first), patch_type="json")
    assert same["spec"]["podCIDRs"] == written["spec"]["podCIDRs"]  # an equal write is a no-op
    delete_and_wait(kube, r.NODES, name)
    reborn = new_node("once")
    from local_ccm.kube.errors import ApiError  # noqa: PLC0415

    with pytest.raises(ApiError) as stale:
        kube.patch(r.NODES, name, node_patch(uid, first), patch_type="json")
    assert stale.value.status in (409, 422)
    assert not (kube.get(r.NODES, name_of(reborn)).get("spec") or {}).get("podCIDRs")


def test_i09_deletion_protection(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    pool = make_pool("dualstack-cc-del", bits=8, ipv4="192.168.0.0/23",
                     ipv6="fd00:30:100::/119", sel=DUAL)  # fmt: skip
    start_ipam().wait_ready()
    node = name_of(new_node("n", labels=DUAL))
    gets(kube, node, ["192.168.0.0/24", "fd00:30:100::/120"])
    cc = name_of(pool)
    eventually(lambda: FINALIZER in (kube.get(r.CLUSTER_CIDRS, cc)["metadata"].get("finalizers")
                                     or []), timeout=10)  # fmt: skip
    kube.delete(r.CLUSTER_CIDRS, cc)

    def terminating() -> bool:
        obj = kube.get(r.CLUSTER_CIDRS, cc)
        return condition(obj, "Ready") == ("False", "Terminating")

    eventually(terminating, timeout=10, message="Ready=False/Terminating")
    obj = kube.get(r.CLUSTER_CIDRS, cc)
    assert obj["metadata"]["deletionTimestamp"]
    assert FINALIZER in obj["metadata"]["finalizers"]
    kube.delete(r.NODES, node)
    eventually(lambda: not _exists(kube, r.CLUSTER_CIDRS, cc), timeout=15,
               message="the pool disappears")  # fmt: skip


def test_i10_terminating_pool_not_used(
    kube: Client, start_ipam: StartIpam, make_pool: MakePool, new_node: NewNode
) -> None:
    a = make_pool("a", bits=8, ipv4="192.168.0.0/23", ipv6="fd00:30:100::/119", sel=DUAL)
    make_pool("b", bits=8, ipv4="10.1.0.0/23", ipv6="fd12:30:100::/119", sel={"ipv4": "true"})
    start_ipam().wait_ready()
    n1 = name_of(new_node("n1", labels=DUAL))
    gets(kube, n1, ["192.168.0.0/24", "fd00:30:100::/120"])
    kube.delete(r.CLUSTER_CIDRS, name_of(a))
    eventually(lambda: condition(kube.get(r.CLUSTER_CIDRS, name_of(a)), "Ready")
               == ("False", "Terminating"), timeout=10)  # fmt: skip
    n2 = name_of(new_node("n2", labels=DUAL))
    gets(kube, n2, ["10.1.0.0/24", "fd12:30:100::/120"])
