"""The whole stack side by side (`compare-stack`), decided from its result: pure, no I/O.

The result holds, for each stack ("ours", "go"), its components and, for each component, the
processes measured over the window: RSS samples, VmHWM, CPU seconds, API requests (audit log)
and response bytes (the process's relay). A component that runs one process per Node (the
agent) is measured on a sample of K processes and stands for `count` of them (the Node count):
its figures are the sample's mean × `count`, and the tables say so. From that this module
computes each component's and each stack's usage, the ratios ours/Go, the goals, and renders
the two tables of docs/benchmarks.md's "The whole stack" section and the README's one line.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from tests.bench.compare_stats import Goal, number, ratio, replace_between, verdict

Result = Mapping[str, Any]
STACKS = ("ours", "go")
STACK_NAMES = {"ours": "local-ccm", "go": "Go stack"}
HOUR = 3600.0
MB = 1e6


@dataclass(frozen=True)
class Usage:
    """What some processes used over the window (summed over the processes)."""

    rss_steady_mib: float = 0.0  # each process's median RSS over the samples
    rss_peak_mib: float = 0.0  # each process's VmHWM (its own peak, start-up included)
    cpu_s: float = 0.0
    requests: float = 0.0
    response_bytes: float = 0.0
    startup_cpu_s: float = 0.0  # from the spawn to the window's start

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, k: float) -> Usage:
        return Usage(*(getattr(self, f.name) * k for f in fields(self)))


def process_usage(process: Mapping[str, Any]) -> Usage:
    """One process's usage; ValueError when it has no RSS sample (nothing was measured)."""
    samples = [float(x) for x in process.get("rss_mib") or ()]
    if not samples:
        raise ValueError(f"process {process.get('name', '?')} has no RSS sample")
    return Usage(
        rss_steady_mib=statistics.median(samples),
        rss_peak_mib=max(float(process.get("hwm_mib") or 0.0), *samples),
        cpu_s=float(process["cpu_s"]),
        requests=float(process["requests"]),
        response_bytes=float(process["response_bytes"]),
        startup_cpu_s=float(process.get("startup_cpu_s") or 0.0),
    )


@dataclass(frozen=True)
class Component:
    stack: str
    name: str
    label: str
    measured: int  # processes measured
    count: int  # processes it stands for: 1 per process, or one per Node for the agent
    usage: Usage  # all `count` of them together

    @property
    def extrapolated(self) -> bool:
        return self.count != self.measured


def extrapolate(usages: Sequence[Usage], count: int) -> Usage:
    """The sample's mean × `count` (the sum when `count` is the sample's size)."""
    if not usages:
        raise ValueError("no process measured")
    total = sum(usages, Usage())
    return total if count == len(usages) else total.scaled(count / len(usages))


def component(stack: str, entry: Mapping[str, Any]) -> Component:
    usages = [process_usage(p) for p in entry["processes"]]
    count = int(entry.get("count") or len(usages))
    return Component(stack, str(entry["name"]), str(entry.get("label") or entry["name"]),
                     len(usages), count, extrapolate(usages, count))  # fmt: skip


def components(result: Result) -> list[Component]:
    """Every component of both stacks, ours first, each stack in the result's order."""
    stacks = result["stacks"]
    return [component(s, entry) for s in STACKS for entry in stacks[s]["components"]]


def totals(comps: Sequence[Component]) -> dict[str, Usage]:
    return {s: sum((c.usage for c in comps if c.stack == s), Usage()) for s in STACKS}


# ------------------------------------------------------------------ rows
@dataclass(frozen=True)
class Row:
    key: str  # a Usage field
    label: str
    unit: str
    goal: Goal | None = None
    per_hour: bool = False  # a count over the window, shown per hour
    scale: float = 1.0

    def value(self, usage: Usage, window_s: float) -> float:
        raw = float(getattr(usage, self.key)) * self.scale
        return raw * HOUR / window_s if self.per_hour else raw


SAME_OR_LESS = Goal("ratio", 1.0)
ROWS = (
    Row("rss_steady_mib", "memory, steady (sum of each process's median RSS)", "MiB",
        SAME_OR_LESS),
    Row("rss_peak_mib", "memory, peak (sum of each process's VmHWM)", "MiB"),
    Row("cpu_s", "CPU over the window, per hour", "CPU-s/h", SAME_OR_LESS, per_hour=True),
    Row("requests", "API requests (audit log), per hour", "requests/h", SAME_OR_LESS,
        per_hour=True),
    Row("response_bytes", "API response bytes on the wire, per hour", "MB/h", per_hour=True,
        scale=1 / MB),
    Row("startup_cpu_s", "CPU from start until settled (before the window)", "CPU-s"),
)  # fmt: skip
BY_KEY = {row.key: row for row in ROWS}


@dataclass(frozen=True)
class Line:
    row: Row
    ours: float
    go: float

    @property
    def ratio(self) -> float | None:
        return ratio(self.ours, self.go)

    @property
    def verdict(self) -> str:
        return verdict(self.row.goal, self.ours, self.ratio)


