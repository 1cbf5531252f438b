"""Ours against the Python floor: the start-up rows of `make bench-compare`, pure, no I/O.

The agent's and the IPAM controller's rounds also run a floor program (tests/bench/floor_agent.py,
tests/bench/floor_ipam.py) that makes the same requests with nothing else, in two shapes:
``floor-loop`` runs them inside an asyncio event loop, as every component of ours does (the
controller kit), ``floor-sync`` without one. The goal is stated against the floor of ours'
shape; the table shows both, so the cost of the event loop itself is visible too. The IPAM
rounds also run ``floor-decisions`` (the loop floor making ours' per-Node decisions without the
kit), shown against ours' CPU per 1 000 Nodes on a row of its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.bench.compare_stats import Result, number, ratio, ratio_text, replace_between, span

GOAL = 1.2  # ours ≤ 1.2× the floor of its own shape
SHAPED, BARE, DECISIONS = "floor-loop", "floor-sync", "floor-decisions"
NO_FLOORS = ("(no floor in the newest results: the agent's and the IPAM controller's rounds of "
             "`make bench-compare` write this table)")  # fmt: skip


@dataclass(frozen=True)
class FloorRow:
    key: str
    component: str
    label: str
    unit: str
    goal: float | None = GOAL  # ours ≤ goal × the floor of its shape; None: shown, no goal
    shaped: str = SHAPED  # the floor in the "with an event loop" column
    bare: str | None = BARE  # the floor in the "without one" column; None: no such floor


ROWS = (
    FloorRow("agent_start_to_untaint_s", "agent", "agent start → taint removed (median)", "s"),
    FloorRow("ipam_startup_cpu_s", "ipam", "IPAM start-up CPU (spawn → ready)", "CPU-s"),
    # Its goal is against Go (the main table); here for what the floor of the same work costs.
    FloorRow(
        "ipam_cpu_per_1000_same_qps_s", "ipam", "IPAM CPU per 1 000 Nodes, 5 QPS", "CPU-s", None
    ),
    # The same CPU against the loop floor that also makes ours' per-Node decisions, without the
    # kit's layers (floor_ipam.py --floor-mode=decisions): what any shape of the path costs.
    FloorRow(
        "ipam_cpu_per_1000_same_qps_s",
        "ipam",
        "IPAM CPU per 1 000 Nodes, 5 QPS, against ours' decisions without the kit",
        "CPU-s",
        None,
        shaped=DECISIONS,
        bare=None,
    ),
)


def _values(rounds: Mapping[str, Any], key: str, impl: str) -> list[float]:
    return [float(v) for v in (rounds.get(key) or {}).get(impl, ()) if v is not None]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def floor_table(results: Mapping[str, Result]) -> str:
    """One line per row whose component ran with its floors."""
    lines = [
        "| metric | unit | ours (median) | floor with an event loop (median) | ours/floor | "
        "floor without one (median) | ours/that | ours min–max | floor min–max | goal | "
        "goal met? |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in ROWS:
        rounds = (results.get(row.component) or {}).get("rounds") or {}
        ours, shaped = _values(rounds, row.key, "ours"), _values(rounds, row.key, row.shaped)
        bare = _values(rounds, row.key, row.bare) if row.bare else []
        if not ours or not shaped:
            continue
        to_shaped = ratio(_median(ours), _median(shaped))
        to_bare = ratio(_median(ours), _median(bare))
        if row.goal is None:
            goal, verdict = "–", "–"
        elif to_shaped is None:
            goal, verdict = f"≤ {row.goal:g}× floor", "n/a"
        else:
            met = "met" if to_shaped <= row.goal else "missed"
            goal, verdict = f"≤ {row.goal:g}× floor", f"**{met}** ({ratio_text(to_shaped)})"
        lines.append(
            f"| {row.label} | {row.unit} | {number(_median(ours))} | {number(_median(shaped))} | "
            f"{ratio_text(to_shaped)} | {number(_median(bare))} | {ratio_text(to_bare)} | "
            f"{span(ours)} | {span(shaped)} | {goal} | {verdict} |"
        )
    if len(lines) == 2:
        return NO_FLOORS
    return "\n".join(lines)


def render(page: str, results: Mapping[str, Result]) -> str:
    """docs/benchmarks.md with the floor table between its `floor` markers."""
    return replace_between(page, "floor", floor_table(results))
