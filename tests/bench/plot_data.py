"""What the benchmark plots show, decided from the bench result files: pure, no I/O.

`make bench` writes ``test-artifacts/bench/<kind>-<UTC %Y%m%dT%H%M%S>.json``. This module picks
the newest file of each kind (by the stamp in its name, never by mtime, so a re-draw from the
committed copies under docs/bench/data is reproducible) and turns one result into a `Plot`: a
title, the file and git revision it came from, and panels of plain numbers with the budgets of
docs/benchmarks.md drawn as reference lines. tests/bench/plots.py draws them with matplotlib.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from tests.bench import compare_peers as cp
from tests.bench import compare_stats as cs

Result = Mapping[str, Any]
_NAME = re.compile(r"^(?P<kind>[a-z0-9]+(?:-[a-z0-9]+)*)-(?P<stamp>\d{8}T\d{6})\.json$")

# Budgets, as docs/benchmarks.md states them.
AGENT_LATENCY_P99_S = 1.0  # address change → status.addresses, p99 ≤ 1 s
AGENT_UNTAINT_S = 1.0  # process start → taint removed ≤ 1 s
# The original agent's per-Node memory request is 32 MiB; ours must fit with room to spare.
AGENT_RSS_BUDGET_MIB, AGENT_RSS_TARGET_MIB = 32.0, 25.0  # D13
COLD_START_BUDGETS_S = {"unlimited": 5.0, "cpu_100m": 30.0}  # D13
LIFECYCLE_DELETION_S = 2.0  # timeout expired → Node deleted, one Node
# 100 pools and 5,000 Nodes on one core:
IPAM_ALLOCATOR_CPU_S, IPAM_RECOVER_CPU_S, IPAM_DECISION_P99_MS = 1.0, 2.0, 1.0
IPAM_RSS_MIB = 200.0  # at 2,000 Nodes created at once
I27_AFTER_LAST_CREATE_S, I27_CPU_S = 120.0, 30.0  # I27


@dataclass(frozen=True)
class ResultFile:
    kind: str
    stamp: str
    name: str


@dataclass(frozen=True)
class Ref:
    """A reference line: a budget, a target or a guide; over one category only if `category`."""

    label: str
    value: float
    style: Literal["budget", "target", "guide"] = "budget"
    category: int | None = None


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Bars:
    """Grouped bars: one group per category, one bar per series in each group."""

    title: str
    axis: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    refs: tuple[Ref, ...] = ()
    horizontal: bool = False


@dataclass(frozen=True)
class Strip:
    """Every measurement a point, one column per category (`Series.name`)."""

    title: str
    axis: str
    columns: tuple[Series, ...]
    refs: tuple[Ref, ...] = ()
    log: bool = False


@dataclass(frozen=True)
class Curve:
    name: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    emphasis: bool = False  # the aggregate over the others: drawn bold


@dataclass(frozen=True)
class Curves:
    """Lines over a shared x axis; `step` draws an empirical CDF's staircase."""

    title: str
    x_axis: str
    y_axis: str
    curves: tuple[Curve, ...]
    x_refs: tuple[Ref, ...] = ()
    y_refs: tuple[Ref, ...] = ()
    step: bool = False


Panel = Bars | Strip | Curves


@dataclass(frozen=True)
class Plot:
    name: str  # the SVG's file stem under docs/bench/
    title: str
    source: str  # the result file's name
    provenance: str  # git revision and date from the result
    panels: tuple[Panel, ...]


# ------------------------------------------------------------------ choosing files
def parse_name(name: str) -> ResultFile | None:
    """`ipam-scale-5000-20261122T000818.json` → kind `ipam-scale-5000`; None if not a result."""
    match = _NAME.match(name)
    return ResultFile(match["kind"], match["stamp"], name) if match else None


def newest_by_kind(names: Iterable[str]) -> dict[str, ResultFile]:
    """The newest result of every kind among `names`, by the UTC stamp in the name."""
    newest: dict[str, ResultFile] = {}
    for parsed in filter(None, map(parse_name, names)):
        if parsed.kind not in newest or parsed.stamp > newest[parsed.kind].stamp:
            newest[parsed.kind] = parsed
    return newest


