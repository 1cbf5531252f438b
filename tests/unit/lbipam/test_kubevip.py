"""The kube-vip-cloud-provider ConfigMap read as pools, key by key as kube-vip-cloud-provider
reads it (kube-vip/kube-vip-cloud-provider pkg/provider/loadBalancer.go `discoverPool`,
`discoverVIPs`, `mapImplementedServices`; pkg/config/config.go; pkg/ipam). Its own test tables
are ported in test_kubevip_upstream.py and test_kubevip_families.py."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from local_ccm.lbipam.core.allocator import Allocation, decide, hold
from local_ccm.lbipam.core.kubevip import parse_kubevip
from local_ccm.lbipam.core.ledger import Ledger
from local_ccm.lbipam.core.pools import Pool
from local_ccm.lbipam.core.service import ServiceRequest
from tests.unit.lbipam.test_kubevip_upstream import find, hosts


def by_name(pools: tuple[Pool, ...]) -> dict[str, Pool]:
    return {p.name: p for p in pools}


def keys(problems: tuple[str, ...]) -> list[str]:
    return sorted(p.split(":")[0] for p in problems)


def serving(data: dict[str, str], namespace: str) -> str | None:
    """The name of the pool that serves `namespace`, None when none does."""
    found = [p.name for p in parse_kubevip(data).pools if p.selects({}, namespace, {})]
    assert len(found) <= 1
    return found[0] if found else None


def test_namespace_and_global_keys_become_pools() -> None:
    read = parse_kubevip({"range-global": "10.0.0.4-10.0.0.7", "range-team": "10.0.1.10-10.0.1.12"})
    pools = by_name(read.pools)
    assert read.problems == ()
    assert pools["kubevip-team"].capacity(4) == 3
    assert pools["kubevip-global"].capacity(4) == 4


def test_namespace_pool_serves_only_its_namespace_and_hides_global() -> None:
    pools = by_name(parse_kubevip({"cidr-global": "10.0.0.0/30", "cidr-team": "10.0.1.0/30"}).pools)
    assert pools["kubevip-team"].selects({}, "team", {})
    assert not pools["kubevip-team"].selects({}, "other", {})
    assert not pools["kubevip-global"].selects({}, "team", {})
    assert pools["kubevip-global"].selects({}, "other", {})


def test_namespace_pool_comes_before_global_at_equal_priority() -> None:
    pools = parse_kubevip({"cidr-global": "10.0.0.0/30", "cidr-zz": "10.0.1.0/30"}).pools
    assert sorted(pools, key=Pool.order_key)[0].name == "kubevip-zz"


# ---------------------------------------------------------------- which key serves a namespace


def test_key_order_is_cidr_namespace_cidr_global_range_namespace_range_global() -> None:
    # discoverPool: getConfig("cidr") tries cidr-<ns> then cidr-global, only then "range".
    data = {"cidr-a": "10.0.1.0/30", "range-a": "10.0.2.1-10.0.2.2", "range-b": "10.0.3.1-10.0.3.2",
            "cidr-global": "10.0.4.0/30", "range-global": "10.0.5.1-10.0.5.2"}  # fmt: skip
    assert serving(data, "a") == "kubevip-a"
    assert serving(data, "b") == "kubevip-global"  # cidr-global wins over range-b
    assert serving(data, "c") == "kubevip-global"
    assert hosts(by_name(parse_kubevip(data).pools)["kubevip-global"]) == [
        "10.0.4.1", "10.0.4.2", "10.0.4.3"]  # fmt: skip
    assert keys(parse_kubevip(data).problems) == ["range-a", "range-b", "range-global"]


def test_range_keys_serve_when_there_is_no_cidr_key() -> None:
    data = {"range-b": "10.0.3.1-10.0.3.2", "range-global": "10.0.5.1-10.0.5.2"}
    assert (serving(data, "b"), serving(data, "c")) == ("kubevip-b", "kubevip-global")
    assert parse_kubevip(data).problems == ()


def test_a_namespace_with_a_key_never_falls_back_even_when_its_value_is_unusable() -> None:
    for value in ("", "0.0.0.0/32", "nonsense"):
        read = parse_kubevip({"cidr-team": value, "cidr-global": "10.0.0.4/30"})
        assert serving({"cidr-team": value, "cidr-global": "10.0.0.4/30"}, "team") is None
        assert keys(read.problems) == ["cidr-team"], value
    dhcp = parse_kubevip({"cidr-global": "0.0.0.0/32"})
    assert "DHCP" in dhcp.problems[0]


# ---------------------------------------------------------------- how a value is read


def test_the_value_decides_cidr_or_range_not_the_key() -> None:
    # discoverVIPs: a value with a "/" is a list of CIDRs, any other a list of ranges.
    assert hosts(parse_kubevip({"cidr-global": "10.0.0.5-10.0.0.6"}).pools[0]) == [
        "10.0.0.5", "10.0.0.6"]  # fmt: skip
    assert hosts(parse_kubevip({"range-global": "10.0.0.4/31"}).pools[0]) == [
        "10.0.0.4", "10.0.0.5"]  # fmt: skip


def test_a_value_mixing_cidrs_and_ranges_lists_the_odd_entries() -> None:
    read = parse_kubevip({"cidr-global": "10.0.0.4/31,10.0.0.9-10.0.0.9"})
    assert keys(read.problems) == ["cidr-global"]
    assert "not a CIDR" in read.problems[0]
    assert hosts(read.pools[0]) == ["10.0.0.4", "10.0.0.5"]
    single = parse_kubevip({"range-global": "10.0.0.9"})
    assert keys(single.problems) == ["range-global"]


def test_ipv4_mapped_ipv6_values_are_problems_not_pools() -> None:
    """The API server refuses them in a Service's status: every write would fail."""
    for value in ("::ffff:10.0.0.0/120", "::ffff:10.0.0.1-::ffff:10.0.0.9"):
        key = "cidr-global" if "/" in value else "range-global"
        read = parse_kubevip({key: value})
        assert keys(read.problems) == [key], value
        assert "IPv4-mapped" in read.problems[0]


