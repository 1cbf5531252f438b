"""The kube-vip-cloud-provider ConfigMap read as pools."""

from __future__ import annotations

from local_ccm.lbipam.core.kubevip import parse_kubevip
from local_ccm.lbipam.core.pools import Pool


def by_name(pools: tuple[Pool, ...]) -> dict[str, Pool]:
    return {p.name: p for p in pools}


def test_namespace_and_global_keys_become_pools() -> None:
    read = parse_kubevip(
        {
            "cidr-global": "10.0.0.0/30",
            "range-team": "10.0.1.10-10.0.1.12",
            "cidr-team": "10.0.2.0/31",
        }
    )
    pools = by_name(read.pools)
    assert read.problems == ()
    assert pools["kubevip-team"].capacity(4) == 5
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


def test_allow_share_search_order_and_skip_end_ips() -> None:
    read = parse_kubevip(
        {
            "cidr-global": "10.0.0.0/30",
            "allow-share-global": "true",
            "search-order": "desc",
            "skip-end-ips-in-cidr": "true",
        }
    )
    pool = read.pools[0]
    assert pool.allow_share
    assert pool.descending
    assert pool.capacity(4) == 2


def test_cidr_ends_are_kept_by_default_as_in_kube_vip() -> None:
    assert parse_kubevip({"cidr-global": "10.0.0.0/30"}).pools[0].capacity(4) == 4


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
    keys = sorted(p.split(":")[0] for p in read.problems)
    assert keys == [
        "allow-share-ghost",
        "allow-share-team",
        "cidr-global",
        "range-team",
        "range-team",
        "search-order",
        "skip-end-ips-in-cidr",
    ]
    assert [p.name for p in read.pools] == ["kubevip-global"]


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
    assert pools["kubevip-a"].allow_share
    assert not pools["kubevip-b"].allow_share