def provenance(result: Result) -> str:
    """ "git 926fe95, 2026-11-21 23:53 UTC" from the machine facts, top level or `machine`."""
    facts = result.get("machine", result)
    when = facts.get("when")
    date = datetime.fromisoformat(when).strftime("%Y-%m-%d %H:%M UTC") if when else "date unknown"
    return f"git {facts.get('git', 'unknown')}, {date}"


# ------------------------------------------------------------------ agent
def cdf(name: str, values: Iterable[float]) -> Curve:
    """The empirical CDF: sorted values against the fraction of values ≤ each."""
    xs = tuple(sorted(values))
    return Curve(name, xs, tuple((i + 1) / len(xs) for i in range(len(xs))))


def agent_latencies(result: Result) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(run["latencies_s"]) for run in result["runs_detail"])


def agent_latency_panels(result: Result) -> tuple[Panel, ...]:
    runs = agent_latencies(result)
    curves = [cdf(f"process {i}", run) for i, run in enumerate(runs, 1)]
    every = cdf(f"all {sum(map(len, runs))} changes", (v for run in runs for v in run))
    curves.append(replace(every, emphasis=True))
    return (
        Curves(
            "address change in the namespace → new status.addresses at a watcher",
            "latency (s)",
            "fraction of changes",
            tuple(curves),
            x_refs=(Ref(f"budget: p99 ≤ {AGENT_LATENCY_P99_S:g} s", AGENT_LATENCY_P99_S),),
            y_refs=(Ref("p50", 0.5, "guide"), Ref("p99", 0.99, "guide")),
            step=True,
        ),
    )


def agent_rss_refs() -> tuple[Ref, ...]:
    return (
        Ref(f"budget {AGENT_RSS_BUDGET_MIB:g} MiB", AGENT_RSS_BUDGET_MIB),
        Ref(f"target {AGENT_RSS_TARGET_MIB:g} MiB", AGENT_RSS_TARGET_MIB, "target"),
    )


def agent_rss_panels(result: Result) -> tuple[Panel, ...]:
    runs = result["runs_detail"]
    return (
        Bars(
            "agent VmRSS per process, metrics on",
            "resident memory (MiB)",
            tuple(f"process {i}" for i in range(1, len(runs) + 1)),
            (
                Series("warm (after start-up)", tuple(r["warm"]["rss_mib"] for r in runs)),
                Series(
                    "steady (after address changes)", tuple(r["steady"]["rss_mib"] for r in runs)
                ),
            ),
            agent_rss_refs(),
        ),
    )


def agent_startup_panels(result: Result) -> tuple[Panel, ...]:
    runs = result["runs_detail"]
    steps = (
        ("first log line", "start_to_first_log_line_s"),
        ("addresses written", "start_to_addresses_s"),
        ("taint removed", "start_to_untaint_s"),
    )
    return (
        Bars(
            "agent process start → ...",
            "seconds since the spawn",
            tuple(f"run {i}" for i in range(1, len(runs) + 1)),
            tuple(Series(label, tuple(r[key] for r in runs)) for label, key in steps),
            (Ref(f"budget: start → untaint ≤ {AGENT_UNTAINT_S:g} s", AGENT_UNTAINT_S),),
        ),
    )


_LIMITS = {"unlimited": "no CPU limit", "cpu_100m": "CPU limit 100m"}


def cold_start_panels(result: Result) -> tuple[Panel, ...]:
    runs: Mapping[str, list[float]] = result["runs"]
    columns = tuple(Series(_LIMITS.get(name, name), tuple(v)) for name, v in runs.items())
    refs = tuple(
        Ref(
            f"budget, {_LIMITS.get(name, name)}: ≤ {COLD_START_BUDGETS_S[name]:g} s",
            COLD_START_BUDGETS_S[name],
            category=i,
        )
        for i, name in enumerate(runs)
        if name in COLD_START_BUDGETS_S
    )
    start = Strip("agent cold start → /readyz 200", "seconds (log scale)", columns, refs, log=True)
    if "rss_steady_mib" not in result:
        return (start,)
    rss = Strip(
        "agent RSS in steady state",
        "resident memory (MiB)",
        (Series("VmRSS", tuple(result["rss_steady_mib"])),),
        agent_rss_refs(),
    )
    return start, rss


