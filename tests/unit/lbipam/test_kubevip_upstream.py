"""kube-vip-cloud-provider's own test tables, ported case by case: the ConfigMap read here must
give the addresses kube-vip-cloud-provider gives.

Each table names the upstream test it comes from (kube-vip/kube-vip-cloud-provider,
pkg/ipam/ipam_test.go and pkg/provider/loadBalancer_test.go). Upstream tests its internal
functions one by one; here every case goes through the ConfigMap (`parse_kubevip`) and the
allocator (`decide`), so a case checks what a Service gets. Upstream's address sets are built
before `FindFreeAddress` skips IPv4 .0 and .255 addresses; where a set holds such an address the
expected list here leaves it out, with a comment.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from local_ccm.lbipam.core.allocator import Allocation, decide
from local_ccm.lbipam.core.kubevip import parse_kubevip
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.pools import Pool, to_address
from local_ccm.lbipam.core.service import ServiceRequest

V4, V6 = ("IPv4",), ("IPv6",)
FAMILY = {"IPv4": 4, "IPv6": 6}


def hosts(pool: Pool) -> list[str]:
    """Every address the pool can hand out (small pools only)."""
    found = (to_address(r.version, v) for r in pool.ranges for v in range(r.first, r.last + 1))
    return [str(a) for a in found if pool.contains(a)]


def global_hosts(data: dict[str, str]) -> list[str]:
    read = parse_kubevip(data)
    assert read.problems == ()
    (pool,) = read.pools
    return hosts(pool)


def find(
    data: dict[str, str],
    existing: Sequence[str] = (),
    *,
    namespace: str = "default",
    families: Sequence[str] = V4,
    policy: str = "SingleStack",
) -> str:
    """The addresses a new Service of `namespace` gets ("a,b"), or the reason it gets none;
    `existing` addresses are held by other Services."""
    ledger = Ledger()
    for index, text in enumerate(existing):
        ledger.hold([(ipaddress.ip_address(text), Holder(f"other/{index}", None, frozenset()))])
    versions = tuple(FAMILY[f] for f in families)
    request = ServiceRequest(key=f"{namespace}/new", namespace=namespace, families=versions,
                             family_policy=policy)  # fmt: skip
    decision = decide(request, parse_kubevip(data).pools, ledger, {})
    if isinstance(decision, Allocation):
        return ",".join(str(a) for a in decision.addresses)
    return decision.reason


# ------------------------------------------------------- pkg/ipam: Test_buildHostsFromRange

BUILD_HOSTS_FROM_RANGE = [
    ("single address", "192.168.0.10-192.168.0.10", ["192.168.0.10"]),
    ("single range, three addresses", "192.168.0.10-192.168.0.12",
     ["192.168.0.10", "192.168.0.11", "192.168.0.12"]),
    # upstream's set also holds 192.168.0.255 and 192.168.1.0; FindFreeAddress never gives them
    ("single range, across third octet", "192.168.0.253-192.168.1.2",
     ["192.168.0.253", "192.168.0.254", "192.168.1.1", "192.168.1.2"]),
    ("two ranges, four addresses", "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.21",
     ["192.168.0.10", "192.168.0.11", "192.168.1.20", "192.168.1.21"]),
    ("two ranges, four addresses w/overlap", "192.168.0.10-192.168.0.11,192.168.0.10-192.168.0.13",
     ["192.168.0.10", "192.168.0.11", "192.168.0.12", "192.168.0.13"]),
    ("ipv6, two ips", "fe80::13-fe80::14", ["fe80::13", "fe80::14"]),
    ("ipv6, single range, across third octet", "fe80::ffff-fe80::1:3",
     ["fe80::ffff", "fe80::1:0", "fe80::1:1", "fe80::1:2", "fe80::1:3"]),
    ("ipv6, two ranges, 5 addresses", "fe80::10-fe80::12,fe81::13-fe81::14",
     ["fe80::10", "fe80::11", "fe80::12", "fe81::13", "fe81::14"]),
    ("ipv6, two ranges, 5 addresses w/overlap", "fe80::10-fe80::12,fe80::10-fe80::14",
     ["fe80::10", "fe80::11", "fe80::12", "fe80::13", "fe80::14"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "want"), BUILD_HOSTS_FROM_RANGE)
def test_build_hosts_from_range(name: str, value: str, want: list[str]) -> None:
    assert global_hosts({"range-global": value}) == want, name


# -------------------------------------------------------- pkg/ipam: Test_buildHostsFromCidr

BUILD_HOSTS_FROM_CIDR = [
    ("single entry, /32, 1 address", "192.168.0.200/32", False, ["192.168.0.200"]),
    ("single entry, /32, 1 address, if skipEndIPsInCIDR is set", "192.168.0.200/32", True,
     ["192.168.0.200"]),
    ("single entry, 4 address", "192.168.0.200/30", False,
     ["192.168.0.200", "192.168.0.201", "192.168.0.202", "192.168.0.203"]),
    ("single entry, 2 address, if skipEndIPsInCIDR is set", "192.168.0.200/30", True,
     ["192.168.0.201", "192.168.0.202"]),
    ("single entry, /31, 2 address, if skipEndIPsInCIDR is set", "192.168.0.200/31", True,
     ["192.168.0.200", "192.168.0.201"]),
    ("dual entry, overlap address, return 8 addresses", "192.168.0.200/30,192.168.0.200/29",
     False, [f"192.168.0.{n}" for n in range(200, 208)]),
    ("dual entry, overlap addressm return 6 addresses, if skipEndIPsInCIDR is set",
     "192.168.0.200/30,192.168.0.200/29", True, [f"192.168.0.{n}" for n in range(201, 207)]),
    ("ipv6, two ips", "fe80::10/127", False, ["fe80::10", "fe80::11"]),
    ("ipv6, two cidrs", "fe80::10/127,fe80::fe/127", False,
     ["fe80::10", "fe80::11", "fe80::fe", "fe80::ff"]),
    ("ipv6, two cidrs with overlap", "fe80::10/126,fe80::12/127", False,
     ["fe80::10", "fe80::11", "fe80::12", "fe80::13"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "skip", "want"), BUILD_HOSTS_FROM_CIDR)
def test_build_hosts_from_cidr(name: str, value: str, skip: bool, want: list[str]) -> None:
    data = {"cidr-global": value, **({"skip-end-ips-in-cidr": "true"} if skip else {})}
    assert global_hosts(data) == want, name


# ---------------------------------- pkg/ipam: TestSplitCIDRsByIPFamily, TestSplitRangesByIPFamily

SPLIT_BY_FAMILY = [
    ("single ipv4 cidr", "192.168.0.200/30", 4, 0),
    ("multiple ipv4 cidrs", "192.168.0.200/30,192.168.1.200/30", 8, 0),
    ("single ipv6 cidr", "fe80::10/127", 0, 2),
    ("multiple ipv6 cidrs", "fe80::10/127,fe80::fe/127", 0, 4),
    ("one ipv4 cidr and one ipv6 cidr", "192.168.0.200/30,fe80::10/127", 4, 2),
    ("multiple ipv4 cidrs and multiple ipv6 cidrs",
     "192.168.0.200/30,192.168.1.200/30,fe80::10/127,fe80::fe/127", 8, 4),
    ("single ipv4 range", "192.168.0.10-192.168.0.12", 3, 0),
    ("multiple ipv4 ranges", "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120", 24, 0),
    ("single ipv6 range", "fe80::13-fe80::14", 0, 2),
    ("multiple ipv6 ranges", "fe80::13-fe80::14,fe80::130-fe80::140", 0, 19),
    ("one ipv4 range and one ipv6 range", "192.168.0.10-192.168.0.12,fe80::13-fe80::14", 3, 2),
    ("multiple ipv4 ranges and multiple ipv6 ranges",
     "192.168.0.10-192.168.0.12,192.168.0.100-192.168.0.120,fe80::13-fe80::14,fe80::130-fe80::140",
     24, 19),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "ipv4", "ipv6"), SPLIT_BY_FAMILY)
def test_split_by_ip_family(name: str, value: str, ipv4: int, ipv6: int) -> None:
    key = "cidr-global" if "/" in value else "range-global"
    (pool,) = parse_kubevip({key: value}).pools
    assert (pool.capacity(4), pool.capacity(6)) == (ipv4, ipv6), name


# ------------------------------------------------ pkg/ipam: TestFindAvailableHostFromRange

FIND_FROM_RANGE = [
    ("simple range", "192.168.0.10-192.168.0.10", [], False, "192.168.0.10"),
    ("simple range, reverse order", "192.168.0.10-192.168.0.10", [], True, "192.168.0.10"),
    ("single range, three addresses", "192.168.0.10-192.168.0.12", [], False, "192.168.0.10"),
    ("single range, three addresses, reverse order", "192.168.0.10-192.168.0.12", [], True,
     "192.168.0.12"),
    ("single range, across third octet", "192.168.0.253-192.168.1.2",
     ["192.168.0.253", "192.168.0.254"], False, "192.168.1.1"),
    ("single range, across third octet, reverse order", "192.168.0.253-192.168.1.2",
     ["192.168.1.1", "192.168.1.2"], True, "192.168.0.254"),
    ("two ranges, four addresses", "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.21",
     ["192.168.0.9", "192.168.0.10"], False, "192.168.0.11"),
    ("two ranges, four addresses, reverse order",
     "192.168.0.10-192.168.0.11,192.168.1.20-192.168.1.22", ["192.168.1.21", "192.168.1.22"],
     True, "192.168.1.20"),
    ("ipv6, simple range", "fe80::13-fe80::14", [], False, "fe80::13"),
    ("ipv6, simple range, reverse order", "fe80::13-fe80::14", [], True, "fe80::14"),
    ("ipv6, single range, three addresses", "fe80::13-fe80::15", [], False, "fe80::13"),
    ("ipv6, single range, three addresses, reverse order", "fe80::13-fe80::15", [], True,
     "fe80::15"),
    ("ipv6, single range, across third octet", "fe80::ffff-fe80::1:3", ["fe80::ffff"], False,
     "fe80::1:0"),
    ("ipv6, single range, across third octet, reverse order", "fe80::ffff-fe80::1:3",
     ["fe80::1:3", "fe80::1:2", "fe80::1:1", "fe80::1:0"], True, "fe80::ffff"),
    ("ipv6, two ranges, 5 addresses", "fe80::10-fe80::12,fe81::20-fe81::21",
     ["fe80::10", "fe80::11", "fe80::12"], False, "fe81::20"),
    ("ipv6, two ranges, 5 addresses, reverse order", "fe80::10-fe80::12,fe81::20-fe81::21",
     ["fe81::21", "fe81::20"], True, "fe80::12"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "existing", "desc", "want"), FIND_FROM_RANGE)
def test_find_available_host_from_range(
    name: str, value: str, existing: list[str], desc: bool, want: str
) -> None:
    data = {"range-global": value, **({"search-order": "desc"} if desc else {})}
    families = V6 if ":" in value else V4
    assert find(data, existing, families=families) == want, name


# ------------------------------------------------- pkg/ipam: TestFindAvailableHostFromCIDR

FIND_FROM_CIDR = [
    ("single entry, 4 addresses, allocate the first one", "192.168.0.200/30", [], {},
     "192.168.0.200"),
    ("single entry, 4 addresses, allocate second address if SkipEndIPsInCIDR is set",
     "192.168.0.200/30", [], {"skip-end-ips-in-cidr": "true"}, "192.168.0.201"),
    ("single entry, two address, reverse ip order", "192.168.0.200/30", [],
     {"search-order": "desc"}, "192.168.0.203"),
    ("single entry, two address, reverse ip order, allocate second last address if "
     "SkipEndIPsInCIDR is set", "192.168.0.200/30", [],
     {"search-order": "desc", "skip-end-ips-in-cidr": "true"}, "192.168.0.202"),
    ("simple cidr, cidr contains .0 and .255", "192.168.0.10/24", [], {}, "192.168.0.1"),
    ("simple cidr, cidr contains .0 and .255, reverse order", "192.168.0.10/24", [],
     {"search-order": "desc"}, "192.168.0.254"),
    ("no ip available", "192.168.0.255/30", ["192.168.0.254", "192.168.0.252", "192.168.0.253"],
     {}, "PoolExhausted"),
    ("no ip available, reverse order", "192.168.0.255/30",
     ["192.168.0.254", "192.168.0.252", "192.168.0.253"], {"search-order": "desc"},
     "PoolExhausted"),
    ("dual entry, overlap address", "192.168.0.200/30,192.168.0.200/29",
     ["192.168.0.201", "192.168.0.202"], {}, "192.168.0.200"),
    ("dual entry, overlap address, set SkipEndIPsInCIDR, pick next available address after "
     "first one", "192.168.0.200/30,192.168.0.200/29", ["192.168.0.201", "192.168.0.202"],
     {"skip-end-ips-in-cidr": "true"}, "192.168.0.203"),
    ("dual entry, overlap address, reverse order, pick next available address from last",
     "192.168.0.200/30,192.168.0.200/29", ["192.168.0.201", "192.168.0.202"],
     {"search-order": "desc"}, "192.168.0.207"),
    ("dual entry, overlap address, reverse order, set SkipEndIPsInCIDR, pick next available "
     "address before last", "192.168.0.200/30,192.168.0.200/29",
     ["192.168.0.201", "192.168.0.202"], {"search-order": "desc", "skip-end-ips-in-cidr": "true"},
     "192.168.0.206"),
    ("ipv6, single entry, two address", "2001::49fe/127", [], {}, "2001::49fe"),
    ("ipv6, single entry, two address, set SkipEndIPsInCIDR no effect", "2001::49fe/127", [],
     {"skip-end-ips-in-cidr": "true"}, "2001::49fe"),
    ("ipv6, single entry, two address, reverse order", "2001::49fe/127", [],
     {"search-order": "desc"}, "2001::49ff"),
    ("ipv6, no ip available", "2001::49fe/127", ["2001::49fe", "2001::49ff"], {},
     "PoolExhausted"),
    ("ipv6, no ip available, reverse order", "2001::49fe/127", ["2001::49fe", "2001::49ff"],
     {"search-order": "desc"}, "PoolExhausted"),
    ("ipv6, dual entry, overlap address", "2001::10/126,2001::12/127", ["2001::10", "2001::11"],
     {}, "2001::12"),
    ("ipv6, dual entry, overlap address, reverse order", "2001::10/126,2001::12/127",
     ["2001::10", "2001::11"], {"search-order": "desc"}, "2001::13"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "existing", "extra", "want"), FIND_FROM_CIDR)
def test_find_available_host_from_cidr(
    name: str, value: str, existing: list[str], extra: dict[str, str], want: str
) -> None:
    families = V6 if ":" in value else V4
    assert find({"cidr-global": value, **extra}, existing, families=families) == want, name


# ---------------------------------- pkg/provider: Test_DiscoveryPoolCIDR, Test_DiscoveryPoolRange

DISCOVERY_POOL_CIDR = {
    "cidr-dummystart": "172.16.0.1/24",
    "cidr-global": "192.168.1.1/24",
    "cidr-system": "10.10.10.8/29",
    "allow-share-system": "true",
    "cidr-dummyend": "172.16.0.2/24",
    "cidr-ipv6": "2001::10/127",
}
DISCOVERY_POOL_RANGE = {
    "range-dummystart": "172.16.0.1-172.16.0.254",
    "range-global": "192.168.1.1-192.168.1.254",
    "range-system": "10.10.10.8-10.10.10.15",
    "range-dummyend": "172.16.1.1-172.16.1.254",
    "cidr-ipv6": "2001::10-2001::20",  # a range under a cidr- key is read as a range
}


def serving(data: dict[str, str], namespace: str) -> Pool:
    (pool,) = [p for p in parse_kubevip(data).pools if p.selects({}, namespace, {})]
    return pool


@pytest.mark.parametrize(
    "case",
    [
        ("cidr lookup for known namespace", DISCOVERY_POOL_CIDR, "system", "kubevip-system",
         "10.10.10.8", "10.10.10.15", True),
        ("ipv6, cidr lookup for known namespace", DISCOVERY_POOL_CIDR, "ipv6", "kubevip-ipv6",
         "2001::10", "2001::11", False),
        ("cidr lookup for unknown namespace", DISCOVERY_POOL_CIDR, "basic", "kubevip-global",
         "192.168.1.0", "192.168.1.255", False),  # host bits: 192.168.1.1/24 is 192.168.1.0/24
        ("range lookup for known namespace", DISCOVERY_POOL_RANGE, "system", "kubevip-system",
         "10.10.10.8", "10.10.10.15", False),
        ("ipv6, range lookup for known namespace", DISCOVERY_POOL_RANGE, "ipv6", "kubevip-ipv6",
         "2001::10", "2001::20", False),
        ("range lookup for unknown namespace", DISCOVERY_POOL_RANGE, "basic", "kubevip-global",
         "192.168.1.1", "192.168.1.254", False),
    ],
    ids=lambda case: str(case[0]),
)  # fmt: skip
def test_discovery_pool(case: tuple[str, dict[str, str], str, str, str, str, bool]) -> None:
    name, data, namespace, pool, first, last, share = case
    found = serving(data, namespace)
    (span,) = found.ranges
    assert (found.name, str(to_address(span.version, span.first))) == (pool, first), name
    assert str(to_address(span.version, span.last)) == last, name
    assert found.shares(namespace, span.version) == share, name


# ---------------------------- pkg/provider: Test_DiscoveryAddressCIDR, Test_DiscoveryAddressRange

OTHERS = ["10.10.10.8", "172.16.0.3", "192.168.1.1", "10.10.10.9", "10.10.10.10", "172.16.0.4",
          "192.168.1.2", "10.10.10.12"]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "namespace", "value", "existing", "want"),
    [
        ("cidr: available ip search for known namespace", "system", "10.10.10.8/29",
         ["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"], "10.10.10.11"),
        ("cidr: available ip search for unknown namespace", "unknown", "192.168.1.1/24", OTHERS,
         "192.168.1.3"),
        ("cidr: ipv6, available ip search for known namespace", "system", "fe80::10/126",
         ["fe80::10", "fe80::11", "fe80::12"], "fe80::13"),
        ("range: available ip search for known namespace", "system", "10.10.10.8-10.10.10.15",
         ["10.10.10.8", "10.10.10.9", "10.10.10.10", "10.10.10.12"], "10.10.10.11"),
        ("range: available ip search for unknown namespace", "unknown",
         "192.168.1.1-192.168.1.254", OTHERS, "192.168.1.3"),
        ("range: ipv6 available ip search for known namespace", "system",
         "fe80::ffff-fe80::1:3", ["fe80::ffff", "fe80::1:0", "fe80::1:1"], "fe80::1:2"),
    ],
)  # fmt: skip
def test_discovery_address(
    name: str, namespace: str, value: str, existing: list[str], want: str
) -> None:
    key = "cidr-global" if "/" in value else "range-global"
    families = V6 if ":" in value else V4
    assert find({key: value}, existing, namespace=namespace, families=families) == want, name
