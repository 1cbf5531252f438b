"""Pool choice, allocation, recovery and release, as pure analogs of the
acceptance scenarios I01-I36 (the full scenarios run against a real apiserver later)."""

from __future__ import annotations

import pytest

from local_ccm.ipam.core.allocator import (
    Allocation,
    Allocator,
    Skipped,
    Waiting,
    allocation_order,
    order_pools,
)
from local_ccm.ipam.core.model import ClusterCIDR, default_pool
from tests.unit.ipam.builders import allocator, cc, give, nets, node, one_term, terms

DUAL = {"ipv4": "true", "ipv6": "true"}


def fixture_u(**kw: object) -> Allocator:
    """Default pool from flags, service range, `initial-cc`."""
    alloc = allocator(
        cc("initial-cc", "10.2.0.0/16", "fd00:20:96::/112", 8, one_term(bootstrap="true")),
        reserved=nets("10.94.0.0/24", "2001:db2::/120"),
        **kw,
    )
    alloc.set_pool(default_pool(nets("10.96.0.0/12", "fd00:10:96::/112"), 24, 120), ready=True)
    return alloc


def test_i01_unmatched_node_gets_the_default_pool() -> None:
    alloc = fixture_u()
    assert give(alloc, node("default-node", {"label": "unmatched"})) == (
        "10.96.0.0/24",
        "fd00:10:96::/120",
    )


def test_i02_existing_node_is_recovered_and_the_next_node_gets_the_next_block() -> None:
    alloc = fixture_u()
    [rec] = alloc.recover(
        [node("initial-node", {"bootstrap": "true"}, ["10.2.0.0/24", "fd00:20:96::/120"])]
    )
    assert [owner for _, owner in rec.owners] == ["initial-cc", "initial-cc"]
    assert not rec.foreign
    assert give(alloc, node("bootstrap-node", {"bootstrap": "true"})) == (
        "10.2.1.0/24",
        "fd00:20:96::100/120",
    )


def test_i03_i04_single_stack_pools_give_one_cidr() -> None:
    alloc = fixture_u()
    alloc.set_pool(cc("ipv4-cc", "10.0.0.0/16", "", 8, one_term(ipv4="true")).pool(), ready=True)
    alloc.set_pool(cc("ipv6-cc", "", "fd00:20:100::/112", 8, one_term(ipv6="t")).pool(), ready=True)
    assert give(alloc, node("v4", {"ipv4": "true", "singlestack": "true"})) == ("10.0.0.0/24",)
    assert give(alloc, node("v6", {"ipv6": "t"})) == ("fd00:20:100::/120",)


def test_i05_dual_stack_comes_from_one_pool_ipv4_first() -> None:
    alloc = allocator(cc("d", "192.168.0.0/16", "fd00:30:100::/112", 8, one_term(**DUAL)))
    result = alloc.allocate(node("n", DUAL))
    assert isinstance(result, Allocation)
    assert result.pool == "d"
    assert [c.version for c in result.cidrs] == [4, 6]


def test_i06_released_block_is_refilled_lowest_first() -> None:
    alloc = allocator(cc("d", "192.168.0.0/23", "fd00:30:100::/119", 8, one_term(**DUAL)))
    assert give(alloc, node("n1", DUAL)) == ("192.168.0.0/24", "fd00:30:100::/120")
    assert give(alloc, node("n2", DUAL)) == ("192.168.1.0/24", "fd00:30:100::100/120")
    assert alloc.release("uid-n1", now=0.0) == nets("192.168.0.0/24", "fd00:30:100::/120")
    assert give(alloc, node("n3", DUAL)) == ("192.168.0.0/24", "fd00:30:100::/120")


