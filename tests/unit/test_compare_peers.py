"""The pure parts of `make bench-compare`'s LoadBalancer comparison: the rows against several
peers and their goal (tests/bench/compare_peers.py), what the watch makes of the Services it
sees (tests/bench/lb_watch.py `AddressBook`), the run's numbers and the settings."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench import compare_lb, compare_stats, plot_data
from tests.bench import compare_peers as c
from tests.bench.lb_watch import AddressBook, Request, addresses, count, wanted


# ------------------------------------------------------------------ rows and goals
def test_a_row_is_met_when_ours_is_at_least_as_good_as_every_peer_with_a_number() -> None:
    (row,) = c.rows({"lb_addressed_s": {"ours": [5.0, 6.0, 4.0], "metallb": [7.0, 8.0],
                                        "kube-vip-cp": []}})  # fmt: skip
    assert row.median("ours") == 5.0
    assert row.ratio("metallb") == pytest.approx(5.0 / 7.5)
    assert row.ratio("kube-vip-cp") is None
    assert row.behind() == ()
    assert row.verdict == "met"


def test_a_row_behind_one_peer_is_missed_and_says_which() -> None:
    (row,) = c.rows({"lb_gone_s": {"ours": [10.3], "metallb": [7.4], "kube-vip-cp": [60.0]}})
    assert row.behind() == ("metallb",)
    assert row.verdict == "missed"
    assert c.verdict_text(row) == "**missed** (behind MetalLB 1.39×)"


def test_a_tie_is_ahead_and_higher_is_better_turns_the_comparison_round() -> None:
    assert c.is_ahead(3.0, 3.0, "lower")
    assert c.is_ahead(3.0, 3.0, "higher")
    assert c.is_ahead(2.0, 3.0, "lower")
    assert not c.is_ahead(2.0, 3.0, "higher")
    faster = c.PeerMetric("x", "Services per second", "1/s", better="higher")
    row = c.Row(faster, {"ours": (200.0,), "metallb": (100.0,), "kube-vip-cp": (1.25,)})
    assert row.verdict == "met"
    assert faster.goal_text == "≥ 1× every peer"
    slower = c.Row(faster, {"ours": (50.0,), "metallb": (100.0,), "kube-vip-cp": ()})
    assert slower.behind() == ("metallb",)


def test_a_peer_at_zero_is_beaten_only_by_zero() -> None:
    """Restart writes: a peer that writes nothing leaves ours no ratio, but a verdict."""
    zero: dict[str, Any] = {"ours": [0.0], "metallb": [0.0]}
    (row,) = c.rows({"lb_restart_writes": zero})
    assert (row.ratio("metallb"), row.verdict) == (None, "met")
    (row,) = c.rows({"lb_restart_writes": {"ours": [5.0], "metallb": [0.0]}})
    assert row.verdict == "missed"


@pytest.mark.parametrize(
    ("key", "ours", "want"),
    [("lb_duplicates", [0.0, 0.0], "met"), ("lb_duplicates", [0.0, 1.0], "missed"),
     ("lb_restart_changed", [0.0], "met"), ("lb_released_s", [1.3], "–")],
)  # fmt: skip
def test_correctness_rows_want_zero_and_ours_only_rows_have_no_goal(
    key: str, ours: list[float], want: str
) -> None:
    (row,) = c.rows({key: {"ours": ours}})
    assert row.verdict == want


def test_without_a_peer_number_an_ahead_row_cannot_be_judged() -> None:
    (row,) = c.rows({"lb_cpu_ms_per_service": {"ours": [3.0], "metallb": [None]}})
    assert row.verdict == "n/a"


def test_rows_keep_table_order_drop_missing_rounds_and_unknown_keys() -> None:
    found = c.rows({
        "lb_gone_s": {"ours": [1.0]}, "lb_addressed_s": {"ours": [2.0, None]},
        "unknown": {"ours": [1.0]}, "lb_rss_peak_mib": {"ours": [None]},
    })  # fmt: skip
    assert [r.metric.key for r in found] == ["lb_addressed_s", "lb_gone_s"]
    assert found[0].values["ours"] == (2.0,)


# ------------------------------------------------------------------ text
def test_a_cell_is_the_median_with_the_spread_and_says_when_an_impl_did_not_run() -> None:
    assert c.cell((2.9, 3.0, 3.1), ran=True) == "3.00 (2.90–3.10)"
    assert c.cell((4.0, 4.0), ran=True) == "4.00"
    assert c.cell((), ran=True) == "–"
    assert c.cell((), ran=False) == "not run"


def test_the_table_has_a_column_per_implementation_and_a_ratio_per_peer() -> None:
    found = c.rows({"lb_addressed_s": {"ours": [5.2], "metallb": [7.2], "kube-vip-cp": [792.0]}})
    head, align, line = c.table(found, list(c.IMPLS)).splitlines()
    assert head == ("| metric | unit | better | ours | MetalLB | kube-vip-cp | ours/MetalLB | "
                    "ours/kube-vip-cp | goal | goal met? |")  # fmt: skip
    assert align.count("|") == head.count("|") == line.count("|")
    assert "| 5.20 | 7.20 | 792 | 0.72× | 0.00657× | ≤ 1× every peer | **met** |" in line
    assert [c.ratio_text(v) for v in (None, 0.0, 0.014, 0.0016)] == ["–", "0.00×", "0.01×",
                                                                     "0.00160×"]  # fmt: skip


def test_the_goal_is_judged_at_5000_services_only() -> None:
    met = c.rows({"lb_addressed_s": {"ours": [16.9], "metallb": [50.2]},
                  "lb_gone_s": {"ours": [114.6], "metallb": [41.0]}})  # fmt: skip
    text = c.goal_summary({1000: [], 5000: met})
    assert text.startswith("**Goal at 5 000 Services, ahead of every peer on every row: missed**")
    assert "(1 of 2 rows; behind on: delete all → all gone from the API)." in text
    assert "not measured in this run** (sizes run: 200)" in c.goal_summary({200: met})


RESULT: dict[str, Any] = {
    "machine": {"when": "2026-12-02T15:00:00+00:00", "git": "abc1234", "nproc": 2,
                "kube_apiserver": "v1.37.1", "loadavg_start": [3.0, 2.0, 1.0]},
    "settings": {**compare_stats.Settings().as_dict(), "lb_services": [200, 5000]},
    "originals": {"metallb": {"project": "github.com/metallb/metallb", "version": "v0.16.1",
                              "key": "fcb7968afd8f"}},
    "sizes": {
        "5000": {"impls": ["ours", "metallb"],
                 "rounds": {"lb_addressed_s": {"ours": [16.9], "metallb": [50.2]}}},
        "200": {"impls": list(c.IMPLS),
                "rounds": {"lb_addressed_s": {"ours": [0.5], "metallb": [0.4],
                                              "kube-vip-cp": [160.0]}}},
    },
    "loadavg_samples": [[2.5, 2.0, 1.0], [3.5, 2.0, 1.0]],
    "wall_s": 600.0,
}  # fmt: skip


def test_the_section_goes_between_its_markers_smallest_size_first() -> None:
    page = f"a\n{compare_stats.marker('lb')}\nold\n{compare_stats.marker('lb', end=True)}\nz\n"
    out = c.render_page(page, RESULT)
    assert out.startswith("a\n<!-- bench-compare:lb:begin -->\n**Goal at 5 000 Services")
    assert out.index("**200 Services**") < out.index("**5 000 Services** (kube-vip-cp not run")
    assert "`BENCH_LB_SERVICES=200,5000`" in out
    assert "MetalLB github.com/metallb/metallb" in out
    assert "old" not in out
    assert out.endswith("<!-- bench-compare:lb:end -->\nz\n")


def test_the_plot_draws_every_implementation_that_ran_per_size() -> None:
    panels = plot_data.peer_panels(RESULT)
    assert [p.title for p in panels] == [
        "last create → all addressed, 200 Services (missed)",
        "last create → all addressed, 5,000 Services (met)",
    ]
    assert [s.name for s in panels[0].columns] == ["ours", "MetalLB", "kube-vip-cp"]  # type: ignore[union-attr]
    assert [s.name for s in panels[1].columns] == ["ours", "MetalLB"]  # type: ignore[union-attr]


# ------------------------------------------------------------------ the watch
def test_the_book_times_each_service_addressed_once_it_holds_all_it_asked_for() -> None:
    book = AddressBook()
    book.seen("a", (), 2, 1.0)
    book.seen("a", ("10.0.0.1",), 2, 2.0)
    assert "a" not in book.addressed_at
    book.seen("a", ("10.0.0.1", "fd00::1"), 2, 3.0)
    book.seen("a", ("10.0.0.1", "fd00::1"), 2, 4.0)
    assert book.addressed_at == {"a": 3.0}
    assert (book.live, book.changed, book.duplicates) == (1, 0, 0)
    book.gone("a", 5.0)
    assert (book.live, book.gone_at, book.holders) == (0, {"a": 5.0}, {})


def test_one_address_on_two_live_services_is_a_duplicate_until_one_is_gone() -> None:
    book = AddressBook()
    book.seen("a", ("10.0.0.1",), 1, 1.0)
    book.seen("b", ("10.0.0.1",), 1, 2.0)
    assert book.duplicates == 1
    assert book.summary(0.0)["incidents"] == [
        {"kind": "duplicate", "address": "10.0.0.1", "services": ("a", "b"), "at": 2.0}
    ]
    book.gone("a", 3.0)
    book.seen("c", ("10.0.0.2",), 1, 4.0)
    book.gone("b", 5.0)
    book.seen("d", ("10.0.0.1",), 1, 6.0)  # released, then given again: fine
    assert book.duplicates == 1


def test_an_address_taken_from_a_live_service_is_a_change() -> None:
    book = AddressBook()
    book.seen("a", ("10.0.0.1", "fd00::1"), 2, 1.0)
    book.seen("a", ("fd00::1", "10.0.0.1"), 2, 2.0)  # the same, in another order
    assert book.changed == 0
    book.seen("a", ("10.0.0.2", "fd00::1"), 2, 3.0)
    book.seen("a", (), 2, 4.0)
    assert book.changed == 3  # 10.0.0.1 moved, then both cleared
    assert book.holders == {}


def test_a_resync_forgets_what_is_gone_and_sees_the_rest() -> None:
    book = AddressBook()
    book.seen("a", ("10.0.0.1",), 1, 1.0)
    book.seen("b", ("10.0.0.2",), 1, 1.0)
    book.resync({"b": (("10.0.0.2",), 1), "c": (("10.0.0.3",), 1)}, 2.0)
    assert sorted(book.held) == ["b", "c"]
    assert book.gone_at == {"a": 2.0}
    assert book.addressed_at == {"a": 1.0, "b": 1.0, "c": 2.0}


def test_addresses_come_from_the_status_or_for_kube_vip_from_its_annotation() -> None:
    ingress = [{"ip": "10.0.0.9"}, {"hostname": "x"}]
    svc = {"metadata": {"annotations": {"kube-vip.io/loadbalancerIPs": "10.0.0.1,fd00::1"}},
           "spec": {"ipFamilyPolicy": "PreferDualStack"},
           "status": {"loadBalancer": {"ingress": ingress}}}  # fmt: skip
    assert addresses("kube-vip-cp", svc) == ("10.0.0.1", "fd00::1")
    assert addresses("metallb", svc) == addresses("ours", svc) == ("10.0.0.9",)
    assert addresses("kube-vip-cp", {"metadata": {}}) == ()
    assert (wanted(svc), wanted({"spec": {}})) == (2, 1)


def test_writes_leave_out_access_reviews() -> None:
    asked = [Request(1.0, "create", "selfsubjectrulesreviews"), Request(1.0, "patch", "services"),
             Request(1.0, "list", "services")]  # fmt: skip
    assert count(asked) == 3
    assert count(asked, frozenset({"create", "patch"})) == 1


def test_a_run_gives_one_value_per_row_and_none_where_it_stopped() -> None:
    run = {"services": 200, "addressed_after_last_create_s": 1.5, "allocate_cpu_s": 0.6,
           "allocate_requests": 600, "allocate_writes": 400,
           "watch": {"duplicates": 0}}  # fmt: skip
    values = compare_lb.metric_values(run)
    assert set(values) == {m.key for m in c.METRICS}
    assert (values["lb_cpu_ms_per_service"], values["lb_requests_per_service"]) == (3.0, 3.0)
    assert values["lb_gone_s"] is None
    assert values["lb_duplicates"] == 0


# ------------------------------------------------------------------ settings
def test_the_lb_settings_come_from_bench_variables() -> None:
    env = {"BENCH_LB_SERVICES": "1000,5000", "BENCH_LB_KUBEVIP_MAX": "200",
           "BENCH_LB_ROUNDS": "2"}  # fmt: skip
    got = compare_stats.settings_from_env(env)
    assert (got.lb_services, got.lb_kubevip_max, got.lb_rounds) == ((1000, 5000), 200, 2)
    assert compare_stats.Settings().lb_services == (200,)
    with pytest.raises(ValueError, match=r"BENCH_LB_SERVICES='1000,x' is not a comma list"):
        compare_stats.settings_from_env({"BENCH_LB_SERVICES": "1000,x"})
    with pytest.raises(ValueError, match=r"BENCH_LB_SERVICES='0' must be positive"):
        compare_stats.settings_from_env({"BENCH_LB_SERVICES": "0"})
