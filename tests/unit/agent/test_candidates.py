"""Candidate hygiene, selection order and the route fallback chain."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address, ip_interface, ip_network

import pytest

from local_ccm.agent.core.candidates import (
    DISABLED,
    Candidate,
    Failed,
    Found,
    LookupFailed,
    RouteLookup,
    choose_address,
    evaluate_candidates,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AgentConfig, TypeSettings


def cand(cidr: str, ifname: str = "eth1", ifindex: int = 3, **kw: object) -> Candidate:
    return Candidate(ifname, ifindex, ip_interface(cidr), **kw)  # type: ignore[arg-type]


def internal(**kw: object) -> AgentConfig:
    settings = TypeSettings(**kw)  # type: ignore[arg-type]
    return AgentConfig(internal=settings, external=TypeSettings())


def route(target: str, src: str | None, oif: int = 3, kind: str = "unicast") -> RouteLookup:
    return RouteLookup(ip_address(target), kind, ip_address(src) if src else None, oif, "eth1")


def why(c: Candidate, config: AgentConfig, *others: Candidate) -> str | None:
    verdicts = evaluate_candidates(INTERNAL, config, [c, *others])
    return verdicts[0].rejection


# ------------------------------------------------------------------ hygiene rules, one per test
CIDR_ALL = internal(include=(ip_network("0.0.0.0/0"), ip_network("::/0")))


def test_rule1_down_link_and_down_operstates_are_rejected() -> None:
    assert why(cand("192.0.2.10/24", link_up=False), CIDR_ALL) == "interface down"
    for state in ("down", "lowerlayerdown", "notpresent"):
        assert why(cand("192.0.2.10/24", operstate=state), CIDR_ALL) == f"interface {state}"
    assert why(cand("192.0.2.10/24", operstate="unknown"), CIDR_ALL) is None


@pytest.mark.parametrize(
    ("ifname", "pattern"),
    [
        ("lo", "lo"), ("cilium_host", "cilium_*"), ("lxc12ab", "lxc*"), ("cni0", "cni*"),
        ("flannel.1", "flannel*"), ("cali123", "cali*"), ("vxlan.calico", "vxlan*"),
        ("tunl0", "tunl*"), ("kube-ipvs0", "kube-ipvs*"), ("kube-bridge", "kube-bridge"),
        ("docker0", "docker*"), ("wg0", "wg*"), ("tailscale0", "tailscale*"),
        ("ovn-k8s-mp0", "ovn-k8s-*"), ("genev_sys_6081", "genev_sys_*"), ("zt0", "zt*"),
    ],
)  # fmt: skip
def test_rule2_default_exclude_list_names_the_matching_pattern_a13(
    ifname: str, pattern: str
) -> None:
    assert why(cand("192.0.2.10/24", ifname), CIDR_ALL) == f"interface matches {pattern}"


def test_rule2_patterns_match_the_whole_name() -> None:
    assert why(cand("192.0.2.10/24", "myweave"), CIDR_ALL) is None
    assert why(cand("192.0.2.10/24", "weave"), CIDR_ALL) == "interface matches weave"


def test_rule2_exclusion_wins_over_the_type_interface_list() -> None:
    config = internal(include=(ip_network("0.0.0.0/0"),), interfaces=("cni*",))
    assert why(cand("192.0.2.10/24", "cni0"), config) == "interface matches cni*"


def test_rule2_type_interface_list_restricts_candidates() -> None:
    config = internal(include=(ip_network("0.0.0.0/0"),), interfaces=("eth1",))
    assert why(cand("192.0.2.10/24", "eth1"), config) is None
    rejected = why(cand("192.0.2.11/24", "eth2"), config)
    assert rejected == "interface not in --internal-ip-interfaces"


def test_rule2_custom_exclude_list_replaces_the_default_a13() -> None:
    config = replace(CIDR_ALL, interface_exclude=("lo",))
    assert why(cand("192.0.2.10/24", "cilium_host"), config) is None


@pytest.mark.parametrize(
    ("cidr", "scope", "reason"),
    [
        ("127.0.0.1/8", "host", "loopback"),
        ("::1/128", "host", "loopback"),
        ("169.254.3.4/16", "link", "link-local"),
        ("fe80::1/64", "link", "link-local"),
        ("::ffff:192.0.2.1/128", "global", "ipv4-mapped"),
        ("192.0.2.10/24", "site", "scope site"),
    ],
)
def test_rule3_only_global_scope_unicast_addresses(cidr: str, scope: str, reason: str) -> None:
    assert why(cand(cidr, scope=scope), CIDR_ALL) == reason


@pytest.mark.parametrize(
    "flag", ["tentative", "optimistic", "dadfailed", "deprecated", "temporary"]
)
def test_rule4_unstable_ipv6_addresses_are_rejected_a12(flag: str) -> None:
    assert why(cand("2001:db8::5/64", flags=frozenset({flag})), CIDR_ALL) == flag


def test_rule4_zero_preferred_lifetime_is_deprecated() -> None:
    assert why(cand("2001:db8::5/64", preferred_lft=0), CIDR_ALL) == "deprecated"
    assert why(cand("2001:db8::5/64", preferred_lft=30), CIDR_ALL) is None


def test_rule5_positive_cidrs_of_the_family_and_exclusions() -> None:
    config = internal(
        include=(ip_network("192.0.2.0/24"),), exclude=(ip_network("192.0.2.128/25"),)
    )
    assert why(cand("192.0.2.10/24"), config) is None
    assert why(cand("192.0.2.200/24"), config) == "excluded by !192.0.2.128/25"
    assert why(cand("198.51.100.1/24"), config) == "not in --internal-ip-cidrs"
    assert why(cand("2001:db8::1/64"), config) is None  # no positive IPv6 CIDR


def test_rule6_host_prefix_next_to_a_shorter_prefix_is_a_vip_a12() -> None:
    vip, base = cand("192.0.2.100/32"), cand("192.0.2.10/24")
    assert why(vip, CIDR_ALL, base) == "vip"
    assert why(cand("2001:db8::100/128"), CIDR_ALL, cand("2001:db8::10/64")) == "vip"
    assert why(vip, replace(CIDR_ALL, include_vips=True), base) is None


def test_rule6_sole_host_prefix_address_is_kept() -> None:
    assert why(cand("192.0.2.100/32"), CIDR_ALL) is None
    assert why(cand("192.0.2.100/32"), CIDR_ALL, cand("192.0.2.10/24", ifindex=4)) is None
    # the shorter sibling must itself be eligible
    sibling = cand("192.0.2.10/24", link_up=True, flags=frozenset(), scope="link")
    assert why(cand("192.0.2.100/32"), CIDR_ALL, sibling) is None


def test_rule6_ipv4_secondary_is_rejected_unless_include_vips() -> None:
    secondary = cand("192.0.2.11/24", flags=frozenset({"secondary"}))
    assert why(secondary, CIDR_ALL) == "vip (secondary address)"
    assert why(secondary, replace(CIDR_ALL, include_vips=True)) is None


# ------------------------------------------------------------------ selection order
def _pick(config: AgentConfig, *cands: Candidate) -> str:
    result = choose_address(INTERNAL, 4, config, None, cands)
    assert isinstance(result, Found), result
    return str(result.address)


def test_selection_prefers_earlier_cidr_then_interface_pattern() -> None:
    config = internal(
        include=(ip_network("198.51.100.0/24"), ip_network("192.0.2.0/24")),
        interfaces=("eth2", "eth*"),
    )
    assert _pick(config, cand("192.0.2.1/24", "eth2", 5), cand("198.51.100.9/24", "eth1", 3)) == (
        "198.51.100.9"
    )
    assert _pick(config, cand("192.0.2.1/24", "eth1", 3), cand("192.0.2.2/24", "eth2", 5)) == (
        "192.0.2.2"
    )


def test_selection_prefers_primary_then_lower_ifindex_then_lower_value() -> None:
    config = replace(internal(include=(ip_network("192.0.2.0/24"),)), include_vips=True)
    secondary = cand("192.0.2.1/24", "eth1", 2, flags=frozenset({"secondary"}))
    assert _pick(config, secondary, cand("192.0.2.9/24", "eth1", 2)) == "192.0.2.9"
    assert _pick(config, cand("192.0.2.1/24", "eth2", 5), cand("192.0.2.9/24", "eth1", 2)) == (
        "192.0.2.9"
    )
    assert _pick(config, cand("192.0.2.9/24"), cand("192.0.2.10/24")) == "192.0.2.9"


def test_selection_prefers_static_ipv6_over_dynamic() -> None:
    config = internal(include=(ip_network("2001:db8::/32"),))
    dynamic = cand("2001:db8::1/64", flags=frozenset())
    static = cand("2001:db8::9/64", flags=frozenset({"permanent"}))
    result = choose_address(INTERNAL, 6, config, None, [dynamic, static])
    assert result == Found(ip_address("2001:db8::9"), "cidr", "eth1")


def test_selection_is_independent_of_dump_order() -> None:
    config = internal(include=(ip_network("192.0.2.0/24"),))
    cands = [cand("192.0.2.30/24", ifindex=4), cand("192.0.2.20/24", ifindex=3)]
    assert _pick(config, *cands) == _pick(config, *reversed(cands)) == "192.0.2.20"


# ------------------------------------------------------------------ route fallback chain
TARGETED = internal(targets=(ip_address("192.0.2.1"),))


def test_disabled_detector_a07() -> None:
    assert choose_address(EXTERNAL, 4, TARGETED, None, []) is DISABLED
    assert choose_address(INTERNAL, 6, TARGETED, None, []) is DISABLED


def test_eligible_route_source_wins() -> None:
    result = choose_address(INTERNAL, 4, TARGETED, route("192.0.2.1", "192.0.2.10"), [
        cand("192.0.2.5/24"), cand("192.0.2.10/24"),
    ])  # fmt: skip
    assert result == Found(ip_address("192.0.2.10"), "route", "eth1")


def test_rejected_source_falls_back_to_best_address_on_the_egress_interface_a11() -> None:
    config = internal(targets=(ip_address("192.0.2.1"),), exclude=(ip_network("192.0.2.0/24"),))
    cands = [cand("192.0.2.10/24"), cand("198.51.100.20/24"), cand("198.51.100.30/24", "eth2", 4)]
    result = choose_address(INTERNAL, 4, config, route("192.0.2.1", "192.0.2.10"), cands)
    assert result == Found(ip_address("198.51.100.20"), "interface", "eth1")


def test_vip_source_falls_back_to_the_interface_address_a12() -> None:
    cands = [cand("192.0.2.10/24"), cand("192.0.2.100/32")]
    lookup = route("192.0.2.1", "192.0.2.100")
    assert choose_address(INTERNAL, 4, TARGETED, lookup, cands) == Found(
        ip_address("192.0.2.10"), "interface", "eth1"
    )
    with_vips = replace(TARGETED, include_vips=True)
    assert choose_address(INTERNAL, 4, with_vips, lookup, cands) == Found(
        ip_address("192.0.2.100"), "route", "eth1"
    )


def test_no_eligible_on_egress_interface_falls_back_to_cidr_selection() -> None:
    config = internal(targets=(ip_address("192.0.2.1"),), include=(ip_network("198.51.100.0/24"),))
    cands = [cand("192.0.2.10/24"), cand("198.51.100.20/24", "eth2", 4)]
    result = choose_address(INTERNAL, 4, config, route("192.0.2.1", "192.0.2.10"), cands)
    assert result == Found(ip_address("198.51.100.20"), "cidr", "eth2")


def test_no_eligible_address_names_the_rejection_a13() -> None:
    cands = [cand("192.0.2.10/24", "cilium_host")]
    result = choose_address(INTERNAL, 4, TARGETED, route("192.0.2.1", "192.0.2.10"), cands)
    assert isinstance(result, Failed)
    assert result.reason == "no_eligible_address"
    assert "interface matches cilium_*" in result.detail


def test_failed_lookup_is_reported_with_its_reason_a08() -> None:
    lookup = LookupFailed(ip_address("192.0.2.1"), "no_route", "no route to 192.0.2.1")
    assert choose_address(INTERNAL, 4, TARGETED, lookup, [cand("192.0.2.10/24")]) == Failed(
        "no_route", "no route to 192.0.2.1"
    )


def test_non_unicast_route_is_no_route() -> None:
    lookup = route("192.0.2.1", None, kind="broadcast")
    result = choose_address(INTERNAL, 4, TARGETED, lookup, [cand("192.0.2.10/24")])
    assert isinstance(result, Failed)
    assert result.reason == "no_route"


def test_local_route_to_own_address_uses_the_target_as_source() -> None:
    lookup = RouteLookup(ip_address("192.0.2.10"), "local", None, 1, "lo")
    config = internal(targets=(ip_address("192.0.2.10"),))
    result = choose_address(INTERNAL, 4, config, lookup, [cand("192.0.2.10/24")])
    assert result == Found(ip_address("192.0.2.10"), "route", "eth1")


def test_cidr_only_detector_without_candidates_fails_a09() -> None:
    config = internal(include=(ip_network("192.0.2.0/24"),))
    result = choose_address(INTERNAL, 4, config, None, [cand("198.51.100.1/24")])
    assert isinstance(result, Failed)
    assert result.reason == "no_eligible_address"


@pytest.mark.parametrize(
    "main",
    [cand("2001:db8::10/64", flags=frozenset({"tentative"})),
     cand("2001:db8::10/64", preferred_lft=0),  # deprecated
     cand("2001:db8::10/64", flags=frozenset({"temporary"}))],
)  # fmt: skip
def test_a_vip_stays_a_vip_while_its_interfaces_own_address_is_no_candidate(
    main: Candidate,
) -> None:
    """kube-vip's /128 beside an address that is tentative or deprecated is still a VIP: the
    route's source must not become the Node's address."""
    vip = cand("2001:db8::100/128")
    assert why(vip, CIDR_ALL, main) == "vip"
    config = internal(targets=(ip_address("2001:db8::1"),))
    lookup = RouteLookup(ip_address("2001:db8::1"), "unicast", vip.ip, 3, "eth1")
    result = choose_address(INTERNAL, 6, config, lookup, [main, vip])
    assert isinstance(result, Failed), result


def test_a_vip_beside_an_address_outside_the_cidrs_is_still_a_vip() -> None:
    config = internal(include=(ip_network("192.0.2.0/25"),))
    vip, main = cand("192.0.2.100/32"), cand("192.0.2.200/24")
    assert why(vip, config, main) == "vip"


def test_a_leased_host_prefix_address_is_no_vip() -> None:
    """A DHCPv6 address is a /128 with a lifetime; a VIP is added without one."""
    leased = cand("2001:db8::abcd/128", preferred_lft=3600)
    assert why(leased, CIDR_ALL, cand("2001:db8::5054:ff:fe12:3456/64")) is None


def test_no_route_to_the_target_falls_back_to_the_cidrs_as_a_refused_source_does() -> None:
    config = internal(targets=(ip_address("10.0.0.1"),), include=(ip_network("10.0.0.0/8"),))
    lookup = LookupFailed(ip_address("10.0.0.1"), "no_route", "no route to 10.0.0.1")
    result = choose_address(INTERNAL, 4, config, lookup, [cand("10.0.0.10/24")])
    assert result == Found(ip_address("10.0.0.10"), "cidr", "eth1")