def test_i09_i10_terminating_pool_is_skipped_but_keeps_its_cidrs() -> None:
    a = cc("a", "192.168.0.0/23", "fd00:30:100::/119", 8, one_term(**DUAL))
    b = cc("b", "10.1.0.0/23", "fd12:30:100::/119", 8, one_term(ipv4="true"))
    alloc = allocator(a, b)
    assert give(alloc, node("n1", DUAL)) == ("192.168.0.0/24", "fd00:30:100::/120")
    alloc.set_pool(a.pool(), ready=False, uid=a.uid)  # deleted: terminating
    assert give(alloc, node("n2", DUAL)) == ("10.1.0.0/24", "fd12:30:100::/120")
    assert alloc.owned_count("a") == 2
    alloc.release("uid-n1", now=0.0)
    assert alloc.owned_count("a") == 0


# ---------------------------------------------------------------- I11 tie-breaks

LABELS = {"ipv4": "true", "ipv6": "true", "match": "single"}
ROW_A = [
    cc("single-label-match-cc", "192.168.0.0/23", "fd00:30:100::/119", 8, one_term(match="single")),
    cc("double-label-match-cc", "10.0.0.0/23", "fd12:30:200::/119", 8, one_term(**DUAL)),
]
ROW_B = [
    ROW_A[0],
    cc("double-label-match-cc", "10.0.0.0/20", "fd12:30:200::/116", 8, one_term(**DUAL)),
    cc("few-alloc-cc", "172.16.0.0/23", "fd34:30:100::/119", 8, one_term(**DUAL)),
]
ROW_C = [
    *ROW_B,
    cc("low-pernodehostbits-cc", "172.31.0.0/24", "fd35:30:100::/120", 7, one_term(**DUAL)),
]
AB = {"apv4": "true", "bpv6": "true"}
ROW_D = [*ROW_C, cc("low-alpha-cc", "192.169.0.0/24", "fd12:40:100::/120", 7, one_term(**AB))]
ROW_E = [*ROW_D, cc("low-ip-cc", "10.1.0.0/24", "fd00:10:100::/120", 7, one_term(**AB))]


