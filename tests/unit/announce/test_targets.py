"""What the agents announce: addresses of pools with l2Announcement, their settings and the
traffic of the Services behind them."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Set
from typing import Any

from local_ccm.announce.core import choice
from local_ccm.announce.core.choice import NodeView, Traffic
from local_ccm.announce.core.targets import (
    Target,
    desired_targets,
    ingress_addresses,
    selected_nodes,
)
from local_ccm.labels import LabelSelector, Requirement
from local_ccm.lbpools import InvalidPool, Pool, parse_pool

CLASS = "lb.local-ccm.io/pools"
L2 = {"nodeSelector": {"matchLabels": {"edge": "true"}}, "interfaces": ["bond*"]}
EDGE = LabelSelector((Requirement("edge", "In", ("true",)),))


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def pool(name: str, *addresses: str, **spec: Any) -> Pool | InvalidPool:
    return parse_pool({"metadata": {"name": name}, "spec": {"addresses": list(addresses), **spec}})


def service(name: str, *ips: str, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if "labels" in spec:
        meta["labels"] = spec.pop("labels")
    return {
        "metadata": meta,
        "spec": {"type": "LoadBalancer", **spec},
        "status": {"loadBalancer": {"ingress": [{"ip": a, "ipMode": "VIP"} for a in ips]}},
    }


def targets(
    pools: Iterable[Pool | InvalidPool],
    services: Iterable[Mapping[str, Any]],
    endpoints: Mapping[str, Set[str]] | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    **options: Any,
) -> dict[Any, Target]:
    settings = {"lb_class": CLASS, "classless": True, **options}
    return desired_targets(pools, services, endpoints or {}, namespaces or {}, **settings)


def test_an_address_of_an_announced_pool_carries_the_pool_settings() -> None:
    found = targets([pool("lan", "192.0.2.0/24", l2Announcement=L2)], [service("web", "192.0.2.1")])
    assert found == {
        ip("192.0.2.1"): Target(
            address=ip("192.0.2.1"),
            pool="lan",
            node_selector=EDGE,
            interfaces=("bond*",),
            services=("ns/web",),
            traffic=Traffic(),
        )
    }


def test_an_empty_l2_announcement_is_every_node_on_the_on_link_interfaces() -> None:
    found = targets([pool("lan", "192.0.2.0/24", l2Announcement={})], [service("web", "192.0.2.1")])
    target = found[ip("192.0.2.1")]
    assert (target.node_selector, target.interfaces) == (None, ())


def test_an_address_of_a_pool_without_l2_announcement_is_not_announced() -> None:
    pools = [pool("quiet", "192.0.2.0/24"), pool("lan", "198.51.100.0/24", l2Announcement={})]
    services = [service("a", "192.0.2.1"), service("b", "198.51.100.1")]
    assert set(targets(pools, services)) == {ip("198.51.100.1")}


def test_a_dual_stack_service_announces_both_addresses() -> None:
    pools = [pool("lan", "192.0.2.0/24", "2001:db8::/64", l2Announcement=L2)]
    found = targets(pools, [service("web", "192.0.2.1", "2001:db8::1")])
    assert set(found) == {ip("192.0.2.1"), ip("2001:db8::1")}
    assert {t.services for t in found.values()} == {("ns/web",)}


def test_services_sharing_an_address_are_one_target_with_both() -> None:
    pools = [pool("lan", "192.0.2.0/24", l2Announcement=L2)]
    services = [service("web", "192.0.2.1"), service("dns", "192.0.2.1", namespace="infra")]
    found = targets(pools, services)
    assert list(found) == [ip("192.0.2.1")]
    assert found[ip("192.0.2.1")].services == ("infra/dns", "ns/web")


def test_local_policy_gives_the_endpoint_nodes_intersected_over_the_sharing_services() -> None:
    pools = [pool("lan", "192.0.2.0/24", l2Announcement={})]
    services = [
        service("web", "192.0.2.1", externalTrafficPolicy="Local"),
        service("api", "192.0.2.1", externalTrafficPolicy="Local"),
        service("cluster", "192.0.2.1", externalTrafficPolicy="Cluster"),
        service("alone", "192.0.2.2", externalTrafficPolicy="Cluster"),
    ]
    endpoints = {"ns/web": {"n1", "n2"}, "ns/api": {"n2", "n3"}, "ns/alone": {"n9"}}
    found = targets(pools, services, endpoints)
    assert found[ip("192.0.2.1")].traffic == Traffic(local=True, endpoint_nodes=frozenset({"n2"}))
    assert found[ip("192.0.2.2")].traffic == Traffic()  # Cluster: endpoints are not read
    nodes = [NodeView(n, ready=True, excluded=False) for n in ("n1", "n2", "n3")]
    everyone = frozenset({"n1", "n2", "n3"})
    traffic = found[ip("192.0.2.1")].traffic
    assert choice.eligible(nodes, None, everyone, traffic) == {"n2"}


def test_a_local_service_without_endpoints_has_no_eligible_node() -> None:
    pools = [pool("lan", "192.0.2.0/24", l2Announcement={})]
    found = targets(pools, [service("web", "192.0.2.1", externalTrafficPolicy="Local")])
    assert found[ip("192.0.2.1")].traffic == Traffic(local=True)


def test_removing_the_pool_or_its_field_stops_the_announcement() -> None:
    services = [service("web", "192.0.2.1")]
    assert targets([pool("lan", "192.0.2.0/24", l2Announcement=L2)], services)
    assert targets([], services) == {}
    assert targets([pool("lan", "192.0.2.0/24")], services) == {}


def test_an_invalid_pool_announces_nothing() -> None:
    bad = pool("lan", "192.0.2.0/24", l2Announcement={"interfaces": ["eth[0"]})
    assert isinstance(bad, InvalidPool)
    assert targets([bad], [service("web", "192.0.2.1")]) == {}


def test_a_disabled_pool_keeps_announcing_what_its_services_hold() -> None:
    pools = [pool("lan", "192.0.2.0/24", disabled=True, l2Announcement={})]
    assert set(targets(pools, [service("web", "192.0.2.1")])) == {ip("192.0.2.1")}


def test_an_address_outside_the_pool_ranges_is_not_announced() -> None:
    pools = [pool("lan", "192.0.2.0/24", avoidBuggyIPs=True, l2Announcement={})]
    services = [service("a", "192.0.2.0"), service("b", "192.0.2.255"), service("c", "10.0.0.1")]
    assert targets(pools, services) == {}


def test_only_load_balancer_services_of_the_class_are_read() -> None:
    pools = [pool("lan", "192.0.2.0/24", l2Announcement={})]
    services = [
        service("ours", "192.0.2.1", loadBalancerClass=CLASS),
        service("classless", "192.0.2.2"),
        service("theirs", "192.0.2.3", loadBalancerClass="example.com/other"),
        service("nodeport", "192.0.2.4", type="NodePort"),
    ]
    assert set(targets(pools, services)) == {ip("192.0.2.1"), ip("192.0.2.2")}
    assert set(targets(pools, services, classless=False)) == {ip("192.0.2.1")}


def test_overlapping_pools_follow_the_allocator_placement() -> None:
    """The first pool in order that contains the address and selects the Service, else the
    first that contains it, as `service-lb-ipam` places a held address."""
    low = pool("low", "192.0.2.0/24", priority=0, l2Announcement={"interfaces": ["low"]},
               namespaceSelector={"matchLabels": {"team": "a"}})  # fmt: skip
    high = pool("high", "192.0.2.0/24", priority=1, l2Announcement={"interfaces": ["high"]})
    services = [service("x", "192.0.2.1", namespace="a"), service("y", "192.0.2.2", namespace="b")]
    found = targets([high, low], services, namespaces={"a": {"team": "a"}, "b": {}})
    assert (found[ip("192.0.2.1")].pool, found[ip("192.0.2.2")].pool) == ("low", "high")
    disabled = pool("low", "192.0.2.0/24", disabled=True, l2Announcement={})
    found = targets([high, disabled], services)
    assert found[ip("192.0.2.1")].pool == "high"  # a disabled pool selects nothing
    quiet = pool("quiet", "192.0.2.0/24", priority=0)
    assert targets([quiet, high], services) == {}  # the address's pool is not announced


def test_the_pool_a_service_names_is_its_addresses_pool_as_for_the_allocator() -> None:
    """`lb.local-ccm.io/pool` (or MetalLB's `address-pool`) picks the pool the allocator took
    the address from: the announcer must read the same pool, announced or not."""
    quiet = pool("a", "192.0.2.0/24", priority=0)
    loud = pool("b", "192.0.2.0/24", priority=1, l2Announcement={})
    named = service("x", "192.0.2.1")
    named["metadata"]["annotations"] = {"lb.local-ccm.io/pool": "b"}
    assert targets([quiet, loud], [named])[ip("192.0.2.1")].pool == "b"
    edge = pool("a", "192.0.2.0/24", priority=0,
                l2Announcement={"nodeSelector": {"matchLabels": {"edge": "true"}}})  # fmt: skip
    silent = pool("b", "192.0.2.0/24", priority=1)
    named["metadata"]["annotations"] = {"metallb.io/address-pool": "b"}
    assert targets([edge, silent], [named]) == {}  # its pool is not announced


def test_sharing_services_placed_in_different_pools_take_the_first_in_order() -> None:
    low = pool("low", "192.0.2.0/24", l2Announcement={"interfaces": ["low"]},
               serviceSelector={"matchLabels": {"app": "web"}})  # fmt: skip
    high = pool("high", "192.0.2.0/24", priority=1, l2Announcement={"interfaces": ["high"]})
    services = [service("web", "192.0.2.1", labels={"app": "web"}), service("db", "192.0.2.1")]
    target = targets([low, high], services)[ip("192.0.2.1")]
    assert (target.pool, target.interfaces, target.services) == (
        "low",
        ("low",),
        ("ns/db", "ns/web"),
    )


def test_ingress_addresses_skip_what_is_not_an_ip() -> None:
    obj = {"status": {"loadBalancer": {"ingress": [
        {"ip": "192.0.2.1"}, {"hostname": "lb.example.com"}, {"ip": "nope"}, "junk",
        {"ip": "192.0.2.1"}, {"ip": "2001:db8::1"}]}}}  # fmt: skip
    assert ingress_addresses(obj) == (ip("192.0.2.1"), ip("2001:db8::1"))
    assert ingress_addresses({}) == ()


def test_a_node_the_selector_does_not_match_is_ineligible() -> None:
    target = targets([pool("lan", "192.0.2.0/24", l2Announcement=L2)], [service("w", "192.0.2.1")])
    selector = target[ip("192.0.2.1")].node_selector
    labels = {"edge-1": {"edge": "true"}, "core-1": {"edge": "false"}, "bare": {}}
    selected = selected_nodes(selector, labels)
    assert selected == frozenset({"edge-1"})
    nodes = [NodeView(n, ready=True, excluded=False) for n in labels]
    core = NodeView("core-1", ready=True, excluded=False)
    assert choice.eligible(nodes, selected, set(labels), Traffic()) == {"edge-1"}
    reason = choice.ineligible_reason(core, selected, set(labels), Traffic())
    assert reason == "not matched by the pool's node selector"


def test_no_selector_selects_every_node() -> None:
    assert selected_nodes(None, {"a": {}}) is None
