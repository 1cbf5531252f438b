"""What `make bench-compare` reports, decided from its rounds: pure, no I/O.

A compare result holds, for every metric, one value per round for ours and one for the Go
original. From those this module computes the medians, the ratio ours/Go, the spread (min–max
over rounds) and whether the goal is met, and renders the Markdown tables that
docs/benchmarks.md carries between marker comments, so every number on that page comes from
the committed result file.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Result = Mapping[str, Any]


@dataclass(frozen=True)
class Goal:
    """`ratio`: median ours / median Go ≤ limit; `ours`: median ours ≤ limit (absolute)."""

    kind: Literal["ratio", "ours"]
    limit: float

    @property
    def text(self) -> str:
        return f"≤ {self.limit:g}× Go" if self.kind == "ratio" else f"≤ {self.limit:g}"


@dataclass(frozen=True)
class Metric:
    key: str
    component: Literal["agent", "agent-hour", "ipam", "lifecycle", "join"]
    label: str
    unit: str
    goal: Goal | None = None


METRICS = (
    Metric("agent_rss_mib", "agent", "agent steady RSS (metrics on)", "MiB", Goal("ratio", 0.9)),
    Metric("agent_api_requests_per_node_hour", "agent",
           "agent API requests per node-hour (idle window, extrapolated)", "requests/h"),
    Metric("agent_api_requests_hour", "agent-hour",
           "agent API requests over a real hour (idle, side by side)", "requests",
           Goal("ours", 2)),
    # Start-up goals are against the Python floor (tests/bench/floor_stats.py), not Go.
    Metric("agent_start_to_untaint_s", "agent", "agent start → taint removed (median)", "s"),
    Metric("agent_start_to_addresses_s", "agent", "agent start → addresses written", "s"),
    Metric("join_register_to_untaint_s", "join",
           "kubelet registers → taint removed (real node, DaemonSet)", "s", Goal("ratio", 1.1)),
    Metric("join_container_to_untaint_s", "join",
           "agent container started → taint removed (real node)", "s"),
    Metric("agent_idle_cpu_s_per_node_hour", "agent",
           "agent idle CPU per node-hour (idle window, extrapolated)", "CPU-s/h",
           Goal("ratio", 1.0)),
    Metric("agent_idle_cpu_hour_s", "agent-hour",
           "agent idle CPU over a real hour (idle, side by side)", "CPU-s",
           Goal("ratio", 1.0)),
    Metric("agent_startup_requests", "agent", "agent start-up API requests (audit log)",
           "requests", Goal("ours", 5)),
    Metric("agent_address_change_s", "agent", "address change → status", "s"),
    # Every request the controller makes counts: the run waits for its Events too.
    Metric("ipam_cpu_per_1000_same_qps_s", "ipam", "IPAM CPU per 1 000 Nodes, both at 5 QPS",
           "CPU-s", Goal("ratio", 0.75)),
    Metric("ipam_cpu_per_1000_default_s", "ipam",
           "IPAM CPU per 1 000 Nodes, defaults (ours 50 QPS, Go 5)", "CPU-s"),
    Metric("ipam_all_allocated_same_qps_s", "ipam", "IPAM last Node created → all allocated, 5 QPS",
           "s"),
    Metric("ipam_startup_cpu_s", "ipam", "IPAM start-up CPU (spawn → ready)", "CPU-s"),
    Metric("ipam_rss_ready_mib", "ipam", "IPAM RSS when ready", "MiB"),
    Metric("ipam_rss_peak_mib", "ipam", "IPAM RSS peak (after allocating)", "MiB"),
    Metric("lifecycle_rss_mib", "lifecycle", "lifecycle RSS at N Nodes", "MiB"),
    Metric("lifecycle_rss_empty_mib", "lifecycle", "lifecycle RSS, selector matching no Node",
           "MiB"),
    Metric("lifecycle_cpu_s_per_hour", "lifecycle", "lifecycle CPU per hour at N Nodes",
           "CPU-s/h"),
    Metric("lifecycle_cpu_empty_s_per_hour", "lifecycle",
           "lifecycle CPU per hour, selector matching no Node", "CPU-s/h"),
    Metric("lifecycle_api_requests_per_hour", "lifecycle", "lifecycle API requests per hour",
           "requests/h"),
    Metric("lifecycle_api_bytes_per_hour", "lifecycle", "lifecycle API response bytes per hour",
           "MB/h"),
    Metric("lifecycle_timeout_to_deleted_s", "lifecycle", "lifecycle timeout → Node deleted", "s"),
)  # fmt: skip
BY_KEY = {m.key: m for m in METRICS}
IMPLEMENTATIONS = ("ours", "go")


@dataclass(frozen=True)
class Summary:
    metric: Metric
    ours: tuple[float, ...]
    go: tuple[float, ...]

    @property
    def ours_median(self) -> float | None:
        return statistics.median(self.ours) if self.ours else None

    @property
    def go_median(self) -> float | None:
        return statistics.median(self.go) if self.go else None

    @property
    def ratio(self) -> float | None:
        return ratio(self.ours_median, self.go_median)

    @property
    def verdict(self) -> str:
        return verdict(self.metric.goal, self.ours_median, self.ratio)


# ------------------------------------------------------------------ arithmetic
def ratio(ours: float | None, go: float | None) -> float | None:
    """ours / Go; None when either is missing or Go's is 0 (no ratio to speak of)."""
    if ours is None or go is None or go == 0:
        return None
    return ours / go