@pytest.mark.parametrize(
    ("pools", "labels", "expected"),
    [
        pytest.param(ROW_A, LABELS, ("10.0.0.0/24", "fd12:30:200::/120"), id="a-P0"),
        pytest.param(ROW_B, LABELS, ("172.16.0.0/24", "fd34:30:100::/120"), id="b-P1"),
        pytest.param(ROW_C, LABELS, ("172.31.0.0/25", "fd35:30:100::/121"), id="c-P2"),
        pytest.param(ROW_D, {**LABELS, **AB}, ("192.169.0.0/25", "fd12:40:100::/121"), id="d-P3"),
        pytest.param(ROW_E, {**LABELS, **AB}, ("10.1.0.0/25", "fd00:10:100::/121"), id="e-P4"),
    ],
)
def test_i11_tie_breaks(
    pools: list[ClusterCIDR], labels: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert give(allocator(*pools), node("n", labels)) == expected


def test_i11_row_f_complete_tie_is_broken_by_name() -> None:
    spec = ("10.1.0.0/24", "fd00:10:100::/120", 7, one_term(match="single"))
    alloc = allocator(cc("tie-b", *spec), cc("tie-a", *spec))
    result = alloc.allocate(node("n", LABELS))
    assert isinstance(result, Allocation)
    assert (result.pool, tuple(map(str, result.cidrs))) == (
        "tie-a",
        ("10.1.0.0/25", "fd00:10:100::/121"),
    )
    alloc.commit("uid-n")
    usage_a, usage_b = alloc.usage("tie-a"), alloc.usage("tie-b")
    assert usage_a is not None
    assert usage_b is not None
    assert (usage_a.nodes, usage_b.nodes) == (1, 0)
    assert usage_b.families[0].unavailable == 1  # the shared range's block is taken


def test_p2_ipv6_only_pool_ranks_by_its_ipv6_prefix() -> None:
    v6 = cc("v6", "", "fd00::/112", 8, one_term(x="1"))  # /120 blocks, 256 of them
    v4 = cc("v4", "10.0.0.0/16", "", 8, one_term(x="1"))  # /24 blocks, 256 of them
    order = order_pools([v4.pool(), v6.pool()], node("n", {"x": "1"}))
    assert [p.name for p in order] == ["v6", "v4"]


def test_p4_compares_pool_cidr_text_as_strings() -> None:
    a = cc("a", "10.2.0.0/16", "", 8, one_term(x="1"))
    b = cc("b", "10.10.0.0/16", "", 8, one_term(x="1"))
    assert [p.name for p in order_pools([a.pool(), b.pool()], node("n", {"x": "1"}))] == ["b", "a"]


def test_catch_alls_come_after_selector_pools_sorted_and_the_default_last() -> None:
    empty_list = cc("all", "10.53.0.0/24", "", 6, {"nodeSelectorTerms": []})
    big_catch = cc("big", "10.60.0.0/16", "", 8)
    small_catch = cc("small", "10.61.0.0/23", "", 8)
    default = default_pool(nets("10.96.0.0/12"), 24, 64)
    pools = [default, big_catch.pool(), small_catch.pool(), empty_list.pool()]
    assert [p.name for p in order_pools(pools, node("n"))] == [
        "all",
        "small",
        "big",
        "default-cluster-cidr",
    ]


# ---------------------------------------------------------------- fixed bugs


def test_i12_or_terms_and_the_legacy_switch() -> None:
    or_cc = cc("or-cc", "10.50.0.0/23", "", 8, terms({"pool": "a"}, {"pool": "b"}))
    assert give(fixture_u(), node("b", {"pool": "b"}))[0] == "10.96.0.0/24"  # no or-cc yet
    alloc = fixture_u()
    alloc.set_pool(or_cc.pool(), ready=True, uid=or_cc.uid)
    assert give(alloc, node("b", {"pool": "b"})) == ("10.50.0.0/24",)
    legacy = fixture_u(legacy_and_terms=True)
    legacy.set_pool(or_cc.pool(), ready=True, uid=or_cc.uid)
    assert give(legacy, node("b2", {"pool": "b"})) == ("10.96.0.0/24", "fd00:10:96::/120")


def test_i13_match_fields_select_by_node_name() -> None:
    name_cc = cc(
        "name-cc",
        "10.51.0.0/24",
        "",
        4,
        {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}]}
            ]
        },
    )
    alloc = fixture_u()
    alloc.set_pool(name_cc.pool(), ready=True, uid=name_cc.uid)
    assert give(alloc, node("node-x")) == ("10.51.0.0/28",)
    assert give(alloc, node("node-y"))[0] == "10.96.0.0/24"


def test_i14_empty_term_matches_nothing_empty_list_everything() -> None:
    alloc = fixture_u()
    for pool in (
        cc("empty-term-cc", "10.52.0.0/24", "", 8, {"nodeSelectorTerms": [{}]}),
        cc("all-cc", "10.53.0.0/24", "", 6, {"nodeSelectorTerms": []}),
    ):
        alloc.set_pool(pool.pool(), ready=True, uid=pool.uid)
    assert give(alloc, node("n", {"x": "y"})) == ("10.53.0.0/26",)


def test_i15_terminating_catch_all_is_not_used() -> None:
    catch = cc("catch", "10.54.0.0/23", "", 8)
    alloc = allocator(catch)
    assert give(alloc, node("a")) == ("10.54.0.0/24",)
    alloc.set_pool(catch.pool(), ready=False, uid=catch.uid)
    waiting = alloc.allocate(node("b"))
    assert waiting == Waiting("b", "NoMatchingClusterCIDR")
    alloc.release("uid-a", now=0.0)
    assert alloc.owned_count("catch") == 0
    alloc.remove_pool("catch")
    assert alloc.allocate(node("b")) == Waiting("b", "NoMatchingClusterCIDR")


