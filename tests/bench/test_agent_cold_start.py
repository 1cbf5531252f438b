"""Agent benchmark D13: cold start to ``/readyz`` 200, with and without the original chart's
100m CPU limit, and steady-state RSS with metrics on (D13, docs/benchmarks.md).

Every run is a fresh tainted Node and a fresh unprivileged ``local-ccm`` process (the harness's
pattern 1: uid 65532, no capability, a Pod-bound ServiceAccount token under the chart's RBAC)
with metrics and health on (the defaults, inside its namespace) and the flags of agent scenario
A15. Each process starts in a cpu cgroup of its own (tests/support/cgroup.py): unlimited, or with
the CFS quota a kubelet sets for ``limits.cpu: 100m`` (10 000 µs per 100 000 µs). The two kinds
of run alternate, so load changes on this shared machine fall on both alike.

Cold start is from just before the spawn to the first 200 of ``/readyz``. Each poll costs the
agent about 0.6 ms of CPU (measured), which is 6 % of a 100m quota at one poll per 100 ms, so the
interval differs: 10 ms without a limit, 100 ms under it (the resolution of each figure).
Then the agent idles as in A15 (Node initialised, both Events, five no-op passes), its
``/metrics`` is scraped, and VmRSS is read from ``/proc/<pid>/status``.

Numbers are recorded, never asserted; the test fails only when a measurement
could not be taken.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.bench.agent_bench import machine_facts, write_result
from tests.support.agent_process import METRICS_PORT, AgentProcess, agent_for_node
from tests.support.agent_scenarios import A01_ARGS, a01_network
from tests.support.cgroup import (
    A15_FLAGS,
    cpu_cgroup,
    seconds_to_ready,
    steady,
    vm_mib,
)
from tests.support.chart import ShippedRbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import Namespace, NetnsFactory
from tests.support.processes import cpu_seconds

RUNS = 5  # of each kind
KINDS = {"unlimited": None, "cpu_100m": 100}  # millicores
POLL_S = {"unlimited": 0.01, "cpu_100m": 0.1}
READY_TIMEOUT_S = 120.0  # far above the 30 s bound: a slow start is recorded, not cut off
BUDGET = {"unlimited": 5.0, "cpu_100m": 30.0, "rss": 32.0, "rss_target": 25.0}


# ------------------------------------------------------------------ pure: summary and table
def summarise(runs: Mapping[str, Sequence[float]], rss: Sequence[float]) -> dict[str, float]:
    """Median and max of each kind of run, and of the steady RSS (all runs)."""
    out: dict[str, float] = {}
    for kind, values in runs.items():
        out[f"{kind}_median_s"] = round(statistics.median(values), 3)
        out[f"{kind}_max_s"] = round(max(values), 3)
    out["rss_steady_median_mib"] = round(statistics.median(rss), 1)
    out["rss_steady_max_mib"] = round(max(rss), 1)
    return out


def table(summary: Mapping[str, float], runs: int) -> str:
    """The markdown table of docs/benchmarks.md (D13)."""
    s = summary
    rows = [
        ("cold start → `/readyz` 200, no CPU limit", f"≤ {BUDGET['unlimited']:g} s",
         f"median {s['unlimited_median_s']:.2f} s, max {s['unlimited_max_s']:.2f} s ({runs} runs)"),
        ("cold start → `/readyz` 200, 100m CPU limit", f"≤ {BUDGET['cpu_100m']:g} s",
         f"median {s['cpu_100m_median_s']:.2f} s, max {s['cpu_100m_max_s']:.2f} s ({runs} runs)"),
        ("steady-state RSS, metrics on (A15)",
         f"≤ {BUDGET['rss']:g} MiB (target {BUDGET['rss_target']:g} MiB)",
         f"median {s['rss_steady_median_mib']:.1f} MiB, max {s['rss_steady_max_mib']:.1f} MiB"
         f" ({2 * runs} processes)"),
    ]  # fmt: skip
    lines = ["| measure | budget | measured |", "|---|---|---|"]
    return "\n".join([*lines, *(f"| {a} | {b} | {c} |" for a, b, c in rows)])


# ------------------------------------------------------------------ one run
@dataclass(frozen=True)
class Bench:
    """The fixtures every run uses."""

    control_plane: ControlPlane
    kube: Client
    make_node: NodeFactory
    track: Tracker
    rbac: ShippedRbac
    namespace: str
    labels: Mapping[str, str]
    ns: Namespace
    logs: Path

    def agent_for_new_node(self, log: str) -> tuple[str, AgentProcess]:
        """A fresh tainted Node and its (unstarted) agent with the A15 flags."""
        name = self.make_node(uninitialized=True)["metadata"]["name"]
        agent = agent_for_node(
            self.control_plane, self.kube, self.track, rbac=self.rbac, namespace=self.namespace,
            node=name, netns=self.ns.name, argv=[*A01_ARGS, *A15_FLAGS],
            log_path=self.logs / log, labels=self.labels,
        )  # fmt: skip
        return name, agent


def one_run(bench: Bench, kind: str, log: str) -> dict[str, Any]:
    """One fresh Node and agent process in a fresh cgroup of ``kind``."""
    name, agent = bench.agent_for_new_node(log)
    with cpu_cgroup(KINDS[kind]) as cgroup:
        agent.prefix = cgroup.prefix
        try:
            ready = seconds_to_ready(agent, timeout=READY_TIMEOUT_S, interval=POLL_S[kind])
            cpu_at_ready = cpu_seconds(agent.pid)
            in_cgroup = cgroup.holds(agent.pid)
            steady(agent, bench.kube, name, timeout=60)
            agent.metrics(METRICS_PORT)  # a scrape, as Prometheus would, before reading memory
            rss, hwm = vm_mib(agent), vm_mib(agent, "VmHWM")
            stat = cgroup.stat()
        finally:
            code = agent.stop()
    return {"kind": kind, "node": name, "ready_s": round(ready, 3),
            "cpu_s_at_ready": round(cpu_at_ready, 2), "in_cgroup": in_cgroup,
            "rss_steady_mib": round(rss, 1), "hwm_mib": round(hwm, 1),
            "nr_throttled": stat.get("nr_throttled"), "exit_code": code}  # fmt: skip


def test_agent_cold_start_and_steady_rss(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    result: dict[str, Any] = {**machine_facts(), "kube_apiserver": control_plane.version,
                              "flags": [*A01_ARGS, *A15_FLAGS], "poll_interval_s": POLL_S,
                              "runs_per_kind": RUNS}  # fmt: skip
    bench = Bench(control_plane, kube, make_node, track, shipped_agent_rbac, test_namespace,
                  test_labels, a01_network(netns), test_artifacts)  # fmt: skip
    detail = [
        one_run(bench, kind, f"agent-{i}-{kind}.log")
        for i in range(RUNS)
        for kind in KINDS  # alternating: the load of the moment falls on both kinds
    ]
    runs = {kind: [d["ready_s"] for d in detail if d["kind"] == kind] for kind in KINDS}
    rss = [d["rss_steady_mib"] for d in detail]
    result.update(runs=runs, rss_steady_mib=rss, runs_detail=detail)
    result["summary"] = summarise(runs, rss)
    write_result("cold-start", result)
    print(table(result["summary"], RUNS))
    assert all(d["in_cgroup"] and d["exit_code"] == 0 for d in detail), detail
    assert all(d["nr_throttled"] for d in detail if d["kind"] == "cpu_100m"), detail