def test_host_bits_are_masked_as_kube_vips_readme_writes_them() -> None:
    # kube-vip's README: `cidr-global: 192.168.0.210/29`.
    assert hosts(parse_kubevip({"cidr-global": "192.168.0.210/29"}).pools[0]) == [
        f"192.168.0.{n}" for n in range(208, 216)]  # fmt: skip
    assert parse_kubevip({"cidr-global": "192.168.0.10/24"}).pools[0].capacity(4) == 254


def test_ipv4_dot_zero_and_dot_255_are_never_given_even_inside_ranges() -> None:
    assert hosts(parse_kubevip({"cidr-global": "10.0.0.0/30"}).pools[0]) == [
        "10.0.0.1", "10.0.0.2", "10.0.0.3"]  # fmt: skip
    assert hosts(parse_kubevip({"range-global": "10.0.0.254-10.0.1.1"}).pools[0]) == [
        "10.0.0.254", "10.0.1.1"]  # fmt: skip
    assert hosts(parse_kubevip({"range-global": "fd00::ff-fd00::100"}).pools[0]) == [
        "fd00::ff", "fd00::100"]  # fmt: skip


def test_skip_end_ips_trims_the_merged_prefixes_not_each_entry() -> None:
    # buildHostsFromCidr trims the prefixes of the merged IPSet: two /25s are one /24.
    data = {"cidr-global": "10.0.0.0/25,10.0.0.128/25", "skip-end-ips-in-cidr": "true"}
    assert parse_kubevip(data).pools[0].capacity(4) == 254
    split = {"cidr-global": "10.0.0.4/30,10.0.0.8/29", "skip-end-ips-in-cidr": "true"}
    assert hosts(parse_kubevip(split).pools[0]) == [
        "10.0.0.5", "10.0.0.6", "10.0.0.9", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13",
        "10.0.0.14"]  # fmt: skip


def test_skip_end_ips_leaves_ipv6_and_ranges_alone() -> None:
    data = {"cidr-global": "fd00::/126", "skip-end-ips-in-cidr": "true"}
    assert parse_kubevip(data).pools[0].capacity(6) == 4
    ranges = {"range-global": "10.0.0.4-10.0.0.7", "skip-end-ips-in-cidr": "true"}
    assert parse_kubevip(ranges).pools[0].capacity(4) == 4


@pytest.mark.parametrize(("value", "skips", "listed"),
                         [("true", True, False), ("false", False, False), ("True", False, True),
                          ("1", False, True), (" true", False, True)])  # fmt: skip
def test_skip_end_ips_is_on_only_for_the_exact_value_true(
    value: str, skips: bool, listed: bool
) -> None:
    read = parse_kubevip({"cidr-global": "10.0.0.4/30", "skip-end-ips-in-cidr": value})
    assert read.pools[0].capacity(4) == (2 if skips else 4)
    assert keys(read.problems) == (["skip-end-ips-in-cidr"] if listed else [])


@pytest.mark.parametrize(("value", "descending", "listed"),
                         [("desc", True, False), ("asc", False, False), ("DESC", False, True),
                          ("random", False, True)])  # fmt: skip
def test_search_order_is_descending_only_for_the_exact_value_desc(
    value: str, descending: bool, listed: bool
) -> None:
    read = parse_kubevip({"cidr-global": "10.0.0.4/30", "search-order": value})
    assert read.pools[0].descending == descending
    assert keys(read.problems) == (["search-order"] if listed else [])


def test_spaces_and_empty_entries_are_tolerated() -> None:
    # Deliberate difference: kube-vip-cloud-provider fails on " 10.0.0.8/30" and on a trailing
    # comma; they are read here (docs/loadbalancer.md).
    read = parse_kubevip({"cidr-global": " 10.0.0.4/31, 10.0.0.8/31,\n"})
    assert read.problems == ()
    assert read.pools[0].capacity(4) == 4


def test_unknown_keys_are_ignored() -> None:
    read = parse_kubevip({"interface-global": "eth0", "cidr-global": "10.0.0.0/30"})
    assert read.problems == ()
    assert len(read.pools) == 1