def test_i16_cidr_of_a_family_the_pool_lacks_is_reserved_and_unowned() -> None:
    alloc = allocator(cc("v4-catch", "10.60.0.0/16", "", 8))
    [rec] = alloc.recover([node("legacy-dual", cidrs=["10.60.0.0/24", "fd00:60::/120"])])
    assert rec.owners == ((nets("10.60.0.0/24")[0], "v4-catch"), (nets("fd00:60::/120")[0], None))
    assert rec.unowned == nets("fd00:60::/120")
    assert alloc.ledger.unowned_count() == 1
    usage = alloc.usage("v4-catch")
    assert usage is not None
    assert (usage.nodes, usage.families[0].allocated) == (1, 1)
    assert give(alloc, node("new")) == ("10.60.1.0/24",)


def test_i17_partial_exhaustion_reserves_nothing() -> None:
    short = cc("short-v6", "10.70.0.0/22", "fd00:70::/119", 8, one_term(grp="short"))
    alloc = allocator(short)
    give(alloc, node("n1", {"grp": "short"}))
    give(alloc, node("n2", {"grp": "short"}))
    for _ in range(3):  # retries of a waiting Node leak nothing (upstream leaked IPv4 each time)
        assert alloc.allocate(node("n3", {"grp": "short"})) == Waiting(
            "n3", "Exhausted", ("short-v6",), (("short-v6", 6),)
        )
    usage = alloc.usage("short-v6")
    assert usage is not None
    v4, v6 = usage.families
    assert (v4.allocated, v4.free, v4.unavailable) == (2, 2, 0)
    assert (v6.allocated, v6.free) == (2, 0)
    assert usage.exhausted_versions == (6,)
    alloc.release("uid-n1", now=0.0)
    assert give(alloc, node("n3", {"grp": "short"})) == ("10.70.0.0/24", "fd00:70::/120")


def test_i18_node_keeps_its_block_until_it_is_released() -> None:
    alloc = allocator(cc("fin", "10.71.0.0/23", "", 8, one_term(grp="fin")))
    give(alloc, node("N", {"grp": "fin"}))
    give(alloc, node("M", {"grp": "fin"}))
    # N is terminating (deletionTimestamp): the loop does not release; P waits.
    assert isinstance(alloc.allocate(node("P", {"grp": "fin"})), Waiting)
    alloc.release("uid-N", now=0.0)  # N is gone
    assert give(alloc, node("P", {"grp": "fin"})) == ("10.71.0.0/24",)


def test_i19_relabelled_node_releases_into_its_recorded_pool() -> None:
    a = cc("a", "10.72.0.0/23", "", 8, one_term(team="a"))
    h = cc("h", "10.73.0.0/24", "", 8, one_term(team="b", tier="gold"))
    alloc = allocator(a, h)
    give(alloc, node("x", {"team": "a"}))
    relabelled = node("x", {"team": "b", "tier": "gold"}, ["10.72.0.0/24"])
    assert alloc.allocate(relabelled) == Skipped("x", "HasCIDRs")
    assert alloc.record(relabelled).changed is False
    assert alloc.owned_count("a") == 1
    alloc.release("uid-x", now=0.0)
    assert alloc.owned_count("a") == 0
    assert give(alloc, node("y", {"team": "a"})) == ("10.72.0.0/24",)


def test_i20_vanished_pool_leaves_its_cidrs_reserved_and_unowned() -> None:
    gone = cc("gone-cc", "10.75.0.0/23", "", 8, one_term(g="2"))
    alloc = allocator(gone)
    alloc.recover([node("p", {"g": "2"}, ["10.75.0.0/24"])])
    assert alloc.remove_pool("gone-cc") == ("p",)
    assert alloc.ledger.unowned_count() == 1
    assert alloc.allocate(node("q", {"g": "2"})) == Waiting("q", "NoMatchingClusterCIDR")
    again = cc("again-cc", "10.75.0.0/23", "", 8, one_term(g="2"))
    alloc.set_pool(again.pool(), ready=True, uid=again.uid)
    assert give(alloc, node("q", {"g": "2"})) == ("10.75.1.0/24",)