def stack_rss_panels(result: Result) -> tuple[Panel, ...]:
    baselines: Mapping[str, float] = result["baselines_mib"]
    phases = ("imported", "first", "work", "steady")
    with_without = (("without metrics", "without_metrics"), ("with metrics", "with_metrics"))
    return (
        Bars(
            "imports alone (VmRSS)",
            "resident memory (MiB)",
            tuple(baselines),
            (Series("median", tuple(baselines.values())),),
            agent_rss_refs(),
            horizontal=True,
        ),
        Bars(
            "the stack's probe process, by phase",
            "resident memory (MiB)",
            phases,
            tuple(
                Series(label, tuple(result[key][p]["rss_mib"] for p in phases))
                for label, key in with_without
            ),
            agent_rss_refs(),
        ),
    )


# ------------------------------------------------------------------ lifecycle
_PROBE_LABELS = {"probe_1s": "--ping-timeout=1s", "probe_default": "default probe flags"}


def deletion_singles(result: Result) -> tuple[Series, ...]:
    """Per probe setting, the deletion latency of every single-Node run."""
    return tuple(
        Series(
            _PROBE_LABELS.get(key, key),
            tuple(run["p50_s"] for run in result[key]["runs"] if run["nodes"] == 1),
        )
        for key in result
        if key.startswith("probe_")
    )


def deletion_batches(result: Result) -> tuple[Panel, ...]:
    stats = (("min", "min_s"), ("p50", "p50_s"), ("p95", "p95_s"), ("max", "max_s"))
    return tuple(
        Bars(
            f"batch of {run['nodes']} Nodes, {_PROBE_LABELS.get(key, key)}",
            "timeout expired → deleted (s)",
            tuple(s for s, _ in stats),
            (Series(f"{run['deleted']} deleted", tuple(run[k] for _, k in stats)),),
        )
        for key in result
        if key.startswith("probe_")
        for run in result[key]["runs"]
        if run["nodes"] > 1
    )


def lifecycle_deletion_panels(result: Result) -> tuple[Panel, ...]:
    singles = Strip(
        "one unreachable Node: timeout expired → deleted",
        "seconds",
        deletion_singles(result),
        (Ref(f"budget ≤ {LIFECYCLE_DELETION_S:g} s", LIFECYCLE_DELETION_S),),
    )
    return (singles, *deletion_batches(result))


# ------------------------------------------------------------------ ipam
def ipam_progress(result: Result) -> Curves | None:
    """The optional "progress": [[seconds since the first creation, Nodes allocated], ...]."""
    points = result.get("progress")
    if not points:
        return None
    nodes = result["nodes"]
    return Curves(
        "Nodes holding podCIDRs over time",
        "seconds since the first Node was created",
        "Nodes allocated",
        (Curve("Node PATCHes done", tuple(p[0] for p in points), tuple(p[1] for p in points)),),
        x_refs=(Ref("last Node created", result["create_s"], "guide"),),
        y_refs=(Ref(f"{nodes:,} Nodes", nodes, "guide"),),
    )


def single(
    title: str, axis: str, pairs: Iterable[tuple[str, float]], *refs: Ref, name: str = ""
) -> Bars:
    """Bars of one series from (category, value) pairs."""
    labels, values = zip(*pairs, strict=True)
    return Bars(title, axis, labels, (Series(name, values),), refs)


def ipam_rss(result: Result) -> Bars:
    pairs = (("VmRSS", result["controller_rss_mib"]), ("VmHWM", result["controller_rss_peak_mib"]))
    return single(
        "controller memory", "MiB", pairs, Ref(f"budget ≤ {IPAM_RSS_MIB:g} MiB", IPAM_RSS_MIB)
    )


