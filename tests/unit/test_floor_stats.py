"""The start-up table against the Python floor (tests/bench/floor_stats.py)."""

from __future__ import annotations

from typing import Any

from tests.bench import floor_stats as f


def agent(ours: list[float], loop: list[float], sync: list[float]) -> dict[str, Any]:
    key = "agent_start_to_untaint_s"
    return {"rounds": {key: {"ours": ours, "go": [0.05], "floor-loop": loop, "floor-sync": sync}}}


def test_the_goal_is_against_the_floor_of_ours_shape_and_both_floors_are_shown() -> None:
    table = f.floor_table({"agent": agent([0.13, 0.12, 0.14], [0.11, 0.1, 0.12], [0.08])})
    row = table.splitlines()[2]
    assert row.startswith("| agent start → taint removed (median) | s | 0.130 | 0.110 | 1.18× |")
    assert "| 0.0800 | 1.62× |" in row
    assert row.endswith("| ≤ 1.2× floor | **met** (1.18×) |")


def test_above_the_goal_is_missed() -> None:
    row = f.floor_table({"agent": agent([0.2], [0.1], [0.08])}).splitlines()[2]
    assert row.endswith("**missed** (2.00×) |")


def test_a_component_run_without_its_floors_has_no_row() -> None:
    ipam = {"rounds": {"ipam_startup_cpu_s": {"ours": [0.2], "go": [0.03]}}}
    results: dict[str, Any] = {"agent": agent([0.2], [], []), "ipam": ipam}
    assert f.floor_table(results) == f.NO_FLOORS  # a placeholder, not a header without rows


def test_the_table_lands_between_its_markers() -> None:
    page = "a\n<!-- bench-compare:floor:begin -->\nold\n<!-- bench-compare:floor:end -->\nb\n"
    out = f.render(page, {"agent": agent([0.13], [0.11], [0.08])})
    assert "old" not in out
    assert out.startswith("a\n<!-- bench-compare:floor:begin -->\n| metric |")
    assert out.endswith("<!-- bench-compare:floor:end -->\nb\n")


def test_a_row_without_a_goal_shows_the_floor_and_no_verdict() -> None:
    rounds = {"ipam_cpu_per_1000_same_qps_s": {"ours": [4.0], "go": [1.8], "floor-loop": [0.9],
                                               "floor-sync": [0.6]}}  # fmt: skip
    (row,) = f.floor_table({"ipam": {"rounds": rounds}}).splitlines()[2:]
    assert row.startswith("| IPAM CPU per 1 000 Nodes, 5 QPS | CPU-s | 4.00 | 0.900 | 4.44× |")
    assert row.endswith("| – | – |")


def test_the_ipam_cpu_is_shown_against_the_decisions_floor_without_a_floor_beside_it() -> None:
    cpu = {"ours": [2.4], "go": [2.2], "floor-loop": [1.2], "floor-sync": [1.0],
           "floor-decisions": [2.0]}  # fmt: skip
    rows = f.floor_table({"ipam": {"rounds": {"ipam_cpu_per_1000_same_qps_s": cpu}}}).splitlines()
    assert rows[2].startswith("| IPAM CPU per 1 000 Nodes, 5 QPS | CPU-s | 2.40 | 1.20 | 2.00× |")
    against = "| IPAM CPU per 1 000 Nodes, 5 QPS, against ours' decisions without the kit |"
    assert rows[3].startswith(f"{against} CPU-s | 2.40 | 2.00 | 1.20× | – | – |")
