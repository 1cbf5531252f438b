"""Candidate hygiene and selection against real kernel state (address flags, VIPs,
secondaries, CNI-like devices, CIDR selection)."""

from __future__ import annotations

from dataclasses import replace

from local_ccm.agent.core.candidates import (
    Failed,
    Verdict,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AddressType
from local_ccm.agent.detect import DetectionReport
from tests.netns.agent.test_detect_routes import V4_TARGET, detect, found, settings
from tests.support.netns import Namespace, NetnsFactory
from tests.support.waiting import eventually


def verdict(report: DetectionReport, kind: AddressType, cidr: str) -> Verdict:
    matches = [v for v in report.verdicts[kind] if str(v.candidate.interface) == cidr]
    assert len(matches) == 1, report.verdicts[kind]
    return matches[0]


def test_a12_detect_vip_source_falls_back_to_the_interface_address(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.batch(
        "addr add 192.0.2.100/32 dev eth0",
        "route add 203.0.113.0/24 via 192.0.2.1 dev eth0 src 192.0.2.100",
    )
    report = detect(up.node, settings("203.0.113.1"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10", "interface")
    assert verdict(report, INTERNAL, "192.0.2.100/32").rejection == "vip"
    with_vips = detect(up.node, settings("203.0.113.1"), include_vips=True)
    assert with_vips.results[INTERNAL, 4] == found("192.0.2.100")


def test_a12_detect_deprecated_v6_source_falls_back(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.add_address("eth0", "2001:db8:0:1::5/64", options=("preferred_lft", "0"))
    up.node.ip(
        "-6", "route", "add", "2001:db8:ff::/48", "via", "2001:db8:0:1::1", "src", "2001:db8:0:1::5"
    )
    report = detect(up.node, settings("2001:db8:ff::1"))
    assert report.results[INTERNAL, 6] == found("2001:db8:0:1::10", "interface")
    assert verdict(report, INTERNAL, "2001:db8:0:1::5/64").rejection == "deprecated"


def test_detect_dad_failed_v6_address_is_rejected(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.gateway.add_address("gw0", "2001:db8:0:1::77/64")
    up.node.add_address("eth0", "2001:db8:0:1::77/64", nodad=False)
    cidr = settings(cidrs="2001:db8:0:1::77/128")

    def dad_failed() -> str | None:
        why = verdict(detect(up.node, cidr), INTERNAL, "2001:db8:0:1::77/64").rejection
        return why if why == "dadfailed" else None

    assert eventually(dad_failed, timeout=10, message="DAD failure seen") == "dadfailed"
    assert isinstance(detect(up.node, cidr).results[INTERNAL, 6], Failed)


def test_detect_secondary_ipv4_is_rejected_and_the_primary_selected(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.ip("addr", "add", "192.0.2.9/24", "dev", "eth0")  # same subnet: a secondary
    report = detect(up.node, settings(cidrs="192.0.2.0/24"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10", "cidr")
    assert verdict(report, INTERNAL, "192.0.2.9/24").rejection == "vip (secondary address)"
    with_vips = detect(up.node, settings(cidrs="192.0.2.0/24"), include_vips=True)
    assert with_vips.results[INTERNAL, 4] == found("192.0.2.10", "cidr")  # primary first


def test_detect_down_interface_is_rejected(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.add_veth("eth1", "eth1p", up=False)
    up.node.add_address("eth1", "203.0.113.10/24")
    report = detect(up.node, settings(cidrs="203.0.113.0/24"))
    assert isinstance(report.results[INTERNAL, 4], Failed)
    assert verdict(report, INTERNAL, "203.0.113.10/24").rejection == "interface down"


def _cni_node(netns: NetnsFactory) -> Namespace:
    up = netns.uplink(v6=None)
    for dev, cidr in (("cni0", "203.0.113.1/24"), ("cilium_host", "198.51.100.1/24"),
                      ("kube-ipvs0", "198.51.100.2/32"), ("flannel.1", "203.0.113.129/32"),
                      ("wg0", "203.0.113.200/32")):  # fmt: skip
        up.node.add_veth(dev, dev[:10] + "p")
        up.node.add_address(dev, cidr)
    return up.node


def test_detect_cni_like_devices_are_excluded_by_default(netns: NetnsFactory) -> None:
    node = _cni_node(netns)
    report = detect(node, settings(cidrs="0.0.0.0/0"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10", "cidr")
    reasons = {str(v.candidate.interface): v.rejection for v in report.verdicts[INTERNAL]}
    assert reasons == {
        "127.0.0.1/8": "interface matches lo",
        "192.0.2.10/24": None,
        "203.0.113.1/24": "interface matches cni*",
        "198.51.100.1/24": "interface matches cilium_*",
        "198.51.100.2/32": "interface matches kube-ipvs*",
        "203.0.113.129/32": "interface matches flannel*",
        "203.0.113.200/32": "interface matches wg*",
    }


def test_a13_detect_route_only_via_cilium_host(netns: NetnsFactory) -> None:
    node = _cni_node(netns)
    node.ip("route", "add", "198.51.100.128/25", "dev", "cilium_host")
    internal = settings("198.51.100.200")
    report = detect(node, internal)
    result = report.results[INTERNAL, 4]
    assert isinstance(result, Failed)
    assert result.reason == "no_eligible_address"
    assert "interface matches cilium_*" in result.detail
    relaxed = detect(node, internal, interface_exclude=("lo",))
    assert relaxed.results[INTERNAL, 4] == found("198.51.100.1", interface="cilium_host")


def test_a11_detect_cidr_selection_without_a_target(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.ip("addr", "add", "198.51.100.20/24", "dev", "eth0")
    report = detect(up.node, settings(cidrs="198.51.100.0/24"))
    assert report.results[INTERNAL, 4] == found("198.51.100.20", "cidr")


def test_a11_detect_excluded_route_source_uses_the_egress_interface(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.ip("addr", "add", "198.51.100.20/24", "dev", "eth0")
    report = detect(up.node, settings("192.0.2.1", "!192.0.2.0/24"))
    assert report.results[INTERNAL, 4] == found("198.51.100.20", "interface")


def test_detect_interface_list_selects_among_links(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.add_veth("eth1", "eth1p")
    up.node.add_address("eth1", "203.0.113.10/24")
    report = detect(up.node, settings(cidrs="0.0.0.0/0", interfaces="eth1"))
    assert report.results[INTERNAL, 4] == found("203.0.113.10", "cidr", "eth1")
    assert verdict(report, INTERNAL, "192.0.2.10/24").rejection == (
        "interface not in --internal-ip-interfaces"
    )


def test_detect_filters_apply_per_type(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.add_veth("eth1", "eth1p")
    up.node.add_address("eth1", "203.0.113.10/24")
    report = detect(
        up.node,
        settings(cidrs="203.0.113.0/24"),
        replace(settings(V4_TARGET), exclude=()),
    )
    assert report.results[INTERNAL, 4] == found("203.0.113.10", "cidr", "eth1")
    assert report.results[EXTERNAL, 4] == found("192.0.2.10")
