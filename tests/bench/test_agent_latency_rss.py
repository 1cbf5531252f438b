"""Agent benchmark: address-change latency and steady-state RSS (docs/benchmarks.md).

Three runs, each a fresh agent process with metrics on (the default 127.0.0.1:8092 inside its
namespace) and a fresh tainted Node. After the Node is initialised and a warm-up, 50 address
changes are made in the namespace (``ip addr add`` the new address, ``ip addr del`` the old
one; ExternalIP follows the route lookup of 8.8.8.8); the latency of each is the time from
just before the ``ip`` command to the admin watch delivering the Node version with the new
ExternalIP. Then VmRSS of the agent process is read after a quiet pause and a metrics scrape.

Flags: defaults (``--reconcile-interval=10s --resync-interval=30m``, metrics and health on)
plus ``--settle-time=0s``, so a replaced address is written on the first detection (no
second detection to wait for) and the latency is the debounce (250 ms quiet) plus one pass
and one PATCH.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.bench.agent_bench import (
    FLIP,
    AgentIdentity,
    AgentProcess,
    NodeWatcher,
    addresses_of,
    flip_commands,
    is_tainted,
    machine_facts,
    node_uplink,
    percentile,
    sample_value,
    write_result,
)
from tests.support.cleanup import NodeFactory
from tests.support.netns import NetnsFactory, Uplink
from tests.support.relay import LoopbackRelay

RUNS = 3
CHANGES = 50  # per run; an even number, so every run starts from FLIP[0]
FLAGS = ("--settle-time=0s",)
PACING = 0.5  # seconds between one change being seen and the next change: independent events
WARM_UP = 5.0  # seconds after the taint is removed: Events sent, watch echo handled
QUIET = 3.0  # seconds without changes before the steady-state RSS is read


def change_address(up: Uplink, watcher: NodeWatcher, k: int) -> float:
    old, new = FLIP[k % 2], FLIP[(k + 1) % 2]
    started = time.monotonic()
    up.node.batch(*flip_commands(old, new))
    seen = watcher.wait_for(lambda n: ("ExternalIP", new) in addresses_of(n), timeout=10)
    return seen - started


def rss_snapshot(agent: AgentProcess) -> dict[str, float]:
    exposition = agent.scrape()  # a scrape, as Prometheus would, before reading memory
    kib = agent.status_kib()
    own = sample_value(exposition, "process_resident_memory_bytes") or 0.0
    return {"rss_mib": round(kib["VmRSS"] / 1024, 1), "hwm_mib": round(kib["VmHWM"] / 1024, 1),
            "self_reported_rss_mib": round(own / 2**20, 1)}  # fmt: skip


def one_run(
    kube: Client, make_node: NodeFactory, up: Uplink, kubeconfig: Path, log: Path
) -> dict[str, Any]:
    node = make_node(uninitialized=True)
    name, rv = node["metadata"]["name"], node["metadata"]["resourceVersion"]
    with NodeWatcher(kube, name, rv) as watcher:
        agent = AgentProcess.start(up.node.name, [f"--node-name={name}", *FLAGS], kubeconfig, log)
        try:
            untainted = watcher.wait_for(lambda n: not is_tainted(n), timeout=60) - agent.started
            time.sleep(WARM_UP)  # bench pacing, not a wait for a condition
            warm = rss_snapshot(agent)
            latencies = []
            for k in range(CHANGES):
                latencies.append(change_address(up, watcher, k))
                time.sleep(PACING)
            time.sleep(QUIET)
            steady = rss_snapshot(agent)
        finally:
            code = agent.stop()
    return {"node": name, "start_to_untaint_s": round(untainted, 3), "warm": warm,
            "steady": steady, "latencies_s": [round(x, 4) for x in latencies],
            "exit_code": code}  # fmt: skip


def test_agent_address_latency_and_rss(
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    agent_identity: AgentIdentity,
    test_artifacts: Path,
) -> None:
    result: dict[str, Any] = {**machine_facts(), "kube_apiserver": agent_identity.kube_version,
                              "flags": ["<defaults>", *FLAGS], "runs": RUNS,
                              "changes_per_run": CHANGES}  # fmt: skip
    up = node_uplink(netns)
    kubeconfig = agent_identity.kubeconfig
    with LoopbackRelay(up.node.name, ("127.0.0.1", agent_identity.api_port)):
        runs = [
            one_run(kube, make_node, up, kubeconfig, test_artifacts / f"agent-{i}.log")
            for i in range(RUNS)
        ]
    latencies = [x for run in runs for x in run["latencies_s"]]
    result["runs_detail"] = runs
    result["summary"] = {
        "changes": len(latencies),
        "latency_p50_s": round(percentile(latencies, 50), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3),
        "latency_max_s": round(max(latencies), 3),
        "rss_warm_median_mib": statistics.median(r["warm"]["rss_mib"] for r in runs),
        "rss_steady_median_mib": statistics.median(r["steady"]["rss_mib"] for r in runs),
        "rss_steady_max_mib": max(r["steady"]["rss_mib"] for r in runs),
        "hwm_median_mib": statistics.median(r["steady"]["hwm_mib"] for r in runs),
    }
    write_result("latency-rss", result)
    assert len(latencies) >= 50, result
    assert [r["exit_code"] for r in runs] == [0] * RUNS, result