def test_recreated_pool_under_the_same_name_is_a_new_object() -> None:
    first = cc("p", "10.75.0.0/23", "", 8)
    alloc = allocator(first)
    give(alloc, node("a"))
    assert alloc.set_pool(first.pool(), ready=True, uid="another-uid") == ("a",)
    assert alloc.owned_count("p") == 0
    assert give(alloc, node("b")) == ("10.75.1.0/24",)


def test_i21_cidr_outside_the_matching_pools_is_owned_by_containment() -> None:
    alloc = allocator(cc("x-cc", "10.80.0.0/16", "", 8, one_term(team="x")))
    [rec] = alloc.recover([node("legacy", {}, ["10.80.0.0/24"])])
    assert rec.owners == ((nets("10.80.0.0/24")[0], "x-cc"),)
    assert give(alloc, node("new", {"team": "x"})) == ("10.80.1.0/24",)
    usage = alloc.usage("x-cc")
    assert usage is not None
    assert usage.nodes == 2


def test_recovery_owner_prefers_the_candidate_order_then_name() -> None:
    wide = cc("a-wide", "10.0.0.0/8", "", 8)  # catch-all, contains everything
    team = cc("z-team", "10.1.0.0/16", "", 8, one_term(team="z"))
    alloc = allocator(wide, team)
    [matched, unmatched] = alloc.recover(
        [node("m", {"team": "z"}, ["10.1.0.0/24"]), node("u", {}, ["10.1.1.0/24"])]
    )
    assert matched.owners[0][1] == "z-team"  # first in m's candidate order
    assert unmatched.owners[0][1] == "a-wide"  # a-wide matches u (catch-all) and contains it


def test_i22_restart_recovery_fills_holes_lowest_first() -> None:
    pool = cc("r", "10.76.0.0/22", "", 8, one_term(r="1"))
    alloc = allocator(pool)
    alloc.recover(
        [node("r1", {"r": "1"}, ["10.76.0.0/24"]), node("r3", {"r": "1"}, ["10.76.2.0/24"])]
    )
    assert give(alloc, node("r4", {"r": "1"})) == ("10.76.1.0/24",)
    assert give(alloc, node("r5", {"r": "1"})) == ("10.76.3.0/24",)
    usage = alloc.usage("r")
    assert usage is not None
    assert usage.families[0].allocated == 4


def test_i23_i24_exhaustion_then_a_new_pool_or_a_release() -> None:
    small = cc("small", "10.77.0.0/23", "", 8, one_term(e="1"))
    alloc = allocator(small)
    give(alloc, node("n1", {"e": "1"}))
    give(alloc, node("n2", {"e": "1"}))
    assert alloc.allocate(node("n3", {"e": "1"})) == Waiting(
        "n3", "Exhausted", ("small",), (("small", 4),)
    )
    more = cc("more", "10.78.0.0/24", "", 8, one_term(e="1"))
    alloc.set_pool(more.pool(), ready=True, uid=more.uid)
    assert give(alloc, node("n3", {"e": "1"})) == ("10.78.0.0/24",)
    alloc.release("uid-n1", now=0.0)
    assert give(alloc, node("n4", {"e": "1"})) == ("10.77.0.0/24",)


def test_i25_reuse_delay_quarantines_released_blocks() -> None:
    alloc = allocator(cc("q", "10.79.0.0/23", "", 8), reuse_delay=10.0)
    give(alloc, node("a"))
    give(alloc, node("b"))
    alloc.release("uid-a", now=100.0)
    assert alloc.ledger.next_expiry() == 110.0
    assert isinstance(alloc.allocate(node("c")), Waiting)
    assert alloc.ledger.expire(now=109.9) is False
    assert isinstance(alloc.allocate(node("c")), Waiting)
    assert alloc.ledger.expire(now=110.0) is True
    assert alloc.ledger.next_expiry() is None
    assert give(alloc, node("c")) == ("10.79.0.0/24",)


