"""Addresses known to be in use outside the pools (the Service CIDRs, the Nodes' addresses and
podCIDRs) are passed over by a new allocation; a Service that holds one keeps it, and a
request for one is the operator's choice. MetalLB and kube-vip-cloud-provider hand them out."""

from __future__ import annotations

import ipaddress
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from local_ccm.lbipam.core.allocator import Allocation, Problem, decide
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.pools import AddressRange, Pool, parse_pool
from local_ccm.lbipam.core.service import ServiceRequest
from local_ccm.lbipam.core.status import InUse, NodeNetworks


def pool(*addresses: str, **spec: Any) -> Pool:
    parsed = parse_pool({"metadata": {"name": "p"}, "spec": {"addresses": list(addresses),
                                                              **spec}})  # fmt: skip
    assert isinstance(parsed, Pool), parsed
    return parsed


def req(name: str, **kwargs: Any) -> ServiceRequest:
    return ServiceRequest(key=f"ns/{name}", namespace="ns", **kwargs)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def given_to(request: ServiceRequest, pools: list[Pool], in_use: InUse,
             ledger: Ledger | None = None) -> list[str]:  # fmt: skip
    decision = decide(request, pools, ledger or Ledger(), {}, in_use)
    assert isinstance(decision, Allocation), decision
    return [str(a) for a in decision.addresses]


NODE = NodeNetworks("n1", addresses=("10.0.0.1", "fd00::5"), pod_cidrs=("10.0.0.2/31",))


def test_a_node_address_and_podcidr_inside_the_pool_are_passed_over() -> None:
    in_use = InUse.of([], [NODE])
    assert given_to(req("a"), [pool("10.0.0.0/29")], in_use) == ["10.0.0.4"]


def span(first: str, last: str) -> AddressRange:
    return AddressRange(ip(first).version, int(ip(first)), int(ip(last)))


def test_a_descending_pool_passes_over_them_from_its_end() -> None:
    """kube-vip's `search-order: desc`."""
    in_use = InUse.of([], [NodeNetworks("n1", addresses=("10.0.0.6", "10.0.0.5"))])
    descending = Pool("kv", (span("10.0.0.1", "10.0.0.6"),), descending=True)
    assert given_to(req("a"), [descending], in_use) == ["10.0.0.4"]


def test_ipv6_node_addresses_are_passed_over_too() -> None:
    chosen = given_to(req("a", families=(6,)),
                      [pool("fd00::4-fd00::7")], InUse.of([], [NODE]))  # fmt: skip
    assert chosen == ["fd00::4"]
    chosen = given_to(req("a", families=(6,)),
                      [pool("fd00::5-fd00::7")], InUse.of([], [NODE]))  # fmt: skip
    assert chosen == ["fd00::6"]


def test_a_pool_inside_a_service_cidr_has_nothing_to_give() -> None:
    decision = decide(req("a"), [pool("10.96.0.10-10.96.0.20")], Ledger(), {},
                      InUse.of(["10.96.0.0/12"], []))  # fmt: skip
    assert isinstance(decision, Problem)
    assert decision.reason == "PoolExhausted"


def test_the_next_pool_serves_when_the_first_is_all_in_use() -> None:
    first = Pool("first", (span("10.0.0.1", "10.0.0.3"),))
    second = Pool("second", (span("10.0.1.1", "10.0.1.3"),), priority=1)
    assert given_to(req("a"), [first, second], InUse.of([], [NODE])) == ["10.0.1.1"]


def test_a_service_holding_an_address_now_in_use_keeps_it() -> None:
    """No churn: the Node came after the Service; the pool's Conflict condition names it."""
    ledger, kept = Ledger(), ip("10.0.0.1")
    ledger.hold([(kept, Holder("ns/a", None, frozenset()))])
    chosen = given_to(req("a", current=(kept,)), [pool("10.0.0.0/29")], InUse.of([], [NODE]),
                      ledger)  # fmt: skip
    assert chosen == ["10.0.0.1"]


def test_a_requested_address_in_use_is_given_as_asked() -> None:
    chosen = given_to(req("a", requested=(ip("10.0.0.1"),)), [pool("10.0.0.0/29")],
                      InUse.of([], [NODE]))  # fmt: skip
    assert chosen == ["10.0.0.1"]


def test_texts_that_do_not_parse_are_ignored_and_ranges_merge() -> None:
    in_use = InUse.of(["10.96.0.0/16", "bogus"], [NodeNetworks("n", ("10.96.1.1", "", "x"),
                                                                ("10.97.0.0/16",))])  # fmt: skip
    assert in_use.ranges == (span("10.96.0.0", "10.97.255.255"),)
    assert in_use.around(6, int(ip("10.96.0.1"))) is None  # another family's same integer


@given(
    taken=st.sets(st.integers(0, 31), max_size=20),
    used=st.lists(st.tuples(st.integers(0, 31), st.integers(0, 4)), max_size=6),
    descending=st.booleans(),
)
def test_the_address_given_is_the_first_neither_held_nor_in_use(
    taken: set[int], used: list[tuple[int, int]], descending: bool
) -> None:
    base = int(ip("10.1.0.0"))
    the_pool = Pool("p", (span("10.1.0.0", "10.1.0.31"),), descending=descending)
    ledger = Ledger()
    for n, value in enumerate(sorted(taken)):
        ledger.hold([(ip(str(ipaddress.IPv4Address(base + value))),
                      Holder(f"ns/held{n}", None, frozenset()))])  # fmt: skip
    texts = [str(ipaddress.IPv4Address(base + start + k)) for start, width in used
             for k in range(width) if start + k < 32]  # fmt: skip
    in_use = InUse.of([], [NodeNetworks("n", tuple(texts))])
    blocked = {int(ip(t)) - base for t in texts}
    free = [v for v in range(32) if v not in taken and v not in blocked]
    expected = (max(free) if descending else min(free)) if free else None
    decision = decide(req("new"), [the_pool], ledger, {}, in_use)
    if expected is None:
        assert isinstance(decision, Problem)
        assert decision.reason == "PoolExhausted"
    else:
        assert isinstance(decision, Allocation), decision
        assert [int(a) - base for a in decision.addresses] == [expected]
