"""The two pytest runs of `make test` (tests/support/alltiers.py): what each selects, what is
printed of the real-node run, which exit code wins."""

from __future__ import annotations

from tests.support.alltiers import PASSED_TAIL, commands, first_failure, report


def test_the_two_runs_split_every_tier_but_bench_and_share_the_arguments() -> None:
    realnode, others = commands(["--durations=40", "-x"])
    assert realnode[-4:] == ["-m", "realnode", "--durations=40", "-x"]
    assert others[-8:] == ["-m", "not bench and not realnode", "-n", "2", "--dist", "loadfile",
                           "--durations=40", "-x"]  # fmt: skip
    assert realnode[1:3] == others[1:3] == ["-m", "pytest"]


def test_a_green_real_node_run_shows_its_tail_a_red_one_everything() -> None:
    output = "\n".join(f"line {i}" for i in range(PASSED_TAIL + 40))
    green = report(output, 0).splitlines()
    assert green[0] == (f"==== the real-node tier (pytest -m realnode), exit 0; its last "
                        f"{PASSED_TAIL} lines ====")  # fmt: skip
    assert green[1:] == [f"line {i}" for i in range(40, PASSED_TAIL + 40)]
    red = report(output, 1).splitlines()
    assert red[0] == "==== the real-node tier (pytest -m realnode), exit 1 ===="
    assert red[1:] == output.splitlines()


def test_the_exit_code_is_the_first_failure() -> None:
    assert first_failure(0, 0) == 0
    assert first_failure(0, 1) == 1
    assert first_failure(2, 1) == 2
    assert first_failure(124, 0) == 124
