"""Who may share an address is decided the same way live and after a restart (the ledger
rebuilt from the Services' status): the pool an address counts as in is a pool that selects
the Service first, and a kube-vip pool lets only the namespaces it serves share. Overlapping
kube-vip scopes (`cidr-global` and `cidr-<namespace>`) once made a restart hand a non-sharing
Service's address to another Service, or move one of two sharing Services. And the kube-vip
annotation kube-vip-cloud-provider leaves on a dual-stack Service is read with the
`spec.loadBalancerIP` it writes beside it (its first address), never as a second request.
Cases after kube-vip-cloud-provider's `Test_syncLoadBalancer` and `discoverPool`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from local_ccm.lbipam.core.allocator import Allocation, build_ledger, decide, hold
from local_ccm.lbipam.core.kubevip import parse_kubevip
from local_ccm.lbipam.core.ledger import Ledger
from local_ccm.lbipam.core.pools import Pool, parse_pool
from local_ccm.lbipam.core.service import ServiceRequest, parse_service


def svc(name: str, namespace: str = "default", *, port: int = 80, status: Sequence[str] = (),
        spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        ) -> ServiceRequest:  # fmt: skip
    return parse_service({
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {"type": "LoadBalancer", "ports": [{"protocol": "TCP", "port": port}],
                 **(spec or {})},
        "status": {"loadBalancer": {"ingress": [{"ip": a} for a in status]}},
    })  # fmt: skip


def kubevip(**data: str) -> list[Pool]:
    return list(parse_kubevip({k.replace("_", "-"): v for k, v in data.items()}).pools)


def give(request: ServiceRequest, pools: list[Pool], ledger: Ledger,
         labels: dict[str, str] | None = None) -> list[str] | str:  # fmt: skip
    decision = decide(request, pools, ledger, labels or {})
    if not isinstance(decision, Allocation):
        return decision.reason
    hold(ledger, decision)
    return [str(a) for a in decision.addresses]


def test_a_restart_never_lets_a_namespace_pool_share_what_the_global_pool_gave() -> None:
    """n1 (default, no sharing) holds 10.0.0.1 of cidr-global; cidr-team overlaps it and
    allows sharing in team. Live, a team Service gets 10.0.0.2; after a restart as well."""
    pools = kubevip(cidr_global="10.0.0.0/24", cidr_team="10.0.0.0/28", allow_share_team="true")
    live = Ledger()
    assert give(svc("n1"), pools, live) == ["10.0.0.1"]
    assert give(svc("t1", "team", port=443), pools, live) == ["10.0.0.2"]
    rebuilt, notes = build_ledger([svc("n1", status=["10.0.0.1"])], pools)
    assert notes == []
    assert give(svc("t1", "team", port=443), pools, rebuilt) == ["10.0.0.2"]


def test_two_services_sharing_through_the_global_pool_keep_sharing_after_a_restart() -> None:
    pools = kubevip(cidr_global="10.0.0.0/24", cidr_team="10.0.0.0/28", allow_share_global="true")
    live = Ledger()
    assert give(svc("s1", "other"), pools, live) == ["10.0.0.1"]
    assert give(svc("s2", "other", port=443), pools, live) == ["10.0.0.1"]
    held = [svc("s1", "other", status=["10.0.0.1"]),
            svc("s2", "other", port=443, status=["10.0.0.1"])]  # fmt: skip
    rebuilt, notes = build_ledger(held, pools)
    assert notes == []
    assert give(held[1], pools, rebuilt) == ["10.0.0.1"]
    assert give(held[0], pools, rebuilt) == ["10.0.0.1"]


def test_a_rebuild_reads_namespace_labels_as_a_decision_does() -> None:
    """s1 took 10.0.0.1 from a-lan, which selects its namespace by label and shares nothing;
    the kube-vip global pool overlapping it shares. Read without the labels, the rebuild
    counted the address in the global pool, and a Service of another namespace joined it."""
    lan = parse_pool(
        {
            "metadata": {"name": "a-lan"},
            "spec": {
                "addresses": ["10.0.0.0/24"],
                "namespaceSelector": {"matchLabels": {"tier": "web"}},
            },
        }
    )
    assert isinstance(lan, Pool)
    pools = [lan, *kubevip(cidr_global="10.0.0.0/24", allow_share_global="true")]
    live = Ledger()
    assert give(svc("s1", "web"), pools, live, {"tier": "web"}) == ["10.0.0.1"]
    assert give(svc("s3", "other", port=443), pools, live) == ["10.0.0.2"]
    rebuilt, _ = build_ledger([svc("s1", "web", status=["10.0.0.1"])], pools,
                              {"web": {"tier": "web"}})  # fmt: skip
    assert give(svc("s3", "other", port=443), pools, rebuilt) == ["10.0.0.2"]


DUAL = {"ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "RequireDualStack",
        "loadBalancerIP": "fe80::10"}  # fmt: skip
KUBEVIP_IPS = {"kube-vip.io/loadbalancerIPs": "fe80::10,10.120.120.1"}


def test_a_dual_stack_service_kube_vip_cloud_provider_served_keeps_both_addresses() -> None:
    """kube-vip-cloud-provider writes the annotation with both addresses and
    `spec.loadBalancerIP` with the first; the Service keeps both after the move."""
    pools = kubevip(cidr_global="10.120.120.1/24,fe80::10/126")
    held = svc("dual", spec=DUAL, annotations=KUBEVIP_IPS, status=["fe80::10", "10.120.120.1"])
    # the annotation asks for what it holds, the field beside it is part of it
    assert [str(a) for a in held.requested] == ["fe80::10", "10.120.120.1"]
    assert held.problems == ()
    ledger, _ = build_ledger([held], pools)
    assert give(held, pools, ledger) == ["fe80::10", "10.120.120.1"]


def test_the_same_service_before_its_status_is_written_asks_for_both() -> None:
    pools = kubevip(cidr_global="10.120.120.1/24,fe80::10/126")
    asking = svc("dual", spec=DUAL, annotations=KUBEVIP_IPS)
    assert asking.problems == ()
    assert give(asking, pools, Ledger()) == ["fe80::10", "10.120.120.1"]


def test_a_load_balancer_ip_outside_the_annotation_still_disagrees() -> None:
    asking = svc("dual", spec={**DUAL, "loadBalancerIP": "10.120.120.9"}, annotations=KUBEVIP_IPS)
    assert asking.problems == (
        "spec.loadBalancerIP asks for other addresses than annotation kube-vip.io/loadbalancerIPs",
    )


def _sharing_pair() -> tuple[list[Pool], Ledger]:
    """s1 and s2 of namespace other share 10.0.0.1 through kube-vip's allow-share."""
    pools = kubevip(cidr_global="10.0.0.0/24", allow_share_global="true")
    ledger = Ledger()
    assert give(svc("s1", "other"), pools, ledger) == ["10.0.0.1"]
    assert give(svc("s2", "other", port=443), pools, ledger) == ["10.0.0.1"]
    return pools, ledger


