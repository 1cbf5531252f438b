"""A held address stays held whatever happens to the pools: disabled, deleted, re-ranged or no
longer selecting the Service. Only the Service releases it (deleted, no longer ours) or asks
for another address. An address outside every pool is kept and flagged, never handed out."""

from __future__ import annotations

import ipaddress
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.labels import LabelSelector, Requirement
from local_ccm.lbipam.core import writes
from local_ccm.lbipam.core.allocator import (
    OUTSIDE_POOLS,
    Allocation,
    Problem,
    build_ledger,
    decide,
    hold,
)
from local_ccm.lbipam.core.ledger import Ledger
from local_ccm.lbipam.core.pools import AddressRange, IPAddress, Pool, parse_address_text
from local_ccm.lbipam.core.service import ServiceRequest

NOW = "2026-01-01T00:00:00Z"
BLUE = LabelSelector((Requirement("team", "In", ("blue",)),))


def pool(name: str, *texts: str, **kwargs: Any) -> Pool:
    spans = [parse_address_text(t, allow_first_last=True) for t in texts]
    return Pool(name, tuple(s for s in spans if not isinstance(s, str)), **kwargs)


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def holding(address: str, **kwargs: Any) -> ServiceRequest:
    return ServiceRequest(key="ns/d1", namespace="ns", current=(ip(address),), **kwargs)


def kept(request: ServiceRequest, pools: list[Pool]) -> Allocation:
    """The decision for `request` on a ledger rebuilt from its status (as after a restart)."""
    ledger, notes = build_ledger([request], pools)
    assert notes == []
    decision = decide(request, pools, ledger, {})
    assert isinstance(decision, Allocation), decision
    return decision


def test_a_disabled_pool_keeps_its_address_even_when_another_pool_selects() -> None:
    a = pool("a", "198.18.6.0/29", disabled=True)
    b = pool("b", "198.18.7.0/29")
    decision = kept(holding("198.18.6.1"), [a, b])
    assert decision.addresses == (ip("198.18.6.1"),)
    assert decision.outside == ()
    assert decision.notes == ("198.18.6.1 is kept from pool a, which is disabled",)


def test_a_disabled_pool_alone_is_no_reason_for_no_pool() -> None:
    decision = kept(holding("198.18.6.1"), [pool("a", "198.18.6.0/29", disabled=True)])
    assert decision.addresses == (ip("198.18.6.1"),)


def test_a_pool_that_stops_selecting_the_service_keeps_its_address() -> None:
    a = pool("a", "198.18.6.0/29", service_selector=BLUE)
    b = pool("b", "198.18.7.0/29")
    decision = kept(holding("198.18.6.1"), [a, b])
    assert decision.addresses == (ip("198.18.6.1"),)
    assert decision.notes == ("198.18.6.1 is kept from pool a, which does not select the Service",)


def test_an_address_outside_every_pool_is_kept_and_flagged() -> None:
    decision = kept(holding("198.18.6.1"), [pool("b", "198.18.7.0/29")])
    assert decision.addresses == (ip("198.18.6.1"),)
    assert decision.outside == (ip("198.18.6.1"),)
    assert decision.placements[0].pool == ""
    assert "in no pool's ranges" in decision.notes[0]


def test_an_address_outside_every_pool_is_kept_with_no_pool_at_all() -> None:
    assert kept(holding("198.18.6.1"), []).outside == (ip("198.18.6.1"),)


def test_the_address_a_disabled_pool_holds_is_never_handed_out_by_an_overlapping_pool() -> None:
    a = pool("a", "198.18.6.1/32", disabled=True)
    c = pool("c", "198.18.6.0/30")
    ledger, _ = build_ledger([holding("198.18.6.1")], [a, c])
    other = ServiceRequest(key="ns/d2", namespace="ns")
    first = decide(other, [a, c], ledger, {})
    assert isinstance(first, Allocation)
    assert first.addresses == (ip("198.18.6.0"),)
    hold(ledger, first)
    asked = ServiceRequest(key="ns/d3", namespace="ns", requested=(ip("198.18.6.1"),))
    refused = decide(asked, [a, c], ledger, {})
    assert isinstance(refused, Problem)
    assert refused.reason == "AddressInUse"


def test_an_orphaned_address_is_never_given_to_another_service() -> None:
    ledger, _ = build_ledger([holding("198.18.6.1")], [])
    later = pool("c", "198.18.6.1/32", service_selector=BLUE)  # the orphan re-enters a pool
    blue = ServiceRequest(key="ns/d2", namespace="ns", labels={"team": "blue"})
    refused = decide(blue, [later], ledger, {})
    assert isinstance(refused, Problem)
    assert refused.reason == "PoolExhausted"


def test_a_held_requested_address_stays_while_the_request_names_it() -> None:
    request = holding("198.18.6.1", requested=(ip("198.18.6.1"),))
    decision = kept(request, [pool("a", "198.18.6.0/29", disabled=True), pool("b", "10.0.0.0/30")])
    assert decision.addresses == (ip("198.18.6.1"),)


def test_an_explicit_new_request_moves_the_service() -> None:
    request = holding("198.18.6.1", requested=(ip("198.18.7.3"),))
    decision = kept(
        request, [pool("a", "198.18.6.0/29", disabled=True), pool("b", "198.18.7.0/29")]
    )
    assert decision.addresses == (ip("198.18.7.3"),)
    assert decision.notes == ()