def ipam_wall(result: Result, title: str, *refs: Ref) -> Bars:
    pairs = (
        ("creation", result["create_s"]),
        ("all allocated,\nafter the last", result["all_allocated_after_last_create_s"]),
        ("all allocated,\nafter the first", result["all_allocated_after_first_create_s"]),
    )
    return single(title, "wall time (s)", pairs, *refs)


def with_progress(result: Result, panels: Iterable[Panel]) -> tuple[Panel, ...]:
    progress = ipam_progress(result)
    return (*panels, progress) if progress else tuple(panels)


def ipam_scale_panels(result: Result) -> tuple[Panel, ...]:
    alloc, n = result["allocator_in_process"], result["nodes"]
    cpu = (
        (f"{n:,} allocate\n+ commit", alloc["allocate_and_commit_total_s"]),
        (f"recover\n{n:,} Nodes", alloc["recover_total_s"]),
    )
    decision = (("p50", alloc["decision_p50_ms"]), ("p99", alloc["decision_p99_ms"]))
    controller = (
        ("start-up", result["controller_cpu_startup_s"]),
        ("allocation phase", result["controller_cpu_allocation_phase_s"]),
    )
    return with_progress(result, (
        single("allocator, in process", "CPU seconds", cpu,
               Ref(f"budget ≤ {IPAM_ALLOCATOR_CPU_S:g} s", IPAM_ALLOCATOR_CPU_S, category=0),
               Ref(f"budget ≤ {IPAM_RECOVER_CPU_S:g} s", IPAM_RECOVER_CPU_S, category=1)),
        single("one allocation decision", "milliseconds", decision,
               Ref(f"budget p99 ≤ {IPAM_DECISION_P99_MS:g} ms", IPAM_DECISION_P99_MS,
                   category=1)),
        ipam_wall(result, f"{n:,} Nodes created at once"),
        single("controller CPU", "CPU seconds", controller),
        ipam_rss(result),
    ))  # fmt: skip


def ipam_i27_panels(result: Result) -> tuple[Panel, ...]:
    title = f"{result['nodes']:,} Nodes from {result['creators']} creators"
    budget = Ref(f"budget ≤ {I27_AFTER_LAST_CREATE_S:g} s", I27_AFTER_LAST_CREATE_S, category=1)
    cpu = (("total", result["controller_cpu_total_s"]),)
    return with_progress(result, (
        ipam_wall(result, title, budget),
        single("controller CPU", "CPU seconds", cpu, Ref(f"budget ≤ {I27_CPU_S:g} s", I27_CPU_S)),
        ipam_rss(result),
    ))  # fmt: skip


# ------------------------------------------------------------------ ours vs the Go originals
def compare_panel(metric: cs.Metric, values: Mapping[str, Any]) -> Strip:
    """One metric of `make bench-compare`: every round a point, ours beside Go; the goal as a
    budget line (a ratio goal drawn at limit × Go's median) and Go's median as a guide."""
    ours = tuple(float(v) for v in values.get("ours", ()) if v is not None)
    go = tuple(float(v) for v in values.get("go", ()) if v is not None)
    summary = cs.Summary(metric, ours, go)
    refs = []
    if summary.go_median is not None:
        refs.append(Ref(f"Go median {cs.number(summary.go_median)}", summary.go_median, "guide"))
    goal = metric.goal
    if goal is not None and goal.kind == "ours":
        refs.append(Ref(f"goal {goal.text}", goal.limit))
    elif goal is not None and summary.go_median:
        refs.append(Ref(f"goal {goal.text}", goal.limit * summary.go_median))
    columns = (Series("ours", ours), Series("Go", go))
    return Strip(f"{metric.label} ({summary.verdict})", metric.unit, columns, tuple(refs))


def compare_panels(component: str) -> Callable[[Result], tuple[Panel, ...]]:
    def panels(result: Result) -> tuple[Panel, ...]:
        rounds = result["rounds"]
        chosen = [m for m in cs.METRICS if m.component == component and m.key in rounds]
        return tuple(compare_panel(m, rounds[m.key]) for m in chosen)

    return panels