def spread(values: Sequence[float]) -> tuple[float, float] | None:
    """(min, max) over the rounds."""
    return (min(values), max(values)) if values else None


def verdict(goal: Goal | None, ours: float | None, ratio_: float | None) -> str:
    """ "met" / "missed" against the goal; "–" without a goal; "n/a" without the number."""
    if goal is None:
        return "–"
    value = ratio_ if goal.kind == "ratio" else ours
    if value is None:
        return "n/a"
    return "met" if value <= goal.limit else "missed"


def measured(values: Mapping[str, Sequence[float | None]], impl: str) -> tuple[float, ...]:
    """One implementation's rounds of a metric, without the rounds that could not measure it."""
    return tuple(float(v) for v in values.get(impl, ()) if v is not None)


def summarize(rounds: Mapping[str, Mapping[str, Sequence[float | None]]]) -> list[Summary]:
    """{metric key: {"ours": [per round], "go": [per round]}} → one Summary per known metric,
    in table order; None values (a round that could not measure) are dropped."""
    out = []
    for metric in METRICS:
        values = rounds.get(metric.key, {})
        ours, go = measured(values, "ours"), measured(values, "go")
        if ours or go:
            out.append(Summary(metric, ours, go))
    return out


# ------------------------------------------------------------------ text
def number(value: float | None) -> str:
    """Three significant digits, no exponent for the magnitudes of this page."""
    if value is None:
        return "–"
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}".replace(",", " ")


def span(values: Sequence[float]) -> str:
    found = spread(values)
    if found is None:
        return "–"
    low, high = found
    return number(low) if low == high else f"{number(low)}–{number(high)}"


def ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def comparison_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| metric | unit | ours (median) | Go (median) | ours/Go | ours min–max | "
        "Go min–max | goal | goal met? |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in summaries:
        goal = s.metric.goal.text if s.metric.goal else "–"
        lines.append(
            f"| {s.metric.label} | {s.metric.unit} | {number(s.ours_median)} | "
            f"{number(s.go_median)} | {ratio_text(s.ratio)} | {span(s.ours)} | {span(s.go)} | "
            f"{goal} | {_verdict_text(s)} |"
        )
    return "\n".join(lines)


def _verdict_text(s: Summary) -> str:
    v = s.verdict
    if v in ("met", "missed") and s.metric.goal and s.metric.goal.kind == "ratio":
        return f"**{v}** ({ratio_text(s.ratio)})"
    if v in ("met", "missed"):
        return f"**{v}** ({number(s.ours_median)})"
    return v


# ------------------------------------------------------------------ against a baseline
def baseline_verdict(ours: Sequence[float], baseline: Sequence[float]) -> str:
    """Every metric here is better lower: "worse" when even ours' best round is above the
    baseline's worst, "better" when ours' worst is below its best, else "within the spread"."""
    if not ours or not baseline:
        return "–"
    if min(ours) > max(baseline):
        return "**worse** beyond the spread"
    if max(ours) < min(baseline):
        return "better beyond the spread"
    return "within the spread"


