"""Hypothesis properties of the allocator: across any sequence of decide/hold/release over
small pools, no address has two holders unless they share a sharing group with disjoint
ports, deciding again changes nothing, a ledger rebuilt from the Services' status decides the
same, and a freed address is handed out again. The ledger's bisect search agrees with a
brute-force scan."""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.lbipam.core.allocator import Allocation, build_ledger, decide, hold, release, usage
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.pools import AddressRange, Pool
from local_ccm.lbipam.core.service import ServiceRequest

V4 = int(ipaddress.IPv4Address("10.0.0.0"))
V6 = int(ipaddress.IPv6Address("fd00::"))
POOLS = [
    Pool("a", (AddressRange(4, V4, V4 + 2), AddressRange(6, V6, V6 + 1)), priority=0),
    Pool("b", (AddressRange(4, V4 + 1, V4 + 4),), priority=1, descending=True),
    Pool("kv", (AddressRange(4, V4 + 8, V4 + 9),), priority=2, allow_share=True),
]
SPACE = [ipaddress.ip_address(V4 + i) for i in range(10)] + [
    ipaddress.ip_address(V6 + i) for i in range(2)
]


class Ask(NamedTuple):
    service: int
    key: str | None = None
    ports: frozenset[tuple[str, int]] = frozenset()
    families: tuple[int, ...] = (4,)
    asked: int | None = None


asks = st.builds(
    Ask,
    st.integers(0, 7),
    st.sampled_from([None, "k", "j"]),
    st.frozensets(st.sampled_from([("TCP", 80), ("TCP", 443), ("UDP", 53)]), max_size=2),
    st.sampled_from([(4,), (6,), (4, 6)]),
    st.one_of(st.none(), st.integers(0, len(SPACE) - 1)),
)
ops = st.one_of(asks, st.integers(0, 7))  # an integer releases that Service


def request(ask: Ask, ledger: Ledger) -> ServiceRequest:
    key = f"ns/s{ask.service}"
    return ServiceRequest(
        key=key,
        namespace="ns",
        families=ask.families,
        family_policy="PreferDualStack" if len(ask.families) > 1 else "SingleStack",
        requested=() if ask.asked is None else (SPACE[ask.asked],),
        sharing_key=ask.key,
        ports=ask.ports,
        current=ledger.held_by(key),
    )


def check_invariant(ledger: Ledger) -> None:
    for address in SPACE:
        holders = ledger.holders(address)
        for i, one in enumerate(holders):
            for other in holders[i + 1 :]:
                assert one.group is not None, (address, holders)
                assert one.group == other.group, (address, holders)
                assert not one.ports & other.ports, (address, holders)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=40))
def test_no_address_has_two_holders_unless_they_may_share(steps: list[Ask | int]) -> None:
    ledger = Ledger()
    for step in steps:
        if isinstance(step, int):
            release(ledger, f"ns/s{step}")
        else:
            decision = decide(request(step, ledger), POOLS, ledger, {})
            if isinstance(decision, Allocation):
                assert all(any(p.contains(a) for p in POOLS) for a in decision.addresses)
                hold(ledger, decision)
        check_invariant(ledger)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=30))
def test_freed_addresses_are_reusable(order: list[int]) -> None:
    ledger = Ledger()
    capacity = len({a for a in SPACE if a.version == 4 and any(p.contains(a) for p in POOLS)})
    for name in range(capacity):
        decision = decide(request(Ask(name), ledger), POOLS, ledger, {})
        assert isinstance(decision, Allocation)
        hold(ledger, decision)
    for name in dict.fromkeys(order):
        if name >= capacity:
            continue
        freed = release(ledger, f"ns/s{name}")
        decision = decide(request(Ask(100 + name), ledger), POOLS, ledger, {})
        assert isinstance(decision, Allocation)
        assert decision.addresses == freed
        hold(ledger, decision)


def snapshot(ledger: Ledger) -> dict[str, tuple[str, ...]]:
    return {s: tuple(sorted(map(str, ledger.held_by(s)))) for s in ledger.services()}


@settings(max_examples=150, deadline=None)
@given(st.lists(asks, max_size=25))
def test_deciding_again_is_idempotent_and_a_rebuilt_ledger_agrees(steps: list[Ask]) -> None:
    ledger = Ledger()
    latest: dict[int, Ask] = {}  # the ask each Service's held addresses answer
    for ask in steps:
        decision = decide(request(ask, ledger), POOLS, ledger, {})
        if isinstance(decision, Allocation):
            hold(ledger, decision)
            latest[ask.service] = ask
            again = decide(request(ask, ledger), POOLS, ledger, {})
            assert isinstance(again, Allocation)
            assert set(again.addresses) == set(decision.addresses)
    held = [request(latest[int(s.removeprefix("ns/s"))], ledger) for s in ledger.services()]
    rebuilt, notes = build_ledger(held, POOLS)
    assert notes == []
    assert snapshot(rebuilt) == snapshot(ledger)
    assert [usage(p, rebuilt) for p in POOLS] == [usage(p, ledger) for p in POOLS]


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.integers(0, 40), max_size=30),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
)
def test_first_free_and_used_in_match_a_scan(
    held: set[int], lo: int, hi: int, descending: bool
) -> None:
    ledger = Ledger()
    for value in held:
        address = ipaddress.ip_address(V4 + value)
        ledger.hold([(address, Holder(f"ns/h{value}", None, frozenset()))])
    span = AddressRange(4, V4 + min(lo, hi), V4 + max(lo, hi))
    free = [v for v in range(span.first, span.last + 1) if v - V4 not in held]
    assert ledger.used_in(span) == span.size - len(free)
    expected = (max(free) if descending else min(free)) if free else None
    found = ledger.first_free(span, descending=descending)
    assert (None if found is None else int(found)) == expected
