"""Projection of ClusterCIDR and Node dicts."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from local_ccm.ipam.core.model import (
    DEFAULT_POOL_NAME,
    FINALIZER,
    ClusterCIDR,
    InvalidClusterCIDR,
    PoolFamily,
    default_pool,
    project_cluster_cidr,
    project_node,
)
from tests.unit.ipam.builders import allocator, cc_obj, give, nets, node, one_term


def test_valid_cluster_cidr_is_projected_with_normalised_ranges() -> None:
    view = project_cluster_cidr(
        cc_obj("p", "10.244.3.7/16", "2001:db8:0:7::1/112", 8, one_term(a="1"), generation=1)
    )
    assert isinstance(view, ClusterCIDR)
    assert (str(view.ipv4), str(view.ipv6)) == ("10.244.0.0/16", "2001:db8:0:7::/112")
    assert view.has_finalizer
    assert not view.frozen
    assert view.selector is not None
    pool = view.pool()
    assert pool.families == (
        PoolFamily(nets("10.244.0.0/16")[0], 24),
        PoolFamily(nets("2001:db8:0:7::/112")[0], 120),
    )
    assert pool.capacity == 256


def test_metadata_state_is_read() -> None:
    view = project_cluster_cidr(
        cc_obj("p", "10.0.0.0/16", finalizer=False, deleting=True, generation=2)
    )
    assert isinstance(view, ClusterCIDR)
    assert (view.deleting, view.has_finalizer, view.frozen) == (True, False, True)


def _spec(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "bad", "uid": "u", "finalizers": [FINALIZER]}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"metadata": {"name": "bad"}}, "spec is missing"),
        (_spec(ipv4="10.0.0.0/16"), "perNodeHostBits is required"),
        (_spec(perNodeHostBits=8), "A CIDR must be specified for ipv4 or ipv6."),
        (_spec(perNodeHostBits=8, ipv4="", ipv6=""), "A CIDR must be specified"),
        (_spec(perNodeHostBits=8, ipv4="256.256.256.256/33"), "IPv4 must be a valid IPv4 CIDR."),
        (_spec(perNodeHostBits=8, ipv4="2001:db8::/64"), "IPv4 must be a valid IPv4 CIDR."),
        (_spec(perNodeHostBits=8, ipv4="10.0.0.0"), "IPv4 must be a valid IPv4 CIDR."),
        (_spec(perNodeHostBits=8, ipv4="10.0.0.0/255.255.0.0"), "IPv4 must be a valid"),
        (_spec(perNodeHostBits=8, ipv6="::/129"), "IPv6 must be a valid IPv6 CIDR."),
        (_spec(perNodeHostBits=8, ipv6="10.0.0.0/8"), "IPv6 must be a valid IPv6 CIDR."),
        (_spec(perNodeHostBits=10, ipv4="10.0.0.0/24"), "must not exceed the host bits of ipv4"),
        (_spec(perNodeHostBits=-1, ipv4="10.0.0.0/24"), "at least 0"),
        (_spec(perNodeHostBits=64, ipv6="fd00::/32"), "at most 65536 per-node blocks"),
        (_spec(perNodeHostBits=True, ipv4="10.0.0.0/24"), "must be an integer"),
        (_spec(perNodeHostBits=4, ipv6="::ffff:10.113.0.0/120"), "IPv4-mapped"),
        (_spec(perNodeHostBits=8, ipv6="::ffff:0:0/104"), "IPv4-mapped"),
        (
            _spec(
                perNodeHostBits=8,
                ipv4="10.0.0.0/16",
                nodeSelector={
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]
                },
            ),
            "values must be non-empty",
        ),
    ],
)
def test_unusable_cluster_cidrs_are_values_with_a_reason(obj: dict[str, Any], reason: str) -> None:
    view = project_cluster_cidr(obj)
    assert isinstance(view, InvalidClusterCIDR)
    assert reason in view.reason
    assert view.name == "bad"


def test_a_pool_over_the_ipv4_mapped_range_is_valid_when_no_block_address_is_mapped() -> None:
    """/64 blocks of ::/48: the block over ::ffff:0:0/96 is ::/64, an address the API server
    takes."""
    obj = _spec(perNodeHostBits=64, ipv6="::/48")
    obj["metadata"]["name"] = "ok"
    assert not isinstance(project_cluster_cidr(obj), InvalidClusterCIDR)


def test_i08_boundary_sizes_are_valid() -> None:
    ipv4 = project_cluster_cidr(_spec(perNodeHostBits=8, ipv4="10.0.0.0/24"))
    ipv6 = project_cluster_cidr(_spec(perNodeHostBits=64, ipv6="fd00::/48"))
    zero = project_cluster_cidr(_spec(perNodeHostBits=0, ipv4="192.0.2.0/24"))
    assert isinstance(ipv4, ClusterCIDR)
    assert isinstance(ipv6, ClusterCIDR)
    assert isinstance(zero, ClusterCIDR)
    assert zero.pool().capacity == 256


def test_node_with_pod_cidrs_is_projected_in_order() -> None:
    view = project_node(
        {
            "metadata": {
                "name": "n1",
                "uid": "u1",
                "labels": {"a": "1"},
                "creationTimestamp": "2024-01-01T00:00:00Z",
            },
            "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24", "2001:db8::/120"]},
        }
    )
    assert view.pod_cidrs == nets("10.0.0.0/24", "2001:db8::/120")
    assert view.has_cidrs
    assert view.labels_key == (("a", "1"),)


def test_old_node_with_only_pod_cidr_reads_as_one_element_list() -> None:
    view = project_node({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.5/24"}})
    assert view.pod_cidrs == nets("10.0.0.0/24")  # host bits cleared, as Go's ParseCIDR


def test_unparsable_pod_cidrs_are_kept_apart_and_still_count_as_set() -> None:
    view = project_node({"metadata": {"name": "n"}, "spec": {"podCIDRs": ["bogus", "10.1.0.0/16"]}})
    assert view.invalid_pod_cidrs == ("bogus",)
    assert view.pod_cidrs == nets("10.1.0.0/16")
    assert view.has_cidrs


def test_node_without_spec_or_metadata_does_not_crash() -> None:
    view = project_node({})
    assert (view.name, view.pod_cidrs, view.has_cidrs, view.deleting) == ("", (), False, False)


def test_pod_cidrs_field_managers_come_from_managed_fields() -> None:
    view = project_node(
        {
            "metadata": {
                "name": "foreign",
                "deletionTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [
                    {"manager": "kubelet", "fieldsV1": {"f:metadata": {}}},
                    {
                        "manager": "kube-controller-manager",
                        "fieldsV1": {"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}}}},
                    },
                    {"manager": "odd", "fieldsV1": "not-a-dict"},
                ],
            },
            "spec": {"podCIDRs": ["10.82.0.0/24"]},
        }
    )
    assert view.pod_cidrs_managers == ("kube-controller-manager",)
    assert view.deleting


def test_default_pool_keeps_per_family_block_sizes_and_ranks_as_default() -> None:
    pool = default_pool(nets("2001:db8:96::/112", "10.96.0.0/12"), 24, 120)
    assert pool.name == DEFAULT_POOL_NAME
    assert pool.is_default
    assert pool.selector is None
    assert [(str(f.network), f.block_prefix) for f in pool.families] == [
        ("10.96.0.0/12", 24),
        ("2001:db8:96::/112", 120),
    ]
    assert pool.capacity == 256


def test_default_pool_refuses_zero_blocks_and_the_ipv6_limit() -> None:
    with pytest.raises(ValueError, match="65536"):
        default_pool([ipaddress.ip_network("2001:db8::/32")], 24, 64)
    with pytest.raises(ValueError, match="host bits"):
        default_pool([ipaddress.ip_network("10.0.0.0/24")], 16, 64)
    with pytest.raises(ValueError, match="empty"):
        default_pool([], 24, 64)


@pytest.mark.parametrize(
    ("text", "read"),
    [("010.000.001.000/24", "10.0.1.0/24"), ("10.0.1.000/24", "10.0.1.0/24"),
     ("10.0.0.0/08", "10.0.0.0/8"), ("fd00::/0120", "fd00::/120"), ("0010.0.0.0/8", "10.0.0.0/8"),
     ("100.0.0.0/8", "100.0.0.0/8")],
)  # fmt: skip
def test_leading_zeros_read_as_kubernetes_sloppy_parser_reads_them(text: str, read: str) -> None:
    """A podCIDR the API server stored with leading zeros (ParseCIDRSloppy reads them as
    decimal) is that block: not reserving it gave it to a second Node."""
    view = project_node({"metadata": {"name": "n"}, "spec": {"podCIDRs": [text]}})
    assert view.pod_cidrs == nets(read)
    assert view.invalid_pod_cidrs == ()


def test_a_block_written_with_leading_zeros_is_never_given_again() -> None:
    alloc = allocator()
    alloc.set_pool(default_pool(nets("10.0.0.0/16"), 24, 64), ready=True)
    held = project_node({"metadata": {"name": "old", "uid": "u-old"},
                         "spec": {"podCIDRs": ["010.000.001.000/24"]}})  # fmt: skip
    alloc.recover([held])
    given = [give(alloc, node(f"new{i}")) for i in range(3)]
    assert given == [("10.0.0.0/24",), ("10.0.2.0/24",), ("10.0.3.0/24",)]