def lines(result: Result) -> list[Line]:
    window = float(result["window_s"])
    total = totals(components(result))
    return [Line(row, row.value(total["ours"], window), row.value(total["go"], window))
            for row in ROWS]  # fmt: skip


# ------------------------------------------------------------------ text
def ratio_text(value: float | None) -> str:
    """ "0.81×"; below 0.1 two significant digits ("0.0038×"), as the requests' ratio is."""
    if value is None:
        return "–"
    return f"{value:.2g}×" if value < 0.1 else f"{value:.2f}×"


def window_text(seconds: float) -> str:
    """ "one hour", "10 minutes", "45 s"."""
    if abs(seconds - HOUR) < 60:
        return "one hour"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} s"


def count_text(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _verdict_text(line: Line) -> str:
    v = line.verdict
    return f"**{v}** ({ratio_text(line.ratio)})" if v in ("met", "missed") else v


def totals_table(result: Result) -> str:
    head = ["| metric | unit | local-ccm | Go stack | ours/Go | goal | goal met? |",
            "|---|---|---:|---:|---:|---|---|"]  # fmt: skip
    body = [
        f"| {ln.row.label} | {ln.row.unit} | {number(ln.ours)} | {number(ln.go)} | "
        f"{ratio_text(ln.ratio)} | {ln.row.goal.text if ln.row.goal else '–'} | "
        f"{_verdict_text(ln)} |"
        for ln in lines(result)
    ]
    return "\n".join(head + body)


def components_table(result: Result) -> str:
    """One row per component of each stack, then each stack's total."""
    window = float(result["window_s"])
    keys = ("rss_steady_mib", "rss_peak_mib", "cpu_s", "requests", "response_bytes")
    head = ["| stack | component | processes | memory, steady (MiB) | memory, peak (MiB) | "
            "CPU (CPU-s/h) | API requests (/h) | response bytes (MB/h) |",
            "|---|---|---|" + "---:|" * len(keys)]  # fmt: skip
    comps = components(result)
    body = []
    for c in comps:
        values = " | ".join(number(BY_KEY[k].value(c.usage, window)) for k in keys)
        body.append(f"| {STACK_NAMES[c.stack]} | {c.label} | {processes_text(c)} | {values} |")
    for stack, usage in totals(comps).items():
        values = " | ".join(f"**{number(BY_KEY[k].value(usage, window))}**" for k in keys)
        body.append(f"| {STACK_NAMES[stack]} | **total** | | {values} |")
    return "\n".join(head + body)


def processes_text(c: Component) -> str:
    if c.extrapolated:
        return f"{count_text(c.count)} (mean of {c.measured} measured × {count_text(c.count)})"
    return str(c.count)


def facts_text(result: Result) -> str:
    """The scale of the run, under the totals: Nodes, window, load, what was extrapolated."""
    load = result.get("load") or {}
    window = float(result["window_s"])
    churn = f"{float(load['churn_s']):g}" if "churn_s" in load else "?"
    sampled = [c for c in components(result) if c.extrapolated]
    measured = ", ".join(f"{STACK_NAMES[c.stack]} {c.measured}" for c in sampled)
    extrapolated = (
        f" The agent rows are extrapolated (one process per Node): the mean of the agents "
        f"measured ({measured}), each on a real Node of its own, × the Node count."
        if sampled
        else ""
    )
    return (
        f"{count_text(int(result['nodes']))} kwok Nodes per plane; a window of "
        f"{window_text(window)}{'' if window < 120 else f' ({window:.0f} s)'}. Load on each "
        f"plane: {load.get('services_live', '?')} LoadBalancer Services live, one created and "
        f"the oldest deleted every {churn} s ({load.get('services_created', '?')} created and "
        f"{load.get('services_deleted', '?')} deleted in all), and one kubelet-serving CSR "
        f"every {churn} s ({load.get('csrs', '?')}, every one approved on both planes)."
        f"{extrapolated}"
    )


def render(page: str, result: Result) -> str:
    """docs/benchmarks.md with the stack's two generated parts replaced."""
    page = replace_between(page, "stack", totals_table(result) + "\n\n" + facts_text(result))
    return replace_between(page, "stack-components", components_table(result))


HEADLINE = (("rss_steady_mib", "memory"), ("cpu_s", "CPU"), ("requests", "API requests"))


def readme_line(result: Result) -> str:
    """The README's one line: the whole stack's ratios, where they come from."""
    found = {ln.row.key: ln for ln in lines(result)}
    parts = ", ".join(f"{what} {ratio_text(found[key].ratio)}" for key, what in HEADLINE)
    return (
        f"Measured side by side on {count_text(int(result['nodes']))} Nodes for "
        f"{window_text(float(result['window_s']))}, the whole local-ccm stack costs, next to "
        f"the Go stack it replaces: {parts} "
        f"([the whole stack](docs/benchmarks.md#the-whole-stack))."
    )


def render_readme(readme: str, result: Result) -> str:
    return replace_between(readme, "readme", readme_line(result))
