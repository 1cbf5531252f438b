"""What a Service asks for."""

from __future__ import annotations

import ipaddress
from typing import Any

from local_ccm.lbipam.core.service import parse_service, wanted_families


def svc(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "shop", "annotations": annotations or {}},
        "spec": {"type": "LoadBalancer", **spec},
    }


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_first_present_address_source_wins() -> None:
    request = parse_service(
        svc(
            {
                "metallb.io/loadBalancerIPs": "10.0.0.1, fd00::1",
                "kube-vip.io/loadbalancerIPs": "fd00::1,10.0.0.1",
            }
        )
    )
    assert request.requested == (ip("10.0.0.1"), ip("fd00::1"))
    assert request.problems == ()


def test_our_annotation_comes_before_metallb() -> None:
    request = parse_service(
        svc({"lb.local-ccm.io/ips": "10.0.0.2", "metallb.io/loadBalancerIPs": "10.0.0.3"})
    )
    assert request.requested == (ip("10.0.0.2"),)
    assert "metallb.io/loadBalancerIPs" in request.problems[0]


def test_spec_load_balancer_ip_is_the_last_source() -> None:
    assert parse_service(svc(loadBalancerIP="10.0.0.9")).requested == (ip("10.0.0.9"),)
    conflicting = parse_service(svc({"lb.local-ccm.io/ips": "10.0.0.2"}, loadBalancerIP="10.0.0.9"))
    assert "spec.loadBalancerIP" in conflicting.problems[0]


def test_bad_address_text_is_a_problem() -> None:
    assert parse_service(svc({"lb.local-ccm.io/ips": "10.0.0.300"})).problems


def test_a_requested_address_the_api_server_refuses_in_a_status_is_a_problem() -> None:
    for text, problem in (("::ffff:198.51.100.9", "IPv4-mapped"), ("fe80::5%eth0", "zone")):
        request = parse_service(svc({"lb.local-ccm.io/ips": f"10.0.0.5,{text}"}))
        assert len(request.problems) == 1, text
        assert problem in request.problems[0]


def test_sharing_key_sources_and_disagreement() -> None:
    assert parse_service(svc({"metallb.universe.tf/allow-shared-ip": "k"})).sharing_key == "k"
    clash = parse_service(
        svc({"lb.local-ccm.io/sharing-key": "a", "metallb.io/allow-shared-ip": "b"})
    )
    assert clash.sharing_key == "a"
    assert clash.problems


def test_ports_and_current_addresses_are_read() -> None:
    obj = svc(
        ports=[{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}, {"port": 443}]
    )
    obj["status"] = {
        "loadBalancer": {"ingress": [{"ip": "10.0.0.4", "ipMode": "VIP"}, {"hostname": "x"}]}
    }
    request = parse_service(obj)
    assert request.ports == {("TCP", 80), ("UDP", 53), ("TCP", 443)}
    assert request.current == (ip("10.0.0.4"),)
    assert request.key == "shop/web"


def test_single_stack_takes_the_first_family() -> None:
    request = parse_service(svc(ipFamilies=["IPv6", "IPv4"], ipFamilyPolicy="SingleStack"))
    assert wanted_families(request, [4, 6]) == (6,)
    assert isinstance(wanted_families(request, [4]), str)


def test_prefer_dual_stack_takes_the_servable_families() -> None:
    request = parse_service(svc(ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="PreferDualStack"))
    assert wanted_families(request, [4, 6]) == (4, 6)
    assert wanted_families(request, [6]) == (6,)
    assert isinstance(wanted_families(request, []), str)


def test_require_dual_stack_needs_both() -> None:
    request = parse_service(svc(ipFamilies=["IPv6"], ipFamilyPolicy="RequireDualStack"))
    assert wanted_families(request, [4, 6]) == (6, 4)
    assert isinstance(wanted_families(request, [4]), str)


def test_an_address_repeated_in_one_annotation_is_asked_once() -> None:
    request = parse_service(svc({"lb.local-ccm.io/ips": "10.0.0.1,10.0.0.1"}))
    assert request.requested == (ip("10.0.0.1"),)


