"""The allocation decision: examples for each outcome."""

from __future__ import annotations

import ipaddress
from typing import Any

from local_ccm.lbipam.core.allocator import Allocation, Problem, build_ledger, decide, hold, release
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.pools import AddressRange, Pool, parse_address_text, parse_pool
from local_ccm.lbipam.core.service import ServiceRequest


def pool(name: str, *texts: str, **kwargs: Any) -> Pool:
    spans = [parse_address_text(t, allow_first_last=True) for t in texts]
    assert all(not isinstance(s, str) for s in spans)
    return Pool(name, tuple(s for s in spans if not isinstance(s, str)), **kwargs)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def req(name: str, **kwargs: Any) -> ServiceRequest:
    return ServiceRequest(key=f"ns/{name}", namespace="ns", **kwargs)


def allocated(decision: Allocation | Problem) -> tuple[str, ...]:
    assert isinstance(decision, Allocation), decision
    return tuple(str(a) for a in decision.addresses)


def reason(decision: Allocation | Problem) -> str:
    assert isinstance(decision, Problem), decision
    return decision.reason


def give(ledger: Ledger, request: ServiceRequest, pools: list[Pool]) -> tuple[str, ...]:
    decision = decide(request, pools, ledger, {})
    assert isinstance(decision, Allocation), decision
    hold(ledger, decision)
    return allocated(decision)


def test_lowest_free_address_of_the_first_pool_by_priority() -> None:
    pools = [pool("b", "10.0.1.0-10.0.1.3", priority=1), pool("a", "10.0.0.5-10.0.0.6", priority=2)]
    ledger = Ledger()
    assert give(ledger, req("x"), pools) == ("10.0.1.0",)
    assert give(ledger, req("y"), pools) == ("10.0.1.1",)


def test_descending_pool_allocates_from_the_end() -> None:
    pools = [pool("kv", "10.0.0.1-10.0.0.4", "10.0.0.10-10.0.0.11", descending=True)]
    ledger = Ledger()
    assert [give(ledger, req(n), pools) for n in "abc"] == [
        ("10.0.0.11",),
        ("10.0.0.10",),
        ("10.0.0.4",),
    ]


def test_exhausted_pool_falls_through_to_the_next_then_fails() -> None:
    pools = [pool("a", "10.0.0.1/32"), pool("b", "10.0.0.9/32", priority=1)]
    ledger = Ledger()
    assert give(ledger, req("x"), pools) == ("10.0.0.1",)
    assert give(ledger, req("y"), pools) == ("10.0.0.9",)
    assert reason(decide(req("z"), pools, ledger, {})) == "PoolExhausted"


def test_current_address_is_kept_no_churn() -> None:
    pools = [pool("a", "10.0.0.0/29")]
    ledger, notes = build_ledger([req("x", current=(ip("10.0.0.5"),))], pools)
    assert notes == []
    assert allocated(decide(req("x", current=(ip("10.0.0.5"),)), pools, ledger, {})) == (
        "10.0.0.5",
    )
    assert give(ledger, req("y"), pools) == ("10.0.0.0",)


def test_current_address_outside_every_pool_is_kept_not_replaced() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger, _ = build_ledger([req("x", current=(ip("10.9.9.9"),))], pools)
    assert allocated(decide(req("x", current=(ip("10.9.9.9"),)), pools, ledger, {})) == (
        "10.9.9.9",
    )


def test_no_pool_selects_the_service() -> None:
    pools = [
        pool("a", "10.0.0.0/30", namespaces=frozenset({"other"})),
        pool("b", "10.0.0.8/30", disabled=True),
    ]
    assert reason(decide(req("x"), pools, Ledger(), {})) == "NoPool"


