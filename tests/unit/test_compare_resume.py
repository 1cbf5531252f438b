"""A resumed `make bench-compare` (BENCH_RESUME=1) keeps exactly the parts already measured at
this commit with these settings: tests/bench/compare_record.py `finished_parts`."""

from __future__ import annotations

from typing import Any

from tests.bench.compare_record import finished_parts
from tests.bench.compare_stats import Settings

SETTINGS = Settings(rounds=3, lb_services=(1000, 5000)).as_dict()


def result(git: str, settings: dict[str, Any] = SETTINGS) -> dict[str, Any]:
    return {"machine": {"git": git}, "settings": settings}


def test_a_part_of_this_commit_and_settings_is_kept() -> None:
    results = [("compare-agent-20261205T060000.json", result("abc1234"))]
    assert finished_parts(results, "abc1234", SETTINGS) == {
        "agent": "compare-agent-20261205T060000.json"
    }


def test_stored_lists_match_the_settings_tuples() -> None:
    stored = {**SETTINGS, "lb_services": [1000, 5000]}  # as JSON reads it back
    results = [("compare-lb-20261205T060000.json", result("abc1234", stored))]
    assert finished_parts(results, "abc1234", SETTINGS) == {"lb": "compare-lb-20261205T060000.json"}


def test_another_commit_or_other_settings_is_measured_again() -> None:
    other = Settings(rounds=2, lb_services=(1000, 5000)).as_dict()
    results = [
        ("compare-agent-20261205T060000.json", result("0000000")),
        ("compare-ipam-20261205T060000.json", result("abc1234", other)),
    ]
    assert finished_parts(results, "abc1234", SETTINGS) == {}


def test_only_the_newest_result_of_a_part_counts() -> None:
    # The report takes the newest of each part: an older match behind it is not what it shows.
    results = [
        ("compare-ipam-20261205T060000.json", result("abc1234")),
        ("compare-ipam-20261205T070000.json", result("0000000")),
        ("compare-stack-20261205T060000.json", result("0000000")),
        ("compare-stack-20261205T070000.json", result("abc1234")),
    ]
    assert finished_parts(results, "abc1234", SETTINGS) == {
        "stack": "compare-stack-20261205T070000.json"
    }


def test_results_may_be_read_once() -> None:
    # The results are read from files as they are iterated.
    files = iter([("compare-join-20261205T060000.json", result("abc1234"))])
    assert finished_parts(files, "abc1234", SETTINGS) == {
        "join": "compare-join-20261205T060000.json"
    }


def test_results_that_are_not_parts_are_ignored() -> None:
    # The whole stack's hour of agents is written beside it; it is no part of its own.
    results = [("compare-agent-hour-20261205T060000.json", result("abc1234"))]
    assert finished_parts(results, "abc1234", SETTINGS) == {}