def test_bad_values_are_listed_by_key() -> None:
    read = parse_kubevip(
        {
            "cidr-global": "10.0.0.0/30, 10.0.0.300/24",
            "range-team": "10.0.0.5-10.0.0.1,10.0.0.0/24",
            "allow-share-team": "maybe",
            "allow-share-ghost": "often",
            "search-order": "random",
            "skip-end-ips-in-cidr": "1",
        }
    )
    assert keys(read.problems) == [
        "allow-share-ghost",
        "allow-share-team",
        "cidr-global",
        "range-team",  # ignored: cidr-global serves team
        "search-order",
        "skip-end-ips-in-cidr",
    ]
    assert [p.name for p in read.pools] == ["kubevip-global"]


# ---------------------------------------------------------------- allow-share


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_allow_share_reads_go_booleans_true(value: str) -> None:
    read = parse_kubevip({"cidr-global": "10.0.0.4/30", "allow-share-global": value})
    assert read.problems == ()
    assert read.pools[0].shares("any", 4)


@pytest.mark.parametrize(("value", "listed"),
                         [("0", False), ("f", False), ("FALSE", False), ("False", False),
                          ("yes", True), ("", True)])  # fmt: skip
def test_allow_share_anything_else_is_false(value: str, listed: bool) -> None:
    read = parse_kubevip({"cidr-global": "10.0.0.4/30", "allow-share-global": value})
    assert not read.pools[0].shares("any", 4)
    assert keys(read.problems) == (["allow-share-global"] if listed else [])


def test_namespace_pool_takes_allow_share_global_when_it_has_none() -> None:
    pools = by_name(
        parse_kubevip(
            {
                "cidr-a": "10.0.0.0/30",
                "cidr-b": "10.0.1.0/30",
                "allow-share-b": "false",
                "allow-share-global": "true",
            }
        ).pools
    )
    assert pools["kubevip-a"].shares("a", 4)
    assert not pools["kubevip-b"].shares("b", 4)


def req(namespace: str, name: str, port: int, **kwargs: Any) -> ServiceRequest:
    return ServiceRequest(key=f"{namespace}/{name}", namespace=namespace,
                          ports=frozenset({("TCP", port)}), **kwargs)  # fmt: skip


def give(ledger: Ledger, request: ServiceRequest, pools: tuple[Pool, ...]) -> list[str]:
    decision = decide(request, pools, ledger, {})
    assert isinstance(decision, Allocation), decision
    hold(ledger, decision)
    return [str(a) for a in decision.addresses]


def test_allow_share_shares_ipv4_only() -> None:
    # mapImplementedServices records ports for IPv4 addresses only; an IPv6 one never shares.
    pools = parse_kubevip({"cidr-global": "10.0.0.4/30,fd00::/126",
                           "allow-share-global": "true"}).pools  # fmt: skip
    ledger = Ledger()
    dual = {"families": (4, 6), "family_policy": "RequireDualStack"}
    assert give(ledger, req("ns", "web", 80, **dual), pools) == ["10.0.0.4", "fd00::"]
    assert give(ledger, req("ns", "tls", 443, **dual), pools) == ["10.0.0.4", "fd00::1"]


def test_allow_share_compares_port_numbers_whatever_the_protocol() -> None:
    # servicePortMap holds port numbers: TCP 53 and UDP 53 do not share.
    pools = parse_kubevip({"cidr-global": "10.0.0.4/30", "allow-share-global": "true"}).pools
    ledger = Ledger()
    assert give(ledger, req("ns", "tcp", 53), pools) == ["10.0.0.4"]
    udp = ServiceRequest(key="ns/udp", namespace="ns", ports=frozenset({("UDP", 53)}))
    assert give(ledger, udp, pools) == ["10.0.0.5"]


def test_allow_share_of_a_namespace_that_takes_from_the_global_pool() -> None:
    # discoverPool reads allow-share-<ns> whichever pool the namespace takes from.
    pools = parse_kubevip({"cidr-global": "10.0.0.4/30", "allow-share-team": "true"}).pools
    ledger = Ledger()
    assert give(ledger, req("team", "a", 80), pools) == ["10.0.0.4"]
    assert give(ledger, req("team", "b", 443), pools) == ["10.0.0.4"]
    assert give(ledger, req("other", "c", 8080), pools) == ["10.0.0.5"]
    assert parse_kubevip({"cidr-global": "10.0.0.4/30", "allow-share-team": "true"}).problems == ()


def test_a_namespace_may_refuse_the_sharing_the_global_pool_allows() -> None:
    data = {"cidr-global": "10.0.0.4/30", "allow-share-global": "true", "allow-share-solo": "no"}
    (pool,) = parse_kubevip(data).pools
    assert pool.shares("other", 4)
    assert not pool.shares("solo", 4)


def test_find_uses_what_kube_vip_gives_first() -> None:
    # The README's example pool, first Service: the network address is skipped.
    assert find({"cidr-global": "192.168.0.10/24"}) == "192.168.0.1"
    assert ipaddress.ip_address(find({"cidr-global": "192.168.0.10/24",
                                      "search-order": "desc"})).packed[3] == 254  # fmt: skip