def test_namespace_labels_reach_the_namespace_selector() -> None:
    parsed = parse_pool(
        {
            "metadata": {"name": "a"},
            "spec": {
                "addresses": ["10.0.0.0/30"],
                "namespaceSelector": {"matchLabels": {"t": "1"}},
            },
        }
    )
    assert isinstance(parsed, Pool)
    assert reason(decide(req("x"), [parsed], Ledger(), {})) == "NoPool"
    assert allocated(decide(req("x"), [parsed], Ledger(), {"t": "1"})) == ("10.0.0.1",)


def test_requested_address_outside_the_pools() -> None:
    decision = decide(
        req("x", requested=(ip("10.1.0.1"),)), [pool("a", "10.0.0.0/30")], Ledger(), {}
    )
    assert reason(decision) == "AddressNotInPool"


def test_requested_address_in_use() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    give(ledger, req("x", requested=(ip("10.0.0.2"),)), pools)
    assert (
        reason(decide(req("y", requested=(ip("10.0.0.2"),)), pools, ledger, {})) == "AddressInUse"
    )


def test_same_sharing_key_shares_one_address_when_ports_differ() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    web = req("web", sharing_key="k", ports=frozenset({("TCP", 80)}))
    dns = req("dns", sharing_key="k", ports=frozenset({("UDP", 53)}))
    assert give(ledger, web, pools) == give(ledger, dns, pools) == ("10.0.0.0",)


def test_same_sharing_key_with_a_port_clash_takes_another_address() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    give(ledger, req("a", sharing_key="k", ports=frozenset({("TCP", 80)})), pools)
    other = req("b", sharing_key="k", ports=frozenset({("TCP", 80)}))
    assert give(ledger, other, pools) == ("10.0.0.1",)
    asked = req("c", sharing_key="k", ports=frozenset({("TCP", 80)}), requested=(ip("10.0.0.0"),))
    assert reason(decide(asked, pools, ledger, {})) == "SharingPortClash"


def test_a_sharer_whose_ports_come_to_clash_moves_and_says_why() -> None:
    """As MetalLB's ClearAssignment: the Service that changed leaves the shared address, and
    the decision says which address it left and for whom."""
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    web = req("web", sharing_key="k", ports=frozenset({("TCP", 80)}))
    dns = req("dns", sharing_key="k", ports=frozenset({("UDP", 53)}))
    assert give(ledger, web, pools) == give(ledger, dns, pools) == ("10.0.0.0",)
    changed = req("dns", sharing_key="k", ports=frozenset({("TCP", 80)}), current=(ip("10.0.0.0"),))
    decision = decide(changed, pools, ledger, {})
    assert allocated(decision) == ("10.0.0.1",)
    assert isinstance(decision, Allocation)
    assert decision.notes == (
        "10.0.0.0 left: this Service's ports or sharing key no longer let it share the address"
        " with ns/web",
    )
    hold(ledger, decision)
    moved = req("dns", sharing_key="k", ports=frozenset({("TCP", 80)}), current=(ip("10.0.0.1"),))
    again = decide(moved, pools, ledger, {})
    assert isinstance(again, Allocation)
    assert again.notes == ()


def test_different_sharing_keys_never_share() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    give(ledger, req("a", sharing_key="k"), pools)
    assert (
        reason(decide(req("b", sharing_key="j", requested=(ip("10.0.0.0"),)), pools, ledger, {}))
        == "AddressInUse"
    )


def test_kube_vip_allow_share_shares_without_a_key() -> None:
    pools = [pool("kv", "10.0.0.0/30", allow_share=True)]
    ledger = Ledger()
    first = give(ledger, req("a", ports=frozenset({("TCP", 80)})), pools)
    assert give(ledger, req("b", ports=frozenset({("TCP", 443)})), pools) == first


def test_family_unavailable_for_single_stack_ipv6() -> None:
    decision = decide(req("x", families=(6,)), [pool("a", "10.0.0.0/30")], Ledger(), {})
    assert reason(decision) == "FamilyUnavailable"