KEY = {"lb.local-ccm.io/sharing-key": "web"}


def test_giving_the_sharers_their_sharing_key_one_at_a_time_moves_neither() -> None:
    """What the move from kube-vip-cloud-provider says to do, one Service after the other."""
    pools, ledger = _sharing_pair()
    first = svc("s1", "other", annotations=KEY, status=["10.0.0.1"])
    assert give(first, pools, ledger) == ["10.0.0.1"]
    second = svc("s2", "other", port=443, annotations=KEY, status=["10.0.0.1"])
    assert give(second, pools, ledger) == ["10.0.0.1"]


def test_a_pool_that_does_not_share_added_over_their_range_moves_neither() -> None:
    pools, ledger = _sharing_pair()
    lan = parse_pool({"metadata": {"name": "a-lan"}, "spec": {"addresses": ["10.0.0.0/24"]}})
    assert isinstance(lan, Pool)
    both = [lan, *pools]
    assert give(svc("s2", "other", port=443, status=["10.0.0.1"]), both, ledger) == ["10.0.0.1"]
    assert give(svc("s1", "other", status=["10.0.0.1"]), both, ledger) == ["10.0.0.1"]
    assert give(svc("s3", "other", port=8080), both, ledger) == ["10.0.0.2"]  # nobody joins


def test_a_sharing_key_changed_while_shared_is_still_refused() -> None:
    """MetalLB's TestAssignment: "can't change sharing key while shared"."""
    pools = kubevip(cidr_global="10.0.0.0/24")
    ledger = Ledger()
    share = {"lb.local-ccm.io/sharing-key": "share"}
    assert give(svc("s4", annotations=share), pools, ledger) == ["10.0.0.1"]
    assert give(svc("s3", port=443, annotations=share), pools, ledger) == ["10.0.0.1"]
    other = {"lb.local-ccm.io/sharing-key": "othershare"}
    changed = svc("s3", port=443, annotations=other, status=["10.0.0.1"])
    assert give(changed, pools, ledger) == ["10.0.0.2"]  # decided anew, away from s4
