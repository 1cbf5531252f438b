"""What a benchmark adds to each implementation's environment."""

from __future__ import annotations

import pytest

from tests.support.processes import AS_SHIPPED, python_env


def test_go_gets_nothing_ours_and_the_floors_run_as_shipped_the_baseline_from_its_tree() -> None:
    assert python_env("go", "/before/src") == {}
    assert python_env("ours", "/before/src") == {"PYTHONOPTIMIZE": "2"}
    assert python_env("floor-sync") == {"PYTHONOPTIMIZE": "2"}
    assert python_env("baseline", "/before/src") == {
        "PYTHONOPTIMIZE": "2", "PYTHONPATH": "/before/src"}  # fmt: skip
    # a run of the baseline leaves nothing behind for the next run of ours
    assert python_env("ours") == {"PYTHONOPTIMIZE": "2"}
    with pytest.raises(TypeError):
        AS_SHIPPED["PYTHONPATH"] = "/before/src"  # type: ignore[index]