def test_i30_overlapping_pools_of_different_sizes_never_share_addresses() -> None:
    big = cc("big-blocks", "10.100.0.0/16", "", 8, one_term(size="big"))
    small = cc("small-blocks", "10.100.0.0/16", "", 6, one_term(size="small"))
    alloc = allocator(big, small)
    assert give(alloc, node("s1", {"size": "small"})) == ("10.100.0.0/26",)
    assert give(alloc, node("b1", {"size": "big"})) == ("10.100.1.0/24",)
    assert give(alloc, node("s2", {"size": "small"})) == ("10.100.0.64/26",)
    usage = alloc.usage("big-blocks")
    assert usage is not None
    assert usage.families[0].unavailable >= 1
    alloc.release("uid-s1", now=0.0)
    assert give(alloc, node("b2", {"size": "big"})) == ("10.100.2.0/24",)  # s2 still in block 0
    alloc.release("uid-s2", now=0.0)
    assert give(alloc, node("b3", {"size": "big"})) == ("10.100.0.0/24",)


def test_i31_foreign_allocation_is_reserved_and_flagged() -> None:
    alloc = allocator(cc("ka", "10.82.0.0/16", "", 8, one_term(k="1")))
    rec = alloc.record(node("foreign", {}, ["10.82.0.0/24"]))
    assert rec.foreign
    assert rec.owners == ((nets("10.82.0.0/24")[0], "ka"),)
    assert give(alloc, node("new", {"k": "1"})) == ("10.82.1.0/24",)


def test_i32_overlapping_node_cidrs_are_all_reserved_and_reported() -> None:
    alloc = allocator(cc("c", "10.83.0.0/23", "", 8))
    rec1, rec2 = alloc.recover([node("c1", {}, ["10.83.0.0/24"]), node("c2", {}, ["10.83.0.0/25"])])
    assert (rec1.conflicts, rec2.conflicts) == ((), ("c1",))
    assert alloc.ledger.conflict_count() == 1
    assert give(alloc, node("n")) == ("10.83.1.0/24",)
    alloc.release("uid-c1", now=0.0)
    assert alloc.ledger.conflict_count() == 0
    assert isinstance(alloc.allocate(node("m")), Waiting)  # c2's /25 still blocks block 0
    alloc.release("uid-c2", now=0.0)
    assert give(alloc, node("m")) == ("10.83.0.0/24",)


def test_i35_terminating_node_without_cidrs_is_left_alone() -> None:
    alloc = allocator(cc("t", "10.85.0.0/24", "", 8, one_term(t="1")))
    assert alloc.allocate(node("t", {"t": "1"}, deleting=True)) == Skipped("t", "Terminating")


# ---------------------------------------------------------------- reservations and writes


def test_service_and_reserved_ranges_are_never_handed_out() -> None:
    alloc = allocator(
        cc("p", "10.0.0.0/22", "", 8),
        reserved=nets("10.0.0.0/25", "10.0.2.0/23", "2001:db8::/120"),
    )
    assert give(alloc, node("a")) == ("10.0.1.0/24",)
    assert isinstance(alloc.allocate(node("b")), Waiting)
    usage = alloc.usage("p")
    assert usage is not None
    assert (usage.families[0].allocated, usage.families[0].unavailable) == (1, 3)


def test_pool_added_later_sees_existing_reservations() -> None:
    alloc = Allocator(reserved=nets("10.0.0.0/24"))
    alloc.recover([node("old", {}, ["10.0.1.0/24"])])
    late = cc("late", "10.0.0.0/22", "", 8)
    alloc.set_pool(late.pool(), ready=True, uid=late.uid)
    assert give(alloc, node("n")) == ("10.0.2.0/24",)