def test_a_cleared_status_gets_a_new_address_from_a_selecting_pool() -> None:
    ledger, _ = build_ledger([holding("198.18.6.1")], [])
    cleared = ServiceRequest(key="ns/d1", namespace="ns")
    decision = decide(cleared, [pool("b", "198.18.7.0/29")], ledger, {})
    assert isinstance(decision, Allocation)
    assert decision.addresses == (ip("198.18.7.0"),)


def test_without_a_held_address_no_pool_is_still_no_pool() -> None:
    fresh = ServiceRequest(key="ns/d2", namespace="ns")
    decision = decide(fresh, [pool("a", "198.18.6.0/29", disabled=True)], Ledger(), {})
    assert isinstance(decision, Problem)
    assert decision.reason == "NoPool"


def test_dual_stack_keeps_the_held_family_and_fills_the_other_from_a_selecting_pool() -> None:
    request = holding("198.18.6.1", families=(4, 6), family_policy="RequireDualStack")
    decision = kept(request, [pool("v6", "fd00::/126")])
    assert decision.addresses == (ip("198.18.6.1"), ip("fd00::"))
    assert decision.outside == (ip("198.18.6.1"),)


def test_the_condition_of_a_kept_address_says_why() -> None:
    orphan = writes.condition(kept(holding("198.18.6.1"), []), 0, NOW)
    assert (orphan["status"], orphan["reason"]) == ("True", OUTSIDE_POOLS)
    assert orphan["message"].startswith("allocated 198.18.6.1; 198.18.6.1 is in no pool's ranges")
    disabled = kept(holding("198.18.6.1"), [pool("a", "198.18.6.0/29", disabled=True)])
    cond = writes.condition(disabled, 0, NOW)
    assert (cond["status"], cond["reason"]) == ("True", "Allocated")
    assert cond["message"] == "allocated 198.18.6.1; " + disabled.notes[0]
    assert disabled.notes == ("198.18.6.1 is kept from pool a, which is disabled",)


# ---------------------------------------------------------------- the general rule

V4 = int(ipaddress.IPv4Address("198.18.6.0"))
START = [Pool("a", (AddressRange(4, V4, V4 + 3),)), Pool("b", (AddressRange(4, V4 + 2, V4 + 5),))]
edits = st.sampled_from(["disable", "delete", "re-range", "deselect", "keep"])


def edited(original: Pool, edit: str) -> list[Pool]:
    if edit == "delete":
        return []
    if edit == "disable":
        return [Pool(original.name, original.ranges, disabled=True)]
    if edit == "re-range":
        return [Pool(original.name, (AddressRange(4, V4 + 8, V4 + 9),))]
    if edit == "deselect":
        return [Pool(original.name, original.ranges, service_selector=BLUE)]
    return [original]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), edits, edits, st.booleans())
def test_whatever_happens_to_the_pools_held_addresses_stay_and_are_never_shared(
    count: int, edit_a: str, edit_b: str, restart: bool
) -> None:
    ledger = Ledger()
    held: dict[str, tuple[IPAddress, ...]] = {}
    for n in range(count):
        decision = decide(ServiceRequest(key=f"ns/s{n}", namespace="ns"), START, ledger, {})
        if isinstance(decision, Allocation):
            hold(ledger, decision)
            held[f"ns/s{n}"] = decision.addresses
    pools = edited(START[0], edit_a) + edited(START[1], edit_b)
    requests = [ServiceRequest(key=k, namespace="ns", current=v) for k, v in held.items()]
    if restart:
        ledger, _ = build_ledger(requests, pools)
    for request in requests:
        decision = decide(request, pools, ledger, {})
        assert isinstance(decision, Allocation)
        assert decision.addresses == held[request.key]
        in_pools = any(p.contains(a) for p in pools for a in decision.addresses)
        assert bool(decision.outside) != in_pools
    newcomer = decide(ServiceRequest(key="ns/new", namespace="ns"), pools, ledger, {})
    taken = {a for addresses in held.values() for a in addresses}
    if isinstance(newcomer, Allocation):
        assert not taken & set(newcomer.addresses)


def test_services_sharing_through_a_pool_that_is_gone_keep_sharing() -> None:
    kv = pool("kv", "198.18.6.0/30", allow_share=True)  # kube-vip's allow-share, no sharing key
    ledger = Ledger()
    web = ServiceRequest(key="ns/web", namespace="ns", ports=frozenset({("TCP", 80)}))
    dns = ServiceRequest(key="ns/dns", namespace="ns", ports=frozenset({("UDP", 53)}))
    for request in (web, dns):
        decision = decide(request, [kv], ledger, {})
        assert isinstance(decision, Allocation)
        hold(ledger, decision)
    assert ledger.held_by("ns/web") == ledger.held_by("ns/dns") == (ip("198.18.6.0"),)
    for request in (web, dns):  # the ConfigMap entry removed; another pool selects both
        held = ServiceRequest(key=request.key, namespace="ns", ports=request.ports,
                              current=(ip("198.18.6.0"),))  # fmt: skip
        decision = decide(held, [pool("b", "198.18.7.0/30")], ledger, {})
        assert isinstance(decision, Allocation)
        assert decision.outside == (ip("198.18.6.0"),)
        hold(ledger, decision)