def test_dual_stack_gets_one_address_per_family_in_order() -> None:
    pools = [pool("a", "10.0.0.0/30", "fd00::/126")]
    request = req("x", families=(6, 4), family_policy="RequireDualStack")
    assert allocated(decide(request, pools, Ledger(), {})) == ("fd00::", "10.0.0.0")


def test_prefer_dual_stack_keeps_the_family_that_has_room() -> None:
    pools = [pool("a", "10.0.0.0/32", "fd00::/128")]
    ledger = Ledger()
    give(ledger, req("v6", families=(6,)), pools)
    request = req("x", families=(4, 6), family_policy="PreferDualStack")
    decision = decide(request, pools, ledger, {})
    assert allocated(decision) == ("10.0.0.0",)
    # the family it lacks is said, and the Service waits for it (see run: `waiting`)
    assert isinstance(decision, Allocation)
    assert decision.wanting == (
        "no free IPv6 address in a: PreferDualStack, given when one is free",
    )
    hold(ledger, decision)
    release(ledger, "ns/v6")
    held = req("x", families=(4, 6), family_policy="PreferDualStack", current=(ip("10.0.0.0"),))
    again = decide(held, pools, ledger, {})
    assert allocated(again) == ("10.0.0.0", "fd00::")
    assert isinstance(again, Allocation)
    assert again.wanting == ()


def test_conflicting_requests_are_reported() -> None:
    decision = decide(
        req("x", problems=("two annotations disagree",)), [pool("a", "10.0.0.0/30")], Ledger(), {}
    )
    assert reason(decision) == "ConflictingRequests"


def test_release_frees_the_address_for_the_next_service() -> None:
    pools = [pool("a", "10.0.0.0/32")]
    ledger = Ledger()
    give(ledger, req("x"), pools)
    assert release(ledger, "ns/x") == (ip("10.0.0.0"),)
    assert give(ledger, req("y"), pools) == ("10.0.0.0",)


def test_release_keeps_what_a_service_no_longer_ours_still_shows() -> None:
    """Not ours any more (the class settings changed), never touched: what its status still
    shows stays held, the rest is freed."""
    pools = [pool("a", "10.0.0.0/32", "fd00::/128")]
    ledger = Ledger()
    give(ledger, req("x", families=(4, 6), family_policy="RequireDualStack"), pools)
    assert release(ledger, "ns/x", {ip("10.0.0.0")}) == (ip("fd00::"),)
    assert ledger.held_by("ns/x") == (ip("10.0.0.0"),)
    assert reason(decide(req("y"), pools, ledger, {})) == "PoolExhausted"
    assert release(ledger, "ns/x", ()) == (ip("10.0.0.0"),)
    assert give(ledger, req("y"), pools) == ("10.0.0.0",)


def test_rebuilt_ledger_keeps_the_first_claim_and_notes_the_second() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    claims = [req("old", current=(ip("10.0.0.1"),)), req("new", current=(ip("10.0.0.1"),))]
    ledger, notes = build_ledger(claims, pools)
    assert ledger.held_by("ns/old") == (ip("10.0.0.1"),)
    assert ledger.held_by("ns/new") == ()
    assert len(notes) == 1
    assert notes[0].startswith("ns/new:")
    assert allocated(decide(claims[1], pools, ledger, {})) == ("10.0.0.0",)


def test_first_free_in_a_slash_64_skips_held_addresses_without_a_scan() -> None:
    pools = [pool("big", "fd00::/64")]
    ledger = Ledger()
    for name in "abc":
        give(ledger, req(name, families=(6,)), pools)
    assert ledger.used_in(pools[0].ranges[0]) == 3
    assert give(ledger, req("d", families=(6,)), pools) == ("fd00::3",)


def test_an_address_listed_twice_is_held_once_and_released_cleanly() -> None:
    pools = [pool("a", "10.0.0.0/30")]
    ledger = Ledger()
    give(ledger, req("x", requested=(ip("10.0.0.1"), ip("10.0.0.1"))), pools)
    assert ledger.held_by("ns/x") == (ip("10.0.0.1"),)
    assert release(ledger, "ns/x") == (ip("10.0.0.1"),)
    assert ledger.holders(ip("10.0.0.1")) == []


