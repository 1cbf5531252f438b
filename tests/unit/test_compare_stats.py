"""The pure parts of `make bench-compare`: ratios, spreads, goals, the generated tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import compare_stats as c


def test_ratio_is_ours_over_go_and_absent_without_a_go_number() -> None:
    assert c.ratio(2.0, 4.0) == 0.5
    assert c.ratio(1.0, 0.0) is None
    assert c.ratio(None, 1.0) is None


def test_spread_is_min_and_max_over_rounds() -> None:
    assert c.spread([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert c.spread([]) is None


@pytest.mark.parametrize(
    ("goal", "ours", "ratio", "want"),
    [
        (c.Goal("ratio", 1.0), 5.0, 1.0, "met"),
        (c.Goal("ratio", 1.0), 5.0, 1.01, "missed"),
        (c.Goal("ours", 5), 5.0, 9.0, "met"),
        (c.Goal("ours", 2), 3.0, 0.1, "missed"),
        (c.Goal("ratio", 1.0), 5.0, None, "n/a"),
        (None, 5.0, 1.0, "–"),
    ],
)
def test_verdict(goal: c.Goal | None, ours: float, ratio: float | None, want: str) -> None:
    assert c.verdict(goal, ours, ratio) == want


def test_ipam_cpu_per_node_is_judged_against_three_quarters_of_go() -> None:
    (row,) = [m for m in c.METRICS if m.key == "ipam_cpu_per_1000_same_qps_s"]
    assert row.goal == c.Goal("ratio", 0.75)
    assert row.goal.text == "≤ 0.75× Go"
    assert c.verdict(row.goal, 1.5, 0.75) == "met"
    assert c.verdict(row.goal, 1.6, 0.8) == "missed"


def test_summaries_take_medians_drop_missing_rounds_and_keep_table_order() -> None:
    rounds: dict[str, dict[str, list[float | None]]] = {
        "agent_startup_requests": {"ours": [7.0, 5.0, None], "go": [4.0, 4.0, 4.0]},
        "agent_rss_mib": {"ours": [30.0, 34.0, 32.0], "go": [20.0, 20.0, 21.0]},
        "unknown": {"ours": [1.0]},
    }
    rss, startup = c.summarize(rounds)
    assert rss.metric.key == "agent_rss_mib"
    assert startup.metric.key == "agent_startup_requests"
    assert (rss.ours_median, rss.go_median) == (32.0, 20.0)
    assert rss.ratio == pytest.approx(1.6)
    assert rss.verdict == "missed"
    assert startup.ours == (7.0, 5.0)
    assert startup.verdict == "missed"


def test_the_table_has_a_row_per_metric_with_ratio_spread_and_verdict() -> None:
    (row,) = c.summarize({"agent_idle_cpu_s_per_node_hour": {"ours": [0.5, 0.7], "go": [1.0, 1.2]}})
    table = c.comparison_table([row]).splitlines()
    assert len(table) == 3
    assert (
        "| 0.600 | 1.10 | 0.55× | 0.500–0.700 | 1.00–1.20 | ≤ 1× Go | **met** (0.55×) |"
        in (table[2])
    )


def test_numbers_keep_three_significant_digits() -> None:
    assert [c.number(x) for x in (0.01234, 1.5, 123.4, 12345.6, 0, None)] == [
        "0.0123", "1.50", "123", "12 346", "0", "–",
    ]  # fmt: skip


def test_replace_between_markers_keeps_the_rest_of_the_page() -> None:
    page = f"head\n{c.marker('t')}\nold\n{c.marker('t', end=True)}\ntail\n"
    assert c.replace_between(page, "t", "new") == (
        f"head\n{c.marker('t')}\nnew\n{c.marker('t', end=True)}\ntail\n"
    )
    with pytest.raises(ValueError, match="no <!-- bench-compare:x:begin"):
        c.replace_between(page, "x", "new")


def test_sizing_is_a_line_through_the_two_measured_points_with_headroom() -> None:
    assert c.linear(40.0, 60.0, 200, 1000) == 140.0
    assert c.memory_request(30.0) == 40  # 37.5 rounded up to 8 MiB steps
    summaries = c.summarize({
        "lifecycle_rss_mib": {"ours": [60.0]}, "lifecycle_rss_empty_mib": {"ours": [40.0]},
        "lifecycle_cpu_s_per_hour": {"ours": [36.0]},
        "lifecycle_cpu_empty_s_per_hour": {"ours": [18.0]},
    })  # fmt: skip
    (row,) = c.sizing(summaries, {"lifecycle_nodes": 200})
    assert row.memory_mib == (64, 176, 680)
    assert row.cpu == ("7.5 m", "30.0 m", "130.0 m")
    table = c.sizing_table([row]).splitlines()
    assert table[0].count("|") == table[1].count("|") == table[2].count("|") == 5


def test_settings_come_from_bench_variables_and_the_hour_switch() -> None:
    assert c.settings_from_env({}) == c.Settings()
    got = c.settings_from_env({"BENCH_ROUNDS": "5", "BENCH_IPAM_NODES": "1000", "BENCH_HOUR": "1"})
    assert (got.rounds, got.ipam_nodes, got.agent_hour_s) == (5, 1000, 3600.0)
    assert got.agent_idle_s == c.Settings().agent_idle_s  # the rounds keep their short window
    with pytest.raises(ValueError, match=r"BENCH_ROUNDS='x'.*BENCH_AGENT_CHANGES must be even"):
        c.settings_from_env({"BENCH_ROUNDS": "x", "BENCH_AGENT_CHANGES": "3"})
    with pytest.raises(ValueError, match=r"BENCH_HOUR='one' is not a number of hours"):
        c.settings_from_env({"BENCH_HOUR": "one"})


RESULT = {
    "machine": {
        "when": "2026-11-26T15:00:00+00:00", "git": "abc1234", "nproc": 2, "kernel": "6.18",
        "python": "3.11.7", "go": "go version go1.26.8 linux/amd64",
        "kube_apiserver": "v1.37.1", "pins": {"etcd": "v3.6.16", "kwok": "v0.8.0"},
        "loadavg_start": [6.5, 6.0, 5.0],
    },
    "settings": c.Settings().as_dict(),
    "originals": {"go": {"project": "github.com/cozystack/local-ccm", "version": "v0.2.1",
                         "key": "bb4513b9baac"}},
    "rounds": {"agent_startup_requests": {"ours": [12.0, 12.0], "go": [4.0, 4.0]}},
    "loadavg_samples": [[6.9, 6.0, 5.0], [7.2, 6.1, 5.0]],
    "wall_s": 300.0,
}  # fmt: skip


def test_the_page_is_rendered_between_its_markers_from_the_results() -> None:
    page = "\n".join(
        f"{c.marker(name)}\nstale\n{c.marker(name, end=True)}"
        for name in ("table", "sizing", "run")
    )
    out = c.render_page(page, {"agent": RESULT})
    assert "stale" not in out
    assert "| agent start-up API requests (audit log) | requests | 12.0 | 4.00 | 3.00× |" in out
    assert "**missed** (12.0)" in out
    assert "load average (1 min) 6.90–7.20 over 2 samples" in out
    assert "`BENCH_ROUNDS=3`" in out


def test_the_unreachable_node_meets_the_go_loop_at_spread_phases() -> None:
    from tests.bench.compare_lifecycle import deletion_phase  # noqa: PLC0415

    assert [deletion_phase(i, 3) for i in range(3)] == [5.0, 15.0, 25.0]


def _join(impl: str, total: float, agent: float) -> dict[str, object]:
    phases = {key: None for key, _ in c.JOIN_PHASES}
    return {"impl": impl, "phases": {**phases, "registered_to_untainted_s": total,
                                     "container_started_to_untainted_s": agent}}  # fmt: skip


def test_joins_are_a_component_of_their_own_with_their_goal_and_phase_table() -> None:
    assert c.settings_from_env({"BENCH_JOINS": "3"}).joins == 3
    assert c.Settings().joins == 10
    with pytest.raises(ValueError, match="BENCH_JOINS='0' must be positive"):
        c.settings_from_env({"BENCH_JOINS": "0"})
    join = {
        **RESULT, "settings": {**RESULT["settings"], "joins": 3},  # type: ignore[dict-item]
        "rounds": {"join_register_to_untaint_s": {"ours": [1.6, 1.5, 1.7], "go": [1.5, 1.4, 1.5]}},
        "joins": [_join("ours", 1.6, 0.2), _join("ours", 1.5, 0.21), _join("go", 1.5, 0.04)],
    }  # fmt: skip
    page = "\n".join(
        f"{c.marker(name)}\nstale\n{c.marker(name, end=True)}"
        for name in ("table", "sizing", "run", "join")
    )
    out = c.render_page(page, {"agent": RESULT, "join": join})
    assert "stale" not in out
    assert ("| kubelet registers → taint removed (real node, DaemonSet) | s | 1.60 | 1.50 | 1.07× "
            "| 1.50–1.70 | 1.40–1.50 | ≤ 1.1× Go | **met** (1.07×) |") in out  # fmt: skip
    assert "| **Node registered → taint removed** | 1.55 | 1.50 | 1.50–1.60 | 1.50 |" in out
    assert "| agent container started → taint removed | 0.205 | 0.0400 | 0.200–0.210 |" in out
    assert "| Pod created → bound (scheduler) | – | – | – | – |" in out
    assert "- **join**: `compare-join`" in out
    assert "`BENCH_JOINS=3`" in out
    # without a join result the page needs no join markers
    assert "join" not in c.render_page(page.split(c.marker("join"))[0], {"agent": RESULT})


@pytest.mark.parametrize(
    ("ours", "baseline", "want"),
    [([1.0, 1.2], [1.1, 1.3], "within the spread"),
     ([1.4, 1.5], [1.1, 1.3], "**worse** beyond the spread"),
     ([0.9, 1.0], [1.1, 1.3], "better beyond the spread"), ([1.3], [1.3], "within the spread"),
     ([], [1.0], "–")],
)  # fmt: skip
def test_ours_is_worse_than_a_baseline_only_when_its_best_round_is_above_the_baselines_worst(
    ours: list[float], baseline: list[float], want: str
) -> None:
    assert c.baseline_verdict(ours, baseline) == want


def test_a_baseline_tree_is_a_checkouts_src_and_gets_its_own_table(tmp_path: Path) -> None:
    (tmp_path / "local_ccm").mkdir()
    (tmp_path / "local_ccm" / "__init__.py").write_text("")
    assert c.settings_from_env({"BENCH_BASELINE": str(tmp_path)}).baseline == str(tmp_path)
    with pytest.raises(ValueError, match=r"BENCH_BASELINE='/nonexistent' is not a checkout's src"):
        c.settings_from_env({"BENCH_BASELINE": "/nonexistent"})
    page = "\n".join(
        f"{c.marker(name)}\nstale\n{c.marker(name, end=True)}"
        for name in ("table", "sizing", "run", "baseline")
    )
    rounds = {"agent_rss_mib": {"ours": [27.0, 27.1], "go": [32.0], "baseline": [28.0, 28.1]},
              "agent_startup_requests": {"ours": [5.0], "go": [4.0]}}  # fmt: skip
    settings = {**RESULT["settings"], "baseline": str(tmp_path)}  # type: ignore[dict-item]
    with_baseline = {**RESULT, "settings": settings, "rounds": rounds, "baseline_git": "3dbf06d"}
    out = c.render_page(page, {"agent": with_baseline})
    assert "stale" not in out
    assert ("| agent steady RSS (metrics on) | MiB | 27.1 | 28.1 | 0.96× | 27.0–27.1 | 28.0–28.1 "
            "| better beyond the spread |") in out  # fmt: skip
    assert "agent start-up API requests (audit log) | requests | 5.00 | –" not in out  # no row
    assert "agent: ours git abc1234, baseline git 3dbf06d." in out
    # Without a baseline in the results no older run's table stays under the marker (it would
    # read as this run's): the section says there is none.
    without = c.render_page(page, {"agent": RESULT}).split(c.marker("baseline"))[1]
    assert "stale" not in without
    assert without.startswith("\n" + c.NO_BASELINE)
