"""What the benchmark plots are drawn from (tests/bench/plot_data.py): files chosen, series read."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench import plot_data as d

LATENCY_RSS: dict[str, Any] = {
    "when": "2026-11-21T23:53:33+00:00",
    "git": "926fe95",
    "runs_detail": [
        {
            "start_to_untaint_s": 0.4,
            "warm": {"rss_mib": 31.2},
            "steady": {"rss_mib": 31.4},
            "latencies_s": [0.3, 0.26],
        },
        {
            "start_to_untaint_s": 0.6,
            "warm": {"rss_mib": 31.0},
            "steady": {"rss_mib": 31.3},
            "latencies_s": [0.5],
        },
    ],
}
IPAM: dict[str, Any] = {
    "when": "2026-11-22T00:07:32+00:00",
    "git": "ee6de42",
    "nodes": 2000,
    "creators": 16,
    "create_s": 3.5,
    "all_allocated_after_last_create_s": 36.8,
    "all_allocated_after_first_create_s": 40.3,
    "controller_cpu_total_s": 7.3,
    "controller_rss_mib": 42.3,
    "controller_rss_peak_mib": 42.4,
}


def test_the_newest_file_of_each_kind_is_chosen_by_the_stamp_in_its_name() -> None:
    names = [
        "ipam-scale-5000-20261122T000818.json",
        "ipam-scale-5000-20261123T000000.json",
        "ipam-i27-20261122T000917.json",
        "ipam-i27-20261122T000646.json",
        "notes.json",
        "ipam-i27-20261122T000646.json.tmp",
    ]
    newest = d.newest_by_kind(names)
    assert {k: f.name for k, f in newest.items()} == {
        "ipam-scale-5000": "ipam-scale-5000-20261123T000000.json",
        "ipam-i27": "ipam-i27-20261122T000917.json",
    }


def test_a_kind_may_end_in_digits() -> None:
    name = "ipam-scale-5000-20261122T000818.json"
    assert d.parse_name(name) == d.ResultFile("ipam-scale-5000", "20261122T000818", name)


def test_plots_without_a_result_are_planned_as_skipped() -> None:
    available = d.newest_by_kind(["agent-latency-rss-20261121T235559.json"])
    present, missing = d.plan(available)
    assert [p.name for p in present] == ["agent-latency", "agent-rss"]
    assert "agent-cold-start" in [p.name for p in missing]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (LATENCY_RSS, "git 926fe95, 2026-11-21 23:53 UTC"),
        ({"machine": {"when": "2026-11-22T00:14:41+00:00", "git": "ee6de42"}},
         "git ee6de42, 2026-11-22 00:14 UTC"),
        ({"when": "2026-11-21T23:30:42+00:00"}, "git unknown, 2026-11-21 23:30 UTC"),
    ],
)  # fmt: skip
def test_the_provenance_is_read_from_either_layout_of_machine_facts(
    result: dict[str, Any], expected: str
) -> None:
    assert d.provenance(result) == expected


def test_the_latency_cdf_has_one_curve_per_process_and_one_over_all_changes() -> None:
    (panel,) = d.agent_latency_panels(LATENCY_RSS)
    assert isinstance(panel, d.Curves)
    assert [c.name for c in panel.curves] == ["process 1", "process 2", "all 3 changes"]
    assert panel.curves[0].xs == (0.26, 0.3)
    assert panel.curves[0].ys == (0.5, 1.0)
    assert panel.curves[-1].xs == (0.26, 0.3, 0.5)
    assert [c.emphasis for c in panel.curves] == [False, False, True]
    assert panel.x_refs[0].value == d.AGENT_LATENCY_P99_S


def test_agent_rss_bars_are_warm_and_steady_per_process_with_budget_and_target() -> None:
    (panel,) = d.agent_rss_panels(LATENCY_RSS)
    assert isinstance(panel, d.Bars)
    assert [s.values for s in panel.series] == [(31.2, 31.0), (31.4, 31.3)]
    assert [(r.value, r.style) for r in panel.refs] == [(32.0, "budget"), (25.0, "target")]


def test_cold_start_runs_get_the_budget_of_their_cpu_limit() -> None:
    result = {"runs": {"unlimited": [1.2, 1.4], "cpu_100m": [12.5]}}
    (panel,) = d.cold_start_panels(result)
    assert isinstance(panel, d.Strip)
    assert [c.values for c in panel.columns] == [(1.2, 1.4), (12.5,)]
    assert [(r.value, r.category) for r in panel.refs] == [(5.0, 0), (30.0, 1)]


def test_cold_start_rss_is_a_second_panel_when_recorded() -> None:
    result = {"runs": {"unlimited": [1.2]}, "rss_steady_mib": [31.2, 31.4]}
    _, rss = d.cold_start_panels(result)
    assert isinstance(rss, d.Strip)
    assert rss.columns[0].values == (31.2, 31.4)


def test_deletion_singles_and_batches_are_separated() -> None:
    def run(nodes: int, p50: float) -> dict[str, Any]:
        return {"nodes": nodes, "deleted": nodes, "p50_s": p50, "p95_s": p50 + 0.4,
                "min_s": p50 - 0.6, "max_s": p50 + 0.5}  # fmt: skip

    result = {
        "machine": {},
        "probe_1s": {"runs": [run(1, 1.15), run(1, 1.07), run(200, 4.3)]},
        "probe_default": {"runs": [run(1, 5.1)]},
    }
    singles, batch = d.lifecycle_deletion_panels(result)
    assert isinstance(singles, d.Strip)
    assert [c.values for c in singles.columns] == [(1.15, 1.07), (5.1,)]
    assert isinstance(batch, d.Bars)
    assert batch.series[0].values == pytest.approx((3.7, 4.3, 4.7, 4.8))


def test_ipam_progress_is_a_panel_only_when_recorded() -> None:
    assert not any(isinstance(p, d.Curves) for p in d.ipam_i27_panels(IPAM))
    progress = [[4.9, 322.0], [5.2, 335.0], [40.3, 2000.0]]
    *_, curve_panel = d.ipam_i27_panels({**IPAM, "progress": progress})
    assert isinstance(curve_panel, d.Curves)
    assert curve_panel.curves[0].xs == (4.9, 5.2, 40.3)
    assert curve_panel.curves[0].ys == (322.0, 335.0, 2000.0)
    assert [r.value for r in curve_panel.y_refs] == [2000]


def test_i27_wall_time_budget_is_over_the_after_the_last_creation_bar() -> None:
    wall = d.ipam_i27_panels(IPAM)[0]
    assert isinstance(wall, d.Bars)
    assert wall.series[0].values == (3.5, 36.8, 40.3)
    assert [(r.value, r.category) for r in wall.refs] == [(120.0, 1)]


def test_a_compare_panel_shows_both_implementations_go_median_and_the_goal() -> None:
    from tests.bench import compare_stats as cs  # noqa: PLC0415 - this test alone needs it

    panel = d.compare_panel(cs.BY_KEY["agent_rss_mib"], {"ours": [30.0, None], "go": [40.0]})
    assert [(s.name, s.values) for s in panel.columns] == [("ours", (30.0,)), ("Go", (40.0,))]
    assert [(r.label, r.value, r.style) for r in panel.refs] == [
        ("Go median 40.0", 40.0, "guide"),
        ("goal ≤ 0.9× Go", 36.0, "budget"),
    ]
    assert panel.title.endswith("(met)")


def test_the_join_comparison_is_kept_and_drawn_per_join() -> None:
    (spec,) = [p for p in d.PLOTS if p.kind == "compare-join"]
    assert "compare-join" in d.PLOTTED_KINDS  # copied to docs/bench/data for the tables
    rounds = {"join_register_to_untaint_s": {"ours": [1.8, 1.9], "go": [1.5, 1.4]},
              "join_container_to_untaint_s": {"ours": [0.4, 0.3], "go": [0.06, 0.05]}}  # fmt: skip
    titles = [panel.title for panel in spec.panels({"rounds": rounds})]
    assert titles[0].startswith("kubelet registers → taint removed (real node, DaemonSet)")
    assert len(titles) == 2
