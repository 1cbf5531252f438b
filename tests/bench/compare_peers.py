"""Ours against several peers, one table per size: `make bench-compare`'s LoadBalancer
comparison (service-lb-ipam vs MetalLB's controller and kube-vip-cloud-provider). Pure, no I/O.

A `compare-lb` result holds, per size (Services per run) and metric, one value per round for
each implementation that ran at that size. From those this module takes the medians and the
spread (min–max over the rounds), the ratio ours/peer for each peer, and whether ours is ahead
of every peer on the row; it renders docs/benchmarks.md's text between the
``<!-- bench-compare:lb:... -->`` markers. The goal is judged at `GOAL_SIZE` Services.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tests.bench.compare_stats import number, ratio, replace_between

Result = Mapping[str, Any]
COMPONENT = MARKER = "lb"  # its result: compare-lb-<stamp>.json
GOAL_SIZE = 5000
IMPLS = ("ours", "metallb", "kube-vip-cp")
PEERS = IMPLS[1:]
NAMES = {"ours": "ours", "metallb": "MetalLB", "kube-vip-cp": "kube-vip-cp"}
NOT_RUN = "not run"


@dataclass(frozen=True)
class PeerMetric:
    """One row. `better`: which way is better. `goal`: "ahead" (ours at least as good as every
    peer with a number: ≤ 1× each when lower is better, ≥ 1× when higher is); "zero" (a
    correctness count: ours must be 0); None (recorded, no goal)."""

    key: str
    label: str
    unit: str
    better: Literal["lower", "higher"] = "lower"
    goal: Literal["ahead", "zero"] | None = "ahead"

    @property
    def goal_text(self) -> str:
        if self.goal == "zero":
            return "= 0"
        if self.goal == "ahead":
            return "≤ 1× every peer" if self.better == "lower" else "≥ 1× every peer"
        return "–"


METRICS = (
    PeerMetric("lb_addressed_s", "last create → all addressed", "s"),
    PeerMetric("lb_cpu_ms_per_service", "controller CPU per Service, allocating", "CPU-ms"),
    PeerMetric("lb_requests_per_service", "API requests per Service, allocating (audit log)",
               "requests"),
    PeerMetric("lb_writes_per_service", "API writes per Service, allocating (audit log)",
               "writes"),
    PeerMetric("lb_rss_steady_mib", "RSS with every Service addressed", "MiB"),
    PeerMetric("lb_rss_peak_mib", "RSS peak (VmHWM), allocating", "MiB"),
    PeerMetric("lb_restart_writes", "restart with every Service addressed: writes", "writes"),
    PeerMetric("lb_restart_changed", "restart: Services whose address changed", "Services",
               goal="zero"),
    PeerMetric("lb_gone_s", "delete all → all gone from the API", "s"),
    PeerMetric("lb_released_s", "delete all → addresses released (pool usage 0)", "s", goal=None),
    PeerMetric("lb_delete_cpu_ms_per_service", "controller CPU per Service, deleting", "CPU-ms"),
    PeerMetric("lb_duplicates", "one address on two live Services (watched throughout)",
               "moments", goal="zero"),
)  # fmt: skip
BY_KEY = {m.key: m for m in METRICS}


# ------------------------------------------------------------------ arithmetic
def values_of(raw: Sequence[float | None]) -> tuple[float, ...]:
    """The rounds that measured (None: a round that could not)."""
    return tuple(float(v) for v in raw if v is not None)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def is_ahead(ours: float, peer: float, better: Literal["lower", "higher"]) -> bool:
    """Ours at least as good as the peer (a tie counts as ahead)."""
    return ours <= peer if better == "lower" else ours >= peer


@dataclass(frozen=True)
class Row:
    metric: PeerMetric
    values: Mapping[str, tuple[float, ...]]  # implementation → the rounds' values

    def median(self, impl: str) -> float | None:
        return median(self.values.get(impl, ()))

    def ratio(self, peer: str) -> float | None:
        return ratio(self.median("ours"), self.median(peer))

    def behind(self) -> tuple[str, ...]:
        """The peers ours is not ahead of on this row (those with a number)."""
        ours = self.median("ours")
        if ours is None:
            return ()
        return tuple(
            p for p in PEERS
            if (v := self.median(p)) is not None and not is_ahead(ours, v, self.metric.better)
        )  # fmt: skip

    @property
    def verdict(self) -> str:
        """ "met" / "missed" / "n/a" (no number to judge) / "–" (no goal)."""
        ours, goal = self.median("ours"), self.metric.goal
        if goal is None:
            return "–"
        if ours is None:
            return "n/a"
        if goal == "zero":
            return "met" if ours == 0 else "missed"
        if all(self.median(p) is None for p in PEERS):
            return "n/a"
        return "missed" if self.behind() else "met"


def rows(rounds: Mapping[str, Mapping[str, Sequence[float | None]]]) -> list[Row]:
    """{metric: {impl: [per round]}} → one Row per known metric with a number, table order."""
    out = []
    for metric in METRICS:
        found = rounds.get(metric.key, {})
        values = {impl: values_of(found.get(impl, ())) for impl in IMPLS}
        if any(values.values()):
            out.append(Row(metric, values))
    return out


# ------------------------------------------------------------------ text
def ratio_text(value: float | None) -> str:
    """ "0.72×"; three significant digits below 0.01× (kube-vip-cloud-provider's times)."""
    if value is None:
        return "–"
    return f"{value:.2f}×" if value == 0 or value >= 0.01 else f"{number(value)}×"


def cell(values: Sequence[float], ran: bool) -> str:
    """The median, and the min–max over the rounds when they differ."""
    if not values:
        return "–" if ran else NOT_RUN
    low, high, mid = min(values), max(values), median(values)
    spread = "" if low == high else f" ({number(low)}–{number(high)})"
    return f"{number(mid)}{spread}"


def verdict_text(row: Row) -> str:
    v = row.verdict
    if v == "missed" and row.metric.goal == "ahead":
        behind = ", ".join(f"{NAMES[p]} {ratio_text(row.ratio(p))}" for p in row.behind())
        return f"**missed** (behind {behind})"
    return f"**{v}**" if v in ("met", "missed") else v


def table(found: Sequence[Row], ran: Sequence[str]) -> str:
    """One size: a column per implementation, a ratio ours/peer per peer, the goal."""
    head = ["metric", "unit", "better", *(NAMES[i] for i in IMPLS),
            *(f"ours/{NAMES[p]}" for p in PEERS), "goal", "goal met?"]  # fmt: skip
    align = ["---", "---", "---", *["---:"] * (len(IMPLS) + len(PEERS)), "---", "---"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for row in found:
        cells = [row.metric.label, row.metric.unit, row.metric.better,
                 *(cell(row.values[i], i in ran) for i in IMPLS),
                 *(ratio_text(row.ratio(p)) for p in PEERS),
                 row.metric.goal_text, verdict_text(row)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goal_summary(sizes: Mapping[int, Sequence[Row]]) -> str:
    """The page's headline: ahead of every peer on every row at GOAL_SIZE Services?"""
    size = f"{GOAL_SIZE:,}".replace(",", " ")
    if GOAL_SIZE not in sizes:
        measured = ", ".join(f"{n:,}".replace(",", " ") for n in sorted(sizes)) or "none"
        return f"**Goal at {size} Services: not measured in this run** (sizes run: {measured})."
    judged = [r for r in sizes[GOAL_SIZE] if r.verdict in ("met", "missed")]
    missed = [r.metric.label for r in judged if r.verdict == "missed"]
    verdict = "met" if judged and not missed else "missed"
    text = (f"**Goal at {size} Services, ahead of every peer on every row: {verdict}** "
            f"({len(judged) - len(missed)} of {len(judged)} rows")  # fmt: skip
    return text + (f"; behind on: {'; '.join(missed)})." if missed else ").")


def sizes_of(result: Result) -> dict[int, tuple[list[Row], list[str]]]:
    """size → (its rows, the implementations that ran at it)."""
    out = {}
    for key, entry in (result.get("sizes") or {}).items():
        out[int(key)] = (rows(entry["rounds"]), list(entry.get("impls") or IMPLS))
    return dict(sorted(out.items()))


def run_text(result: Result) -> str:
    m = result["machine"]
    loads = [x[0] for x in result.get("loadavg_samples") or []] or [m["loadavg_start"][0]]
    s = result.get("settings") or {}
    peers = result.get("originals") or {}
    built = "; ".join(f"{NAMES.get(k, k)} {v.get('project', '?')} {v.get('version', '?')} "
                      f"(cache key {v.get('key', '?')})" for k, v in peers.items())  # fmt: skip
    services = ",".join(str(n) for n in s.get("lb_services", ()))
    return (
        f"The run: `compare-lb`, finished {m['when']} (git {m['git']}), {m['nproc']} CPUs, "
        f"kube-apiserver {m['kube_apiserver']}; `BENCH_LB_SERVICES={services}`, "
        f"`BENCH_LB_ROUNDS={s.get('lb_rounds') or s.get('rounds', '?')}`, "
        f"`BENCH_LB_KUBEVIP_MAX={s.get('lb_kubevip_max', '?')}`, wall {result.get('wall_s', '?')} "
        f"s; load average (1 min) {min(loads):.2f}–{max(loads):.2f} over {len(loads)} samples. "
        f"Peers: {built}."
    )


def section(result: Result) -> str:
    """What goes between the lb markers: the headline, a table per size, the run."""
    sizes = sizes_of(result)
    parts = [goal_summary({n: found for n, (found, _) in sizes.items()})]
    for n, (found, ran) in sizes.items():
        skipped = [NAMES[i] for i in IMPLS if i not in ran]
        note = f" ({', '.join(skipped)} not run at this size)" if skipped else ""
        size = f"{n:,}".replace(",", " ")
        parts += [f"**{size} Services**{note}", table(found, ran)]
    parts.append(run_text(result))
    return "\n\n".join(parts)


def render_page(page: str, result: Result) -> str:
    """docs/benchmarks.md with the LoadBalancer comparison replaced from `result`."""
    return replace_between(page, MARKER, section(result))
