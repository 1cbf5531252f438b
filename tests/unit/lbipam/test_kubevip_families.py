"""kube-vip-cloud-provider's `Test_discoverVIPs` (pkg/provider/loadBalancer_test.go), ported
case by case: one `range-global` value holding both families serves single- and dual-stack
Services as kube-vip-cloud-provider does.

Left out: the cases with no `ipFamilies` (the API server always fills `spec.ipFamilies`, so a
Service never reaches an allocator without them) and the cases with a precomputed
`preferredIpv4ServiceIP` (upstream's sharing shortcut; sharing is tested in test_kubevip.py).
"""

from __future__ import annotations

import pytest

from local_ccm.lbipam.core.kubevip import parse_kubevip
from tests.unit.lbipam.test_kubevip_upstream import find

V4_POOL = "10.10.10.8-10.10.10.15"
V6_POOL = "fd00::1-fd00::10"
DUAL = "10.10.10.8-10.10.10.15,fd00::1-fd00::10"
SMALL = "10.10.10.8-10.10.10.9,fd00::1-fd00::2"
V4_USED = ["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"]
V6_USED = ["fd00::1", "fd00::2", "fd00::4"]
FOUR, SIX = ["IPv4"], ["IPv6"]
FOUR_SIX, SIX_FOUR = ["IPv4", "IPv6"], ["IPv6", "IPv4"]
PREFER, REQUIRE, SINGLE = "PreferDualStack", "RequireDualStack", "SingleStack"

DISCOVER_VIPS = [
    ("IPv4 pool with IPv4 service", SINGLE, FOUR, V4_POOL, V4_USED, "10.10.10.11"),
    ("IPv6 pool with IPv6 service", SINGLE, SIX, V6_POOL, V6_USED, "fd00::3"),
    ("IPv6 pool with IPv4 service", SINGLE, FOUR, V6_POOL, [], "FamilyUnavailable"),
    ("IPv4 pool with IPv6 service", SINGLE, SIX, V4_POOL, [], "FamilyUnavailable"),
    ("IPv4 pool with PreferDualStack service", PREFER, FOUR_SIX, V4_POOL, V4_USED, "10.10.10.11"),
    ("IPv6 pool with PreferDualStack service", PREFER, FOUR_SIX, V6_POOL, V6_USED, "fd00::3"),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service", PREFER, FOUR_SIX, DUAL, [],
     "10.10.10.8,fd00::1"),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service", PREFER, SIX_FOUR, DUAL, [],
     "fd00::1,10.10.10.8"),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but the IPv6 pool has no "
     "available addresses", PREFER, FOUR_SIX, SMALL, ["fd00::1", "fd00::2"], "10.10.10.8"),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but the IPv4 pool has no "
     "available addresses", PREFER, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9"], "fd00::1"),
    # the next two are named IPv6,IPv4 upstream but list IPv4, IPv6: ported as written
    ("dualstack pool with PreferDualStack IPv6,IPv4 service, but the IPv6 pool has no "
     "available addresses", PREFER, FOUR_SIX, SMALL, ["fd00::1", "fd00::2"], "10.10.10.8"),
    ("dualstack pool with PreferDualStack IPv6,IPv4 service, but the IPv4 pool has no "
     "available addresses", PREFER, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9"], "fd00::1"),
    ("dualstack pool with PreferDualStack IPv4,IPv6 service, but no pools have available "
     "addresses", PREFER, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9", "fd00::1", "fd00::2"],
     "PoolExhausted"),
    ("IPv4 pool with RequireDualStack service", REQUIRE, FOUR_SIX, V4_POOL, [],
     "FamilyUnavailable"),
    ("IPv6 pool with RequireDualStack service", REQUIRE, FOUR_SIX, V6_POOL, [],
     "FamilyUnavailable"),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service", REQUIRE, FOUR_SIX, DUAL, [],
     "10.10.10.8,fd00::1"),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service", REQUIRE, SIX_FOUR, DUAL, [],
     "fd00::1,10.10.10.8"),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but the IPv6 pool has no "
     "available addresses", REQUIRE, FOUR_SIX, SMALL, ["fd00::1", "fd00::2"], "PoolExhausted"),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but the IPv4 pool has no "
     "available addresses", REQUIRE, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9"],
     "PoolExhausted"),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service, but the IPv6 pool has no "
     "available addresses", REQUIRE, FOUR_SIX, SMALL, ["fd00::1", "fd00::2"], "PoolExhausted"),
    ("dualstack pool with RequireDualStack IPv6,IPv4 service, but the IPv4 pool has no "
     "available addresses", REQUIRE, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9"],
     "PoolExhausted"),
    ("dualstack pool with RequireDualStack IPv4,IPv6 service, but no pools have available "
     "addresses", REQUIRE, FOUR_SIX, SMALL, ["10.10.10.8", "10.10.10.9", "fd00::1", "fd00::2"],
     "PoolExhausted"),
]  # fmt: skip


@pytest.mark.parametrize("case", DISCOVER_VIPS, ids=lambda case: str(case[0]))
def test_discover_vips(case: tuple[str, str, list[str], str, list[str], str]) -> None:
    name, policy, families, value, existing, want = case
    got = find({"range-global": value}, existing, families=families, policy=policy)
    assert got == want, name


def test_discover_vips_dual_stack_cidr_value() -> None:
    # A `cidr-` value with both families (upstream's SplitCIDRsByIPFamily path).
    data = {"cidr-global": "10.10.10.8/29,fd00::/125"}
    assert find(data, families=FOUR_SIX, policy=REQUIRE) == "10.10.10.8,fd00::"


def test_discover_vips_invalid_entry_is_listed_and_the_rest_serves() -> None:
    # Upstream "dualstack pool with PreferDualStack IPv4,IPv6 service, but there is an invalid
    # pool": kube-vip-cloud-provider fails the whole value. Deliberate difference (see
    # docs/loadbalancer.md): the bad entry is listed as a problem, the others still serve.
    data = {"range-global": SMALL + ",invalid-pool"}
    assert [p.split(":")[0] for p in parse_kubevip(data).problems] == ["range-global"]
    assert find(data, families=FOUR_SIX, policy=PREFER) == "10.10.10.8,fd00::1"
