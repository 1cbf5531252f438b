"""One agent run of `make bench-compare`: ours (`local-ccm`) or the Go original (v0.2.1).

Both run the same way: a fresh tainted Node, the process started in the bench's network
namespace with ``ip netns exec`` (the loopback relay carries its API connection to the audited
apiserver), default flags plus ``--node-name``. Each run authenticates as a user of its own,
so the audit log attributes every request: ours with the chart's agent RBAC, the Go agent
with a ``system:masters`` certificate (its own chart's ClusterRole is not ours; the authorizer
is on the server and costs the client nothing). An admin watch on the Node times:

- start → addresses written, start → taint removed (from just before the spawn);
- start-up requests: the user's requests in the audit log up to ``STARTUP_SETTLE`` s after
  the taint was removed;
- idle: CPU seconds (schedstat of every thread, ns) and requests over ``idle_s``, per hour;
- steady RSS: VmRSS after the idle window (ours after a metrics scrape, metrics on);
- address change → status: ``ip addr add`` the new address, ``ip addr del`` the old one,
  until the watch delivers the Node with the new ExternalIP.

The floors (``floor-sync``, ``floor-loop``: tests/bench/floor_agent.py) run the same way with
ours' identity and flags, for the start-up only (no idle window, no address change): the least
a Python process spends making ours' start-up requests, with and without an event loop.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.bench.agent_bench import (
    FLIP,
    LOCAL_CCM,
    AgentProcess,
    NodeWatcher,
    addresses_of,
    flip_commands,
    grant_agent,
    is_tainted,
)
from tests.support import nodes
from tests.support import resources as r
from tests.support.audit import AuditLog
from tests.support.chart import ShippedRbac
from tests.support.controlplane import ControlPlane
from tests.support.netns import Uplink
from tests.support.processes import (
    cpu_seconds,
    memory_kib,
    python_env,
    spawn,
    task_cpu_seconds,
)

STARTUP_SETTLE = 3.0  # s after the taint is removed; the Go agent's next pass is 10 s away
WAIT = 60.0  # s for any single observation; a run that does not see it fails loudly
CHANGE_WAIT = 30.0  # the Go agent notices an address change on its next 10 s pass
PAUSE = 1.0  # s between one change being seen and the next
FLOOR = Path(__file__).with_name("floor_agent.py")
FLOORS = ("floor-sync", "floor-loop")


@dataclass(frozen=True)
class AgentBench:
    plane: ControlPlane
    kube: Client
    audit: AuditLog
    up: Uplink
    rbac: ShippedRbac
    go_binary: Path
    logs: Path
    baseline: str = ""  # another checkout's src, run as "baseline" (BENCH_BASELINE)


def _identity(bench: AgentBench, impl: str, user: str) -> Path:
    if impl in ("ours", "baseline") or impl in FLOORS:
        grant_agent(bench.kube, user, {}, lambda *a, **k: None, bench.rbac)
        return bench.plane.user_kubeconfig(user, [])
    return bench.plane.user_kubeconfig(user, ["system:masters"])


def _start(bench: AgentBench, impl: str, node: str, kubeconfig: Path, log: Path) -> AgentProcess:
    program = {"ours": [LOCAL_CCM], "baseline": [LOCAL_CCM], "go": [str(bench.go_binary)]}.get(impl)
    if program is None:  # a floor: the script run as ours is, by the same interpreter
        program = [sys.executable, str(FLOOR), f"--floor-mode={impl.removeprefix('floor-')}"]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
    env |= python_env(impl, bench.baseline)
    argv = [*program, f"--kubeconfig={kubeconfig}", f"--node-name={node}"]
    started = time.monotonic()
    cmd = ["ip", "netns", "exec", bench.up.node.name, *argv]
    return AgentProcess(spawn(f"agent-{impl}", cmd, log, env=env), bench.up.node.name, started)


def _change(bench: AgentBench, watcher: NodeWatcher, k: int) -> float:
    old, new = FLIP[k % 2], FLIP[(k + 1) % 2]
    started = time.monotonic()
    bench.up.node.batch(*flip_commands(old, new))
    seen = watcher.wait_for(lambda n: ("ExternalIP", new) in addresses_of(n), timeout=CHANGE_WAIT)
    return seen - started


def run_agent(
    bench: AgentBench, impl: str, tag: str, *, idle_s: float, changes: int
) -> dict[str, Any]:
    """One run; `changes` must be even so that the next run starts from FLIP[0]."""
    user, name = f"bench-{impl}-{tag}-{secrets.token_hex(2)}", f"bench-{impl}-{tag}"
    kubeconfig = _identity(bench, impl, user)
    node = bench.kube.create(r.NODES, nodes.node_body(name, {}, uninitialized=True))
    out: dict[str, Any] = {"impl": impl, "user": user, "node": name}
    with NodeWatcher(bench.kube, name, node["metadata"]["resourceVersion"]) as watcher:
        agent = _start(bench, impl, name, kubeconfig, bench.logs / f"agent-{impl}-{tag}.log")
        try:
            out |= _measure(bench, agent, watcher, user=user, idle_s=idle_s, changes=changes)
        finally:
            out["exit_code"] = agent.stop()
    bench.kube.delete(r.NODES, name)
    return out


def _measure(bench: AgentBench, agent: AgentProcess, watcher: NodeWatcher, *, user: str,
             idle_s: float, changes: int) -> dict[str, Any]:  # fmt: skip
    addressed = watcher.wait_for(lambda n: bool(addresses_of(n)), timeout=WAIT)
    untainted = watcher.wait_for(lambda n: not is_tainted(n), timeout=WAIT)
    time.sleep(STARTUP_SETTLE)
    idle_from, t0 = datetime.now(UTC), time.monotonic()
    cpu0, fine0 = cpu_seconds(agent.pid), task_cpu_seconds(agent.pid)
    startup = bench.audit.requests(user=user, until=idle_from)
    time.sleep(idle_s)
    cpu, fine = cpu_seconds(agent.pid) - cpu0, task_cpu_seconds(agent.pid) - fine0
    elapsed, idle_to = time.monotonic() - t0, datetime.now(UTC)
    idle = bench.audit.requests(user=user, since=idle_from, until=idle_to)
    if agent.child.name == "agent-ours":
        agent.scrape()  # metrics on: read memory as a Prometheus scrape leaves it
    rss_kib = memory_kib(agent.pid)["VmRSS"]
    latencies = []
    for k in range(changes):
        latencies.append(_change(bench, watcher, k))
        time.sleep(PAUSE)
    return {
        "start_to_addresses_s": round(addressed - agent.started, 3),
        "start_to_untaint_s": round(untainted - agent.started, 3),
        "startup_requests": len(startup),
        "startup_request_kinds": sorted(f"{e.verb} {e.resource}" for e in startup),
        "idle_s": round(elapsed, 1),
        "idle_requests": len(idle),
        "idle_requests_per_hour": round(len(idle) * 3600 / elapsed, 1),
        "idle_cpu_ticks_s": round(cpu, 3),
        "idle_cpu_s": round(fine, 4),
        "idle_cpu_s_per_hour": round(fine * 3600 / elapsed, 3),
        "rss_mib": round(rss_kib / 1024, 1),
        "address_change_s": [round(x, 3) for x in latencies],
    }


def floor_values(run: dict[str, Any]) -> dict[str, float | None]:
    """What a floor's run measures: its start-up (and, for the record, its RSS)."""
    return {
        "agent_start_to_untaint_s": run["start_to_untaint_s"],
        "agent_start_to_addresses_s": run["start_to_addresses_s"],
        "agent_startup_requests": run["startup_requests"],
        "agent_rss_mib": run["rss_mib"],
    }


def metric_values(run: dict[str, Any]) -> dict[str, float | None]:
    """The compare metrics of one run (median of its address changes)."""
    changes = run["address_change_s"]
    return {
        "agent_rss_mib": run["rss_mib"],
        "agent_api_requests_per_node_hour": run["idle_requests_per_hour"],
        "agent_start_to_untaint_s": run["start_to_untaint_s"],
        "agent_start_to_addresses_s": run["start_to_addresses_s"],
        "agent_idle_cpu_s_per_node_hour": run["idle_cpu_s_per_hour"],
        "agent_startup_requests": run["startup_requests"],
        "agent_address_change_s": round(statistics.median(changes), 3) if changes else None,
    }