def test_pending_allocation_is_stable_and_abort_frees_it_without_delay() -> None:
    alloc = allocator(cc("p", "10.0.0.0/23", "", 8), reuse_delay=30.0)
    first = alloc.allocate(node("a"))
    assert alloc.allocate(node("a")) == Allocation("a", "uid-a", "p", nets("10.0.0.0/24"))
    assert isinstance(first, Allocation)
    assert alloc.is_pending("uid-a")
    assert alloc.abort("uid-a") == nets("10.0.0.0/24")
    assert alloc.ledger.next_expiry() is None
    assert give(alloc, node("b")) == ("10.0.0.0/24",)
    assert alloc.abort("uid-b") == ()  # committed: never released by abort


def test_own_write_seen_on_the_watch_is_confirmed_not_foreign() -> None:
    alloc = allocator(cc("p", "10.0.0.0/23", "", 8))
    alloc.allocate(node("a"))
    rec = alloc.record(node("a", {}, ["10.0.0.0/24"]))
    assert (rec.foreign, rec.changed) == (False, False)
    assert not alloc.is_pending("uid-a")
    assert alloc.record(node("a")).changed is False  # no CIDRs yet on the watch: nothing


def test_other_writer_replacing_our_pending_write_releases_ours() -> None:
    alloc = allocator(cc("p", "10.0.0.0/23", "", 8))
    alloc.allocate(node("a"))
    rec = alloc.record(node("a", {}, ["10.0.1.0/24"]))
    assert rec.foreign
    assert dict(alloc.ledger.node_cidrs("uid-a")) == {nets("10.0.1.0/24")[0]: "p"}
    assert give(alloc, node("b")) == ("10.0.0.0/24",)


def test_release_of_unknown_uid_is_a_no_op() -> None:
    alloc = allocator(cc("p", "10.0.0.0/23", "", 8))
    assert alloc.release("nobody", now=0.0) == ()
    assert alloc.usage("missing") is None
    assert alloc.remove_pool("missing") == ()


def test_allocation_order_skips_nodes_with_cidrs_and_terminating_ones() -> None:
    nodes = [
        node("b", created="2024-01-02T00:00:00Z"),
        node("a", created="2024-01-02T00:00:00Z"),
        node("c", created="2024-01-01T00:00:00Z"),
        node("d", cidrs=["10.0.0.0/24"]),
        node("e", deleting=True),
    ]
    assert [n.name for n in allocation_order(nodes)] == ["c", "a", "b"]


def test_candidates_follow_label_changes_and_pool_changes() -> None:
    a = cc("a", "10.0.0.0/24", "", 4, one_term(x="1"))
    alloc = allocator(a)
    assert alloc.candidates(node("n", {"x": "1"})) == ("a",)
    assert alloc.candidates(node("n", {"x": "2"})) == ()
    alloc.set_pool(a.pool(), ready=False, uid=a.uid)
    assert alloc.candidates(node("n", {"x": "1"})) == ()


def test_usage_counts_overlapping_owned_cidrs_once_and_follows_releases() -> None:
    alloc = allocator(cc("p", "10.76.0.0/22", "", 8))
    alloc.recover([node("wide", cidrs=["10.76.0.0/23"]), node("dup", cidrs=["10.76.1.0/24"])])
    alloc.record(node("late", cidrs=["10.76.1.0/24"]))  # a conflict: the same block again
    usage = alloc.usage("p")
    assert usage is not None
    assert (usage.nodes, usage.owned_cidrs, usage.families[0].allocated) == (3, 3, 2)
    alloc.release("uid-wide", now=0.0)
    usage = alloc.usage("p")
    assert usage is not None
    assert (usage.nodes, usage.families[0].allocated, usage.families[0].free) == (2, 1, 3)
    assert alloc.remove_pool("p") == ("dup", "late")
    assert alloc.ledger.unowned_count() == 2
    alloc.release("uid-dup", now=0.0)
    assert alloc.ledger.unowned_count() == 1