def baseline_table(rounds: Mapping[str, Mapping[str, Sequence[float | None]]]) -> str | None:
    """Ours against BENCH_BASELINE's tree measured in the same rounds; None without it."""
    lines = []
    for metric in METRICS:
        values = rounds.get(metric.key, {})
        ours, base = measured(values, "ours"), measured(values, "baseline")
        if not base:
            continue
        mid = [statistics.median(v) if v else None for v in (ours, base)]
        lines.append(
            f"| {metric.label} | {metric.unit} | {number(mid[0])} | {number(mid[1])} | "
            f"{ratio_text(ratio(mid[0], mid[1]))} | {span(ours)} | {span(base)} | "
            f"{baseline_verdict(ours, base)} |"
        )
    if not lines:
        return None
    head = ["| metric | unit | ours (median) | baseline (median) | ours/baseline | ours min–max "
            "| baseline min–max | ours against the baseline |",
            "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    return "\n".join(head + lines)


# What the baseline's place says when the newest runs had none: a table of an older run here
# would read as this run's.
NO_BASELINE = (
    "*Not in this run: it had no `BENCH_BASELINE`. The page's history keeps the "
    "tables of earlier runs that had one; the text above sums up the newest.*"
)


def baseline_text(results: Mapping[str, Result]) -> str | None:
    """The baseline's table and the runs it comes from, when the newest runs have one."""
    table = baseline_table(merged_rounds(results))
    if table is None:
        return None
    runs = [
        f"{c}: ours git {results[c]['machine'].get('git', '?')}, baseline git "
        f"{results[c].get('baseline_git') or '?'}"
        for c in COMPONENTS
        if c in results and results[c].get("settings", {}).get("baseline")
    ]
    return table + "\n\n" + "; ".join(runs) + "."


# ------------------------------------------------------------------ sizing
SIZES = (100, 1000, 5000)
MEMORY_HEADROOM = 1.25  # a request 25 % above the measured peak
MEMORY_STEP_MIB = 8


def memory_request(rss_mib: float) -> int:
    """A memory request with headroom, rounded up to whole 8 MiB."""
    return int(math.ceil(rss_mib * MEMORY_HEADROOM / MEMORY_STEP_MIB) * MEMORY_STEP_MIB)


def linear(at_zero: float, at_n: float, n: int, size: int) -> float:
    """The straight line through (0, at_zero) and (n, at_n), read at `size`."""
    return at_zero + (at_n - at_zero) * size / n


def millicores(cpu_s_per_hour: float) -> float:
    return cpu_s_per_hour * 1000 / 3600


@dataclass(frozen=True)
class SizingRow:
    component: str
    basis: str
    memory_mib: tuple[int, ...]  # one per SIZES
    cpu: tuple[str, ...]  # one per SIZES


def sizing(summaries: Sequence[Summary], settings: Mapping[str, Any]) -> list[SizingRow]:
    """Memory requests and CPU per component at SIZES Nodes, from our medians (the maxima for
    memory): the agent is one Pod per Node, so its row does not change with the cluster; the
    controllers are read off a straight line through the two measured points."""
    ours = {s.metric.key: s for s in summaries}
    rows = []
    # The idle CPU of the real hour when there is one (an hour of CPU-s is CPU-s per hour).
    cpu = ours.get("agent_idle_cpu_hour_s") or ours.get("agent_idle_cpu_s_per_node_hour")
    if (rss := ours.get("agent_rss_mib")) and cpu:
        per_pod = memory_request(max(rss.ours))
        mc = f"{millicores(max(cpu.ours)):.2f} m idle"
        rows.append(SizingRow("local-ccm agent (per Node)", "steady RSS, idle CPU",
                              (per_pod,) * len(SIZES), (mc,) * len(SIZES)))  # fmt: skip
    rows += _lifecycle_rows(ours, int(settings.get("lifecycle_nodes", 0)))
    rows += _ipam_rows(ours, int(settings.get("ipam_nodes", 0)))
    return rows


def _lifecycle_rows(ours: Mapping[str, Summary], n: int) -> list[SizingRow]:
    keys = ("lifecycle_rss_mib", "lifecycle_rss_empty_mib", "lifecycle_cpu_s_per_hour",
            "lifecycle_cpu_empty_s_per_hour")  # fmt: skip
    values = [ours[k].ours if k in ours else () for k in keys]
    if not (n and all(values)):
        return []
    rss, empty, cpu, idle = (max(v) for v in values)
    memory = tuple(memory_request(linear(empty, rss, n, k)) for k in SIZES)
    at = (linear(idle, cpu, n, k) for k in SIZES)
    cores = tuple(f"{millicores(max(0.0, v)):.1f} m" for v in at)
    basis = f"RSS and CPU at 0 and {n} Nodes (linear)"
    return [SizingRow("node-lifecycle-controller", basis, memory, cores)]


def _ipam_rows(ours: Mapping[str, Summary], n: int) -> list[SizingRow]:
    ready, peak = ours.get("ipam_rss_ready_mib"), ours.get("ipam_rss_peak_mib")
    cpu = ours.get("ipam_cpu_per_1000_default_s")
    if not (ready and peak and cpu and n and ready.ours and peak.ours and cpu.ours):
        return []
    memory = tuple(memory_request(linear(max(ready.ours), max(peak.ours), n, k)) for k in SIZES)
    burst = tuple(f"{max(cpu.ours) * k / 1000:.1f} CPU-s to allocate" for k in SIZES)
    basis = f"RSS ready and after {n} Nodes, CPU per 1 000 Nodes (linear)"
    return [SizingRow("node-ipam-controller", basis, memory, burst)]


def sizing_table(rows: Sequence[SizingRow]) -> str:
    head = " / ".join(f"{k:,}".replace(",", " ") for k in SIZES) + " Nodes"
    lines = [f"| component | derived from | memory request (MiB) at {head} | CPU at {head} |",
             "|---|---|---|---|"]  # fmt: skip
    for row in rows:
        memory = " / ".join(str(m) for m in row.memory_mib)
        lines.append(f"| {row.component} | {row.basis} | {memory} | {' / '.join(row.cpu)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the page
def marker(name: str, end: bool = False) -> str:
    return f"<!-- bench-compare:{name}:{'end' if end else 'begin'} -->"


def replace_between(page: str, name: str, body: str) -> str:
    """`page` with the text between the `name` markers replaced by `body`; ValueError when the
    markers are missing or out of order."""
    begin, end = marker(name), marker(name, end=True)
    start, stop = page.find(begin), page.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"docs page has no {begin} ... {end} pair")
    return page[: start + len(begin)] + "\n" + body.rstrip("\n") + "\n" + page[stop:]


COMPONENTS = ("agent", "agent-hour", "ipam", "lifecycle", "stack", "join")


# The settings each component's run depends on (a component may be run alone, at its own scale).
COMPONENT_SETTINGS = {
    "agent": ("rounds", "agent_idle_s", "agent_changes"),
    "agent-hour": ("agent_hour_s",),
    "ipam": ("rounds", "ipam_nodes"),
    "lifecycle": ("rounds", "lifecycle_nodes", "lifecycle_window_s", "lifecycle_timeout_s"),
    "stack": ("stack_nodes", "stack_window_s", "stack_agents", "stack_services", "stack_churn_s"),
    "join": ("joins",),
}


def settings_text(component: str, settings: Mapping[str, Any]) -> str:
    """`BENCH_ROUNDS=3`, ... for the settings `component` depends on."""
    names = {**ENV_NAMES, "agent_hour_s": "BENCH_HOUR"}
    scale = {"agent_hour_s": 1 / 3600}
    return ", ".join(
        f"`{names[k]}={settings[k] * scale.get(k, 1):g}`"
        for k in COMPONENT_SETTINGS.get(component, ())
        if k in settings
    )


def run_facts(component: str, result: Result) -> str:
    """One list item: when, at which scale, how loaded the machine was, what the Go side was."""
    m = result["machine"]
    loads = result.get("loadavg_samples") or []
    ones = [x[0] for x in loads] or [m["loadavg_start"][0]]
    go = (result.get("originals") or {}).get("go") or {}
    return (
        f"- **{component}**: `compare-{component}`, finished {m['when']} (git {m['git']}), "
        f"{settings_text(component, result.get('settings') or {})}, wall "
        f"{result.get('wall_s', '?')} s; load average (1 min) {min(ones):.2f}–{max(ones):.2f} "
        f"over {len(ones)} samples; Go side {go.get('project', '?')} {go.get('version', '?')} "
        f"(cache key {go.get('key', '?')})."
    )


def machine_text(results: Mapping[str, Result]) -> str:
    m = results[next(iter(results))]["machine"]
    lines = [
        f"{m['nproc']} CPUs, kernel {m['kernel']}, Python {m['python']}, {m['go']}, "
        f"kube-apiserver {m['kube_apiserver']}, etcd {m['pins']['etcd']}, kwok "
        f"{m['pins']['kwok']}. Each component's settings are on its line.",
        "",
    ]
    lines += [run_facts(c, results[c]) for c in COMPONENTS if c in results]
    return "\n".join(lines)


def merged_rounds(results: Mapping[str, Result]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for component in COMPONENTS:
        if component in results:
            out.update(results[component]["rounds"])
    return out


def render_page(page: str, results: Mapping[str, Result]) -> str:
    """docs/benchmarks.md with its generated parts replaced: the comparison table, the sizing
    table and the run facts, all from `results` ({component: compare result})."""
    summaries = summarize(merged_rounds(results))
    settings = {
        key: result["settings"][key]
        for component, result in results.items()
        for key in COMPONENT_SETTINGS.get(component, ())
        if key in result["settings"] and key != "rounds"
    }
    page = replace_between(page, "table", comparison_table(summaries))
    page = replace_between(page, "sizing", sizing_table(sizing(summaries, settings)))
    if "join" in results:
        page = replace_between(page, "join", join_phase_table(results["join"]))
    if marker("baseline") in page:
        page = replace_between(page, "baseline", baseline_text(results) or NO_BASELINE)
    return replace_between(page, "run", machine_text(results))


# ------------------------------------------------------------------ a real node's joins
# The phases of a join (tests/bench/join_phases.py PHASES): the first six follow one another
# and add up to the total; the last two are beside them.
JOIN_PHASES = (
    ("registered_to_pod_created_s", "Node registered → Pod created (DaemonSet controller)"),
    ("pod_created_to_bound_s", "Pod created → bound (scheduler)"),
    ("bound_to_kubelet_saw_pod_s", "Pod bound → the kubelet has it (its Pod watch)"),
    ("kubelet_saw_pod_to_sandbox_started_s", "kubelet has the Pod → sandbox started"),
    ("sandbox_to_container_started_s", "sandbox started → agent container started"),
    ("container_started_to_untainted_s", "agent container started → taint removed"),
    ("registered_to_untainted_s", "**Node registered → taint removed**"),
    ("kubelet_start_to_registered_s", "kubelet started → Node registered (not in the total)"),
    ("container_started_to_first_log_s", "agent container started → its first log line"),
)


def join_phase_table(result: Result) -> str:
    """Median and spread of every phase of the counted joins, ours and Go."""
    lines = ["| phase (s) | ours (median) | Go (median) | ours min–max | Go min–max |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for key, label in JOIN_PHASES:
        ours, go = (
            [float(v) for j in result["joins"]
             if j["impl"] == impl and (v := j["phases"].get(key)) is not None]
            for impl in IMPLEMENTATIONS
        )  # fmt: skip
        median = [number(statistics.median(v)) if v else "–" for v in (ours, go)]
        lines.append(f"| {label} | {median[0]} | {median[1]} | {span(ours)} | {span(go)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ scale settings
@dataclass(frozen=True)
class Settings:
    """The scale of one `make bench-compare` (make variables, passed as the environment).

    The defaults are for development (about 15 min on 2 cores); docs/benchmarks.md gives the
    full-size values. `agent_hour_s` (BENCH_HOUR=1: one hour) makes the whole stack's window
    that long, and its real agents, ours and the Go ones idle side by side, are also written as
    `compare-agent-hour`: the requests and CPU of a real hour."""

    rounds: int = 3
    agent_idle_s: float = 20.0
    agent_changes: int = 2
    ipam_nodes: int = 100
    lifecycle_nodes: int = 200
    lifecycle_window_s: float = 30.0
    lifecycle_timeout_s: float = 10.0
    agent_hour_s: float = 0.0
    # The LoadBalancer comparison (tests/bench/test_compare_lb.py): Services per run, one size
    # after the other; its rounds (0: `rounds`); kube-vip-cloud-provider only up to this many
    # Services (its client is fixed at 5 QPS: about 0.8 s per Service).
    lb_services: tuple[int, ...] = (200,)
    lb_rounds: int = 0
    lb_kubevip_max: int = 1000
    # The whole stack side by side (tests/bench/test_compare_stack.py): kwok Nodes per plane,
    # the window (BENCH_HOUR, when set and BENCH_STACK_WINDOW is not, makes it that many
    # hours), real agents measured per side, LoadBalancer Services kept live, and the period
    # of the trickle (one Service created, one deleted and one CSR every that many seconds).
    stack_nodes: int = 100
    stack_window_s: float = 180.0
    stack_agents: int = 5
    stack_services: int = 10
    stack_churn_s: float = 30.0
    # Joins of a real node per agent (tests/bench/test_compare_join.py), interleaved.
    joins: int = 10
    # Another checkout's `src` (BENCH_BASELINE, e.g. a `git worktree` of an earlier commit): the
    # agent, IPAM and lifecycle rounds run its code too, as "baseline", in the same rounds as
    # ours, so a change is judged against its spread on the same machine at the same time.
    baseline: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


ENV_NAMES = {
    "rounds": "BENCH_ROUNDS",
    "agent_idle_s": "BENCH_AGENT_IDLE",
    "agent_changes": "BENCH_AGENT_CHANGES",
    "ipam_nodes": "BENCH_IPAM_NODES",
    "lifecycle_nodes": "BENCH_LIFECYCLE_NODES",
    "lifecycle_window_s": "BENCH_LIFECYCLE_WINDOW",
    "lifecycle_timeout_s": "BENCH_LIFECYCLE_TIMEOUT",
    "stack_nodes": "BENCH_STACK_NODES",
    "stack_window_s": "BENCH_STACK_WINDOW",
    "stack_agents": "BENCH_STACK_AGENTS",
    "stack_services": "BENCH_STACK_SERVICES",
    "stack_churn_s": "BENCH_STACK_CHURN",
    "lb_rounds": "BENCH_LB_ROUNDS",
    "lb_kubevip_max": "BENCH_LB_KUBEVIP_MAX",
    "joins": "BENCH_JOINS",
}


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Settings from BENCH_* variables (empty means the default); every problem at once."""
    values: dict[str, Any] = {}
    problems = []
    defaults = Settings()
    for field, var in ENV_NAMES.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue
        kind = type(getattr(defaults, field))
        try:
            value = kind(raw)
        except ValueError:
            problems.append(f"{var}={raw!r} is not a number")
            continue
        if value <= 0:
            problems.append(f"{var}={raw!r} must be positive")
        values[field] = value
    hours = env.get("BENCH_HOUR", "").strip()
    try:
        values["agent_hour_s"] = 3600.0 * float(hours or 0)
    except ValueError:
        problems.append(f"BENCH_HOUR={hours!r} is not a number of hours")
    if values.get("agent_changes", 2) % 2:
        problems.append("BENCH_AGENT_CHANGES must be even (each run ends on its first address)")
    if services := env.get("BENCH_LB_SERVICES", "").strip():
        try:
            values["lb_services"] = tuple(int(n) for n in services.split(","))
        except ValueError:
            problems.append(f"BENCH_LB_SERVICES={services!r} is not a comma list of numbers")
        if any(n <= 0 for n in values.get("lb_services", ())):
            problems.append(f"BENCH_LB_SERVICES={services!r} must be positive")
    if baseline := env.get("BENCH_BASELINE", "").strip():
        if not (Path(baseline) / "local_ccm" / "__init__.py").is_file():
            problems.append(f"BENCH_BASELINE={baseline!r} is not a checkout's src directory "
                            "(no local_ccm/__init__.py in it)")  # fmt: skip
        values["baseline"] = str(Path(baseline).resolve())
    if "stack_window_s" not in values and values.get("agent_hour_s"):
        values["stack_window_s"] = values["agent_hour_s"]
    if values.get("stack_window_s", 0) < values.get("agent_hour_s", 0):
        problems.append(
            "BENCH_STACK_WINDOW must be at least BENCH_HOUR (the agents' hour is "
            "the whole stack's window)"
        )
    if problems:
        raise ValueError("; ".join(problems))
    return Settings(**values)
