"""The pairwise generator covers every pair, and toggles come from the schema."""

from __future__ import annotations

import json

from tests.support.chart import CHART
from tests.support.pairwise import all_pairs, covering_rows, nested, pairs_of, toggles


def test_every_pair_is_covered_and_the_rows_are_deterministic() -> None:
    sizes = [5, 4, 3, 2, 2, 2, 2, 3]
    rows = covering_rows(sizes)
    covered = {p for row in rows for p in pairs_of(row)}
    assert covered == all_pairs(sizes)
    assert len(rows) < 5 * 4 * 3  # far below the product of the two or three largest
    assert covering_rows(sizes) == rows


def test_toggles_of_the_chart_schema_include_tri_state_booleans_and_enums() -> None:
    found = toggles(json.loads((CHART / "values.schema.json").read_text()))
    assert found[("nodeLifecycleController", "controller", "icmpMode")] == (
        "auto", "raw", "datagram",
    )  # fmt: skip
    assert found[("metrics", "podMonitor", "agent")] == (True, False, None)
    assert found[("nodeLifecycleController", "hostNetwork")] == (True, False)
    assert nested({("a", "b"): 1, ("a", "c"): 2}) == {"a": {"b": 1, "c": 2}}