def test_the_kube_vip_annotation_the_controller_writes_naming_what_it_holds_is_no_request() -> None:
    held = {"loadBalancer": {"ingress": [{"ip": "10.0.0.5"}]}}
    echo = svc(annotations={"kube-vip.io/loadbalancerIPs": "10.0.0.5"})
    echo["status"] = held
    assert parse_service(echo, kubevip_written=True).requested == ()
    asks = svc(annotations={"kube-vip.io/loadbalancerIPs": "10.0.0.6"})
    asks["status"] = held
    assert [str(a) for a in parse_service(asks, kubevip_written=True).requested] == ["10.0.0.6"]
    fresh = svc(annotations={"kube-vip.io/loadbalancerIPs": "10.0.0.5"})
    assert [str(a) for a in parse_service(fresh, kubevip_written=True).requested] == ["10.0.0.5"]


def test_without_writing_it_the_kube_vip_annotation_is_always_a_request() -> None:
    """Read as an echo, an annotation naming two IPv4 addresses that a SingleStack Service
    holds left the Service with one, which the annotation then asked back: the status
    flipped between one and two addresses at every sync."""
    two = svc(annotations={"kube-vip.io/loadbalancerIPs": "10.0.0.5,10.0.0.6"},
              ipFamilies=["IPv4"], ipFamilyPolicy="SingleStack")  # fmt: skip
    two["status"] = {"loadBalancer": {"ingress": [{"ip": "10.0.0.5"}, {"ip": "10.0.0.6"}]}}
    assert parse_service(two).requested == (ip("10.0.0.5"), ip("10.0.0.6"))
    two["status"] = {"loadBalancer": {"ingress": [{"ip": "10.0.0.5"}]}}
    assert parse_service(two).requested == (ip("10.0.0.5"), ip("10.0.0.6"))


def test_the_pool_annotations_name_one_pool_and_must_agree() -> None:
    """MetalLB's `address-pool` annotations, and ours."""
    for key in ("lb.local-ccm.io/pool", "metallb.io/address-pool",
                "metallb.universe.tf/address-pool"):  # fmt: skip
        obj = {"metadata": {"name": "s", "namespace": "ns", "annotations": {key: " pool5 "}},
               "spec": {"type": "LoadBalancer"}}  # fmt: skip
        assert parse_service(obj).pool == "pool5"
    both = {"metadata": {"name": "s", "annotations": {"metallb.io/address-pool": "a",
                                                      "lb.local-ccm.io/pool": "b"}}}  # fmt: skip
    request = parse_service(both)
    assert request.problems == (
        "the pool annotations disagree: lb.local-ccm.io/pool, metallb.io/address-pool",
    )


def test_a_requested_address_of_a_family_the_service_does_not_have_is_a_problem() -> None:
    """kube-proxy drops a Service's ingress IPs of another family: such an address is dead."""
    for source in ({"annotations": {"lb.local-ccm.io/ips": "fd00::5"}},
                   {"loadBalancerIP": "fd00::5"}):  # fmt: skip
        annotations = source.get("annotations")
        spec = {k: v for k, v in source.items() if k != "annotations"}
        request = parse_service(svc(annotations, ipFamilies=["IPv4"], **spec))  # type: ignore[arg-type]
        assert len(request.problems) == 1, source
        assert (
            "fd00::5 is IPv6, a family spec.ipFamilies (IPv4) does not list" in request.problems[0]
        )
    both = svc({"lb.local-ccm.io/ips": "10.0.0.5,fd00::5"}, ipFamilies=["IPv4"],
               ipFamilyPolicy="SingleStack")  # fmt: skip
    assert len(parse_service(both).problems) == 1
    dual = svc({"lb.local-ccm.io/ips": "10.0.0.5,fd00::5"}, ipFamilies=["IPv4", "IPv6"],
               ipFamilyPolicy="PreferDualStack")  # fmt: skip
    assert parse_service(dual).problems == ()


def test_require_dual_stack_asks_for_both_families_or_none() -> None:
    families = {"ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "RequireDualStack"}
    one = parse_service(svc({"lb.local-ccm.io/ips": "fd00::5"}, **families))
    assert one.problems == (
        "annotation lb.local-ccm.io/ips: RequireDualStack needs an address of each family and"
        " the request names no IPv4 address",
    )
    assert (
        parse_service(svc({"lb.local-ccm.io/ips": "10.0.0.5,fd00::5"}, **families)).problems == ()
    )
    prefer = {"ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack"}
    assert parse_service(svc({"lb.local-ccm.io/ips": "10.0.0.5"}, **prefer)).problems == ()