def test_a_service_without_ports_never_shares() -> None:
    pools = [pool("kv", "10.0.0.0/31", allow_share=True)]
    ledger = Ledger()
    give(ledger, req("a"), pools)
    assert give(ledger, req("b", ports=frozenset({("TCP", 80)})), pools) == ("10.0.0.1",)


def test_first_free_jumps_over_a_long_run_of_held_addresses() -> None:
    ledger = Ledger()
    base = int(ip("fd00::"))
    for offset in range(5000):
        ledger.hold(
            [(ipaddress.IPv6Address(base + offset), Holder(f"ns/{offset}", None, frozenset()))]
        )
    span = AddressRange(6, base, base + 2**64 - 1)
    assert ledger.first_free(span) == ipaddress.IPv6Address(base + 5000)
    assert ledger.first_free(AddressRange(6, base, base + 4999)) is None
    assert (
        ledger.first_free(AddressRange(6, base - 10, base + 4999), descending=True)
        == ip("fd00::") - 1
    )


def test_a_named_pool_is_the_only_one_tried() -> None:
    """MetalLB's controller tests "request IP from specific pool" and "switch to a different
    specific pool": the annotation picks the pool, a held address of another pool stays."""
    pools = [pool("pool1", "10.0.0.1-10.0.0.1"), pool("pool5", "10.5.0.1-10.5.0.9")]
    assert allocated(decide(req("a", pool="pool5"), pools, Ledger(), {})) == ("10.5.0.1",)
    assert allocated(decide(req("b"), pools, Ledger(), {})) == ("10.0.0.1",)
    held = req("a", pool="pool1", current=(ip("10.5.0.1"),))
    assert allocated(decide(held, pools, Ledger(), {})) == ("10.5.0.1",)  # nothing taken back


def test_a_named_pool_must_exist_and_select_the_service() -> None:
    parsed = parse_pool(
        {
            "metadata": {"name": "scoped"},
            "spec": {
                "addresses": ["10.5.0.1-10.5.0.9"],
                "namespaceSelector": {"matchLabels": {"x": "y"}},
            },
        }
    )
    assert isinstance(parsed, Pool)
    scoped = parsed
    pools = [pool("pool1", "10.0.0.1-10.0.0.9"), scoped]
    missing = decide(req("a", pool="nope"), pools, Ledger(), {})
    assert reason(missing) == "NoPool"
    assert isinstance(missing, Problem)
    assert "pool nope, which ns/a names" in missing.message
    assert reason(decide(req("a", pool="scoped"), pools, Ledger(), {})) == "NoPool"
    assert allocated(decide(req("a", pool="scoped"), pools, Ledger(), {"x": "y"})) == ("10.5.0.1",)
    asked = req("a", pool="pool1", requested=(ip("10.5.0.2"),))
    assert reason(decide(asked, pools, Ledger(), {"x": "y"})) == "AddressNotInPool"


def test_at_equal_priority_a_pool_with_a_selector_comes_first() -> None:
    """MetalLB's TestControllerMutation "request IP for service from no priority namespace
    specific ip pool": a pool pinned to the namespace wins over a general one."""
    pinned = parse_pool({"metadata": {"name": "z-team"}, "spec": {
        "addresses": ["10.9.0.1-10.9.0.9"],
        "namespaceSelector": {"matchLabels": {"team": "a"}}}})  # fmt: skip
    assert isinstance(pinned, Pool)
    pools = [pool("a-general", "10.0.0.1-10.0.0.9"), pinned]
    assert allocated(decide(req("x"), pools, Ledger(), {"team": "a"})) == ("10.9.0.1",)
    assert allocated(decide(req("x"), pools, Ledger(), {})) == ("10.0.0.1",)