# The LoadBalancer comparison's rows drawn, at every size (the rest are in its tables).
PEER_PLOTTED = ("lb_addressed_s", "lb_cpu_ms_per_service", "lb_requests_per_service",
                "lb_rss_peak_mib", "lb_gone_s", "lb_restart_writes")  # fmt: skip


def peer_panels(result: Result) -> tuple[Panel, ...]:
    """Ours beside each peer that ran, every round a point: one panel per drawn row and size."""
    return tuple(
        Strip(f"{row.metric.label}, {size:,} Services ({row.verdict})", row.metric.unit,
              tuple(Series(cp.NAMES[i], row.values[i]) for i in cp.IMPLS if row.values[i]))
        for size, (found, _) in cp.sizes_of(result).items()
        for row in found
        if row.metric.key in PEER_PLOTTED
    )  # fmt: skip


# ------------------------------------------------------------------ the plots
@dataclass(frozen=True)
class PlotKind:
    name: str
    kind: str  # the result kind it is drawn from
    title: str
    panels: Callable[[Result], tuple[Panel, ...]]


PLOTS = (
    PlotKind(
        "agent-latency",
        "agent-latency-rss",
        "Agent: address change → status latency",
        agent_latency_panels,
    ),
    PlotKind("agent-rss", "agent-latency-rss", "Agent: resident memory", agent_rss_panels),
    PlotKind("agent-startup", "agent-startup", "Agent: start → untaint", agent_startup_panels),
    PlotKind(
        "agent-cold-start",
        "agent-cold-start",
        "Agent: cold start, no CPU limit vs 100m",
        cold_start_panels,
    ),
    PlotKind("stack-rss", "stack-rss", "Stack: resident memory baselines", stack_rss_panels),
    PlotKind(
        "lifecycle-deletion",
        "lifecycle-deletion",
        "node-lifecycle-controller: deletion latency",
        lifecycle_deletion_panels,
    ),
    PlotKind(
        "ipam-scale-5000",
        "ipam-scale-5000",
        "node-ipam-controller: Nodes created at once",
        ipam_scale_panels,
    ),
    PlotKind("ipam-i27", "ipam-i27", "node-ipam-controller: scenario I27", ipam_i27_panels),
    PlotKind("compare-agent", "compare-agent", "Agent: ours vs Go local-ccm v0.2.1, per round",
             compare_panels("agent")),
    PlotKind("compare-ipam", "compare-ipam",
             "node-ipam-controller: ours vs Go (kubernetes-sigs aa9996c), per round",
             compare_panels("ipam")),
    PlotKind("compare-lifecycle", "compare-lifecycle",
             "node-lifecycle-controller: ours vs Go local-ccm v0.3.0, per round",
             compare_panels("lifecycle")),
    PlotKind("compare-join", "compare-join",
             "A kubelet joins a real node: ours vs Go local-ccm v0.2.1 as DaemonSets, per join",
             compare_panels("join")),
    PlotKind("compare-lb", "compare-lb",
             "service-lb-ipam: ours vs MetalLB v0.16.1 and kube-vip-cloud-provider v0.0.12, "
             "per round", peer_panels),
)  # fmt: skip


# Kinds kept in docs/bench/data: the plotted ones and the table-only side-by-side hour and
# whole stack.
PLOTTED_KINDS = frozenset(p.kind for p in PLOTS) | {"compare-agent-hour", "compare-stack"}


def build_plot(spec: PlotKind, source: str, result: Result) -> Plot:
    return Plot(spec.name, spec.title, source, provenance(result), spec.panels(result))


def plan(available: Mapping[str, ResultFile]) -> tuple[list[PlotKind], list[PlotKind]]:
    """The plots that have a result to draw from, and those that do not (yet)."""
    present = [p for p in PLOTS if p.kind in available]
    return present, [p for p in PLOTS if p.kind not in available]
