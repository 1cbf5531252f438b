"""The pairwise generator covers every pair, and toggles come from the schema."""

from __future__ import annotations

import json

from tests.support.chart import CHART
from tests.support.pairwise import all_pairs, covering_rows, nested, pack, pairs_of, toggles


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


def test_packed_rows_hold_every_pair_and_never_two_values_of_one_factor() -> None:
    wanted = {((0, 1), (1, 0)), ((0, 1), (2, 2)), ((0, 0), (1, 1)), ((1, 0), (3, 1)),
              ((2, 0), (3, 1))}  # fmt: skip
    rows = pack(wanted)
    held = {((i, row[i]), (j, row[j])) for row in rows for i in row for j in row if i < j}
    assert wanted <= held
    assert len(rows) < len(wanted)  # pairs share rows where their values agree
    assert rows[0] == {0: 0, 1: 1, 2: 0, 3: 1}  # first fit over the sorted pairs


def test_packed_rows_are_closed_and_leave_out_what_contradicts_itself() -> None:
    # 0=1 needs 1=1: a pair (0=1, 1=0) contradicts itself; (0=1, 2=0) takes 1=1 along.
    def close(row: dict[int, int]) -> dict[int, int] | None:
        if row.get(0) == 1:
            if row.get(1, 1) != 1:
                return None
            return {**row, 1: 1}
        return row

    rows = pack({((0, 1), (1, 0)), ((0, 1), (2, 0)), ((1, 0), (2, 1))}, close)
    assert rows == [{0: 1, 1: 1, 2: 0}, {1: 0, 2: 1}]
