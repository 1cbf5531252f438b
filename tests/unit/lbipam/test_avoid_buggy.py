"""`spec.avoidBuggyIPs`: MetalLB's setting of the same name, ported case by case.

MetalLB (internal/allocator/allocator.go, `ipConfusesBuggyFirmwares`) never hands out an IPv4
address ending in .0 or .255 from such a pool, wherever it lies in a CIDR or range; IPv6 is
untouched, and a CIDR's first and last address are not trimmed for it. The cases below name
the upstream test they come from (metallb/metallb internal/allocator/allocator_test.go).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from local_ccm.lbipam.core.allocator import Allocation, Problem, decide, hold, usage
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.pools import (
    AddressRange,
    InvalidPool,
    Pool,
    buggy_count,
    is_buggy,
    parse_pool,
)
from local_ccm.lbipam.core.service import ServiceRequest


def metallb_pool(name: str, *addresses: str, avoid: bool = False, **spec: Any) -> Pool:
    """A pool as MetalLB reads one: no CIDR end is trimmed (`allowFirstAndLast: true`)."""
    obj = {"metadata": {"name": name},
           "spec": {"addresses": list(addresses), "allowFirstAndLast": True,
                    "avoidBuggyIPs": avoid, **spec}}  # fmt: skip
    parsed = parse_pool(obj)
    assert isinstance(parsed, Pool), parsed
    return parsed


def req(name: str, **kwargs: Any) -> ServiceRequest:
    return ServiceRequest(key=f"ns/{name}", namespace="ns", **kwargs)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def give(ledger: Ledger, request: ServiceRequest, pools: list[Pool]) -> Allocation | Problem:
    decision = decide(request, pools, ledger, {})
    if isinstance(decision, Allocation):
        hold(ledger, decision)
    return decision


def addresses(decision: Allocation | Problem) -> list[str]:
    assert isinstance(decision, Allocation), decision
    return [str(a) for a in decision.addresses]


def test_buggy_ips_allocation_never_gives_dot_zero_or_dot_255() -> None:
    # TestBuggyIPs: two pools without and two with avoidBuggyIPs, all /31 at a /24 boundary;
    # six Services get only the valid addresses, the seventh none.
    pools = [
        metallb_pool("test", "1.2.3.0/31"),
        metallb_pool("test2", "1.2.3.254/31"),
        metallb_pool("test3", "1.2.4.0/31", avoid=True),
        metallb_pool("test4", "1.2.4.254/31", avoid=True),
    ]
    valid = {"1.2.3.0", "1.2.3.1", "1.2.3.254", "1.2.3.255", "1.2.4.1", "1.2.4.254"}
    ledger = Ledger()
    given = [addresses(give(ledger, req(f"s{n}"), pools))[0] for n in range(1, 7)]
    assert set(given) == valid
    last = give(ledger, req("s7"), pools)
    assert isinstance(last, Problem)
    assert last.reason == "PoolExhausted"


@pytest.mark.parametrize("asked", ["1.2.4.0", "1.2.4.255"])
def test_assignment_cannot_grab_a_buggy_ip(asked: str) -> None:
    # TestAssignment: "s3 cannot grab a 0 buggy IP" / "s3 cannot grab a 255 buggy IP".
    pools = [metallb_pool("test2", "1.2.4.0/24", "1000::4:0/120", avoid=True)]
    decision = decide(req("s3", requested=(ip(asked),)), pools, Ledger(), {})
    assert isinstance(decision, Problem)
    assert decision.reason == "AddressNotInPool"


def test_assignment_can_grab_another_ip_in_that_pool() -> None:
    # TestAssignment: "s3 can grab another IP in that pool" (1.2.4.254).
    pools = [metallb_pool("test2", "1.2.4.0/24", "1000::4:0/120", avoid=True)]
    decision = decide(req("s3", requested=(ip("1.2.4.254"),)), pools, Ledger(), {})
    assert addresses(decision) == ["1.2.4.254"]


@pytest.mark.parametrize("asked", ["1000::4:ff", "1000::4:0"])
def test_assignment_buggy_ips_do_not_apply_to_ipv6(asked: str) -> None:
    # TestAssignment: "(buggy-IP N/A for ipv6)", then "s3 can grab another IP in that pool"
    # with 1000::4:ff; an IPv6 address ending in :0 is just as valid.
    pools = [metallb_pool("test2", "1.2.4.0/24", "1000::4:0/120", avoid=True)]
    decision = decide(req("s3", requested=(ip(asked),), families=(6,)), pools, Ledger(), {})
    assert addresses(decision) == [asked]


def test_pool_count_without_buggy_ips() -> None:
    # TestPoolCount: "BGP /24" 256, "BGP /24 and /25" 384, "... no buggy IPs" 381.
    assert metallb_pool("p", "1.2.3.0/24").capacity(4) == 256
    assert metallb_pool("p", "1.2.3.0/24", "2.3.4.128/25").capacity(4) == 384
    assert metallb_pool("p", "1.2.3.0/24", "2.3.4.128/25", avoid=True).capacity(4) == 381


def test_pool_count_ipv4_and_ipv6_range() -> None:
    # TestPoolCount: "ipv4 and ipv6 range": 1.2.3.0/31 and 1000::/127 give 1 and 2.
    pool = metallb_pool("p", "1.2.3.0/31", "1000::/127", avoid=True)
    assert (pool.capacity(4), pool.capacity(6)) == (1, 2)


def test_config_reload_enabling_buggy_ips_takes_dot_zero_out_of_the_pool() -> None:
    # TestConfigReload: "enable buggy IPs not allowed": 1.2.3.0 is no longer the pool's.
    before = metallb_pool("test", "1.2.3.0/30", "1000::/126")
    after = metallb_pool("test2", "1.2.3.0/31", "1000::/127", avoid=True)
    assert before.contains(ip("1.2.3.0"))
    assert not after.contains(ip("1.2.3.0"))
    assert after.contains(ip("1000::"))


def test_ranges_skip_buggy_ips_inside_them_too() -> None:
    # MetalLB checks every candidate address (getIPFromCIDR), so a range across a /24
    # boundary loses its .255 and .0 as well.
    pool = metallb_pool("p", "10.0.0.250-10.0.1.5", avoid=True)
    assert pool.capacity(4) == 10
    ledger = Ledger()
    given = [addresses(give(ledger, req(f"s{n}"), [pool]))[0] for n in range(10)]
    assert given[4:7] == ["10.0.0.254", "10.0.1.1", "10.0.1.2"]
    assert "10.0.0.255" not in given
    assert "10.0.1.0" not in given


def test_descending_search_skips_buggy_ips_too() -> None:
    pool = Pool(
        "kv", metallb_pool("p", "10.0.0.254-10.0.1.1", avoid=True).ranges,
        avoid_buggy_ips=True, descending=True,
    )  # fmt: skip
    ledger = Ledger()
    assert [addresses(give(ledger, req(n), [pool]))[0] for n in "ab"] == [
        "10.0.1.1",
        "10.0.0.254",
    ]


def test_independent_of_allow_first_and_last() -> None:
    def capacity(**spec: Any) -> int:
        parsed = parse_pool({"metadata": {"name": "p"}, "spec": {"addresses": ["10.0.0.0/23"],
                             **spec}})  # fmt: skip
        assert isinstance(parsed, Pool), parsed
        return parsed.capacity(4)

    assert capacity() == 510  # only the CIDR's ends skipped: 10.0.0.255 and 10.0.1.0 stay
    assert capacity(avoidBuggyIPs=True) == 508
    assert capacity(allowFirstAndLast=True) == 512
    assert capacity(allowFirstAndLast=True, avoidBuggyIPs=True) == 508


def test_ipv6_cidr_is_untouched() -> None:
    assert metallb_pool("p", "fd00::/120", avoid=True).capacity(6) == 256


def test_a_full_slash_16_finds_the_last_valid_address_without_a_walk() -> None:
    pool = metallb_pool("p", "10.1.0.0/16", avoid=True)
    ledger = Ledger()
    base = int(ip("10.1.0.0"))
    held = [v for v in range(base, base + 65536) if v % 256 not in (0, 255)][:-1]
    for value in held:
        ledger.hold([(ipaddress.IPv4Address(value), Holder(f"ns/{value}", None, frozenset()))])
    assert addresses(give(ledger, req("last"), [pool])) == ["10.1.255.254"]
    assert usage(pool, ledger) == {4: 65536 - 512}


def test_a_held_buggy_address_is_not_counted_as_used_by_the_pool() -> None:
    # Held through another pool (or from before the setting): it is not this pool's.
    pool = metallb_pool("p", "10.0.0.0/24", avoid=True)
    ledger = Ledger()
    ledger.hold([(ip("10.0.0.0"), Holder("ns/old", None, frozenset()))])
    ledger.hold([(ip("10.0.0.7"), Holder("ns/new", None, frozenset()))])
    assert usage(pool, ledger) == {4: 1}


def test_the_setting_must_be_a_boolean() -> None:
    spec = {"addresses": ["10.0.0.0/24"], "avoidBuggyIPs": "yes"}
    parsed = parse_pool({"metadata": {"name": "p"}, "spec": spec})
    assert isinstance(parsed, InvalidPool)
    assert parsed.problems == ("spec.avoidBuggyIPs: 'yes' is not a boolean",)


def test_default_is_off() -> None:
    parsed = parse_pool({"metadata": {"name": "p"}, "spec": {"addresses": ["10.0.0.0/23"]}})
    assert isinstance(parsed, Pool)
    assert not parsed.avoid_buggy_ips
    assert parsed.contains(ip("10.0.0.255"))


@pytest.mark.parametrize(
    ("first", "last"), [(0, 0), (0, 255), (1, 254), (255, 256), (250, 1030), (256, 511), (7, 7)]
)
def test_buggy_count_equals_a_walk(first: int, last: int) -> None:
    span = AddressRange(4, first, last)
    assert buggy_count(span) == sum(1 for v in range(first, last + 1) if is_buggy(4, v))
    assert buggy_count(AddressRange(6, first, last)) == 0


def test_a_service_holding_dot_zero_keeps_it_when_the_setting_is_turned_on() -> None:
    # MetalLB clears such an assignment (TestConfigReload above); here a held address stays
    # held (docs/loadbalancer.md, "Held addresses stay held"), reported as outside the pools.
    after = metallb_pool("test", "1.2.3.0/30", avoid=True)
    ledger = Ledger()
    holder = req("s1", current=(ip("1.2.3.0"),))
    ledger.hold([(ip("1.2.3.0"), Holder("ns/s1", None, frozenset()))])
    decision = decide(holder, [after], ledger, {})
    assert isinstance(decision, Allocation)
    assert decision.outside == (ip("1.2.3.0"),)
    assert addresses(give(ledger, req("s2"), [after])) == ["1.2.3.1"]
