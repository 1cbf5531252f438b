"""One IPAM run of `make bench-compare`: ours or the Go node-ipam-controller (aa9996c).

A run gets a ClusterCIDR of its own (dual-stack, 8 host bits) selecting a label only its
Nodes carry, starts the controller with leader election off and its probes on loopback,
waits for ``/readyz`` and ``READY_SETTLE`` s more (the Go server answers ``/readyz`` before
its informers have synced; the settle covers both), then creates the run's Nodes from four
threads and polls a paged LIST once a second until every one holds podCIDRs. Whatever the
controller still sends then counts too: Events about the run's Nodes (any reason; an outbox
posts them after the writes, through the same rate limit) are listed once a second, and the
clock runs on until their number has not changed for ``EVENTS_QUIET`` s, for every
implementation alike, so the CPU per 1 000 Nodes counts every request the controller made
(``events_posted`` says how many Events there were; ``allocation_cpu_s`` is the CPU until
allocated alone). Read from
/proc/<pid>: CPU seconds (schedstat of every thread, ns; utime + stime in 10 ms ticks beside
them; plus the CPU of child processes that ended, cutime + cstime: ours makes its self-signed
/metrics certificate in one) at ready (start-up) and over the allocation, VmRSS at ready,
VmHWM at the end. The Go controller's client is fixed at client-go's defaults (5 QPS, burst
10); ours runs once at the same limits and once at its defaults. The Go controller authenticates
with a ``system:masters`` certificate (its own chart's ClusterRole is not ours), ours with
the chart's RBAC and a ServiceAccount token.

The floors (``floor-sync``, ``floor-loop``: tests/bench/floor_ipam.py) run the same way at the
same 5 QPS with ours' token: the least a Python process spends watching Nodes and PATCHing
their CIDRs, for the start-up row against the floor and, beside it, CPU per 1 000 Nodes; and
``floor-decisions``, the loop floor making ours' per-Node decisions without the controller kit,
for CPU per 1 000 Nodes against what any shape of ours' per-Node path would cost.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.integration.ipam import harness
from tests.integration.ipam.objects import cluster_cidr
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.ipam_bench import BITS, POOL_V4, POOL_V6, create_all, list_pod_cidrs, plain_node
from tests.support.processes import (
    Child,
    children_cpu_seconds,
    cpu_seconds,
    free_port,
    memory_kib,
    python_env,
    spawn,
    task_cpu_seconds,
    task_wakeups,
)
from tests.support.waiting import eventually

READY_SETTLE = 3.0
EVENTS_QUIET = 3.0  # no new Event about the run's Nodes for this long: the controller is done
SAME_QPS = ("--kube-api-qps=5", "--kube-api-burst=10")  # client-go's defaults, as the Go one
CREATORS = 4
GO_CLIENT = "client-go defaults, no flag: 5 QPS, burst 10"
POLL = 1.0
FLOOR = Path(__file__).with_name("floor_ipam.py")
FLOORS = ("floor-sync", "floor-loop", "floor-decisions")


@dataclass(frozen=True)
class IpamBench:
    plane: ControlPlane
    kube: Client
    track: Tracker
    namespace: str
    go_binary: Path
    logs: Path
    #: How ours is started: its entry point, or that under cProfile (test_ipam_cpu.py).
    ours: Sequence[str] = (str(harness.BINARY),)
    baseline: str = ""  # another checkout's src, run as "baseline" (BENCH_BASELINE)


def _spawn(bench: IpamBench, impl: str, port: int, qps: Sequence[str], log: Path) -> Child:
    if impl == "go":
        kubeconfig = bench.plane.user_kubeconfig(f"go-ipam-{secrets.token_hex(2)}",
                                                 ["system:masters"])  # fmt: skip
        argv = [str(bench.go_binary), f"--kubeconfig={kubeconfig}",
                "--enable-leader-election=false",
                f"--webserver-bind-address=127.0.0.1:{port}"]  # fmt: skip
    else:
        kubeconfig = bench.plane.token_kubeconfig(harness.SA, bench.namespace)
        program = list(bench.ours)
        if impl in FLOORS:  # the script run as ours is, by the same interpreter
            program = [sys.executable, str(FLOOR), f"--floor-mode={impl.removeprefix('floor-')}"]
        argv = [*program, f"--kubeconfig={kubeconfig}",
                "--enable-leader-election=false", f"--health-probe-address=127.0.0.1:{port}",
                *qps]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", **python_env(impl, bench.baseline)}
    return spawn(f"ipam-{impl}", argv, log, env=env)


def _ready(child: Child, port: int) -> bool:
    if child.exited() is not None:
        raise AssertionError(f"{child.name} exited with {child.exited()}: see {child.log_path}")
    probe = harness.IpamProcess(child, port, child.log_path)
    try:
        return probe.get("/readyz")[0] == 200
    except OSError:
        return False


def _pool(bench: IpamBench, tag: str) -> tuple[str, dict[str, str]]:
    name = f"bench-{tag}-{secrets.token_hex(2)}"
    selects = {"bench-pool": name}
    body = cluster_cidr(name, {}, bits=BITS, ipv4=POOL_V4, ipv6=POOL_V6, sel=selects)
    bench.kube.create(r.CLUSTER_CIDRS, body)
    return name, selects


def _all_allocated(kube: Client, selects: dict[str, str], count: int) -> bool:
    held = list_pod_cidrs(kube, ",".join(f"{k}={v}" for k, v in selects.items()))
    return sum(1 for c in held.values() if c) >= count


def _node_events(kube: Client, pool: str) -> int:
    """Events (any reason) about the run's Nodes, which are named after its pool, in `default`."""
    events = kube.list(r.EVENTS, namespace="default", field_selector="involvedObject.kind=Node")
    prefix = f"{pool}-"
    return sum(1 for e in events["items"] if e["involvedObject"]["name"].startswith(prefix))


def _wait_for_events(kube: Client, pool: str, timeout: float) -> int:
    """Until the run's Node Events stop coming (`EVENTS_QUIET` s without a new one); how many."""
    deadline = time.monotonic() + timeout
    seen, changed = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = _node_events(kube, pool)
        if now != seen:
            seen, changed = now, time.monotonic()
        elif time.monotonic() - changed >= EVENTS_QUIET:
            return now
        time.sleep(POLL)
    raise AssertionError(f"{pool}: Events about its Nodes still coming after {timeout} s ({seen})")


def run_ipam(bench: IpamBench, impl: str, tag: str, *, qps: Sequence[str], count: int,
             timeout: float) -> dict[str, Any]:  # fmt: skip
    """One run of `impl` ("ours", "go", "baseline" or one of `FLOORS`)."""
    pool, selects = _pool(bench, tag)
    port = free_port()
    spawned = time.monotonic()
    child = _spawn(bench, impl, port, qps, bench.logs / f"ipam-{impl}-{tag}.log")
    try:
        eventually(lambda: _ready(child, port), timeout=60, interval=0.1, message="/readyz")
        ready_s = time.monotonic() - spawned
        time.sleep(READY_SETTLE)
        cpu0, ticks0 = task_cpu_seconds(child.pid), cpu_seconds(child.pid)
        wakeups0 = task_wakeups(child.pid)
        children0 = children_cpu_seconds(child.pid)
        rss_ready = memory_kib(child.pid)["VmRSS"]
        bodies = [plain_node(f"{pool}-{i:05d}", selects) for i in range(count)]
        start, created = create_all(bench.kube, bodies, CREATORS)
        eventually(lambda: _all_allocated(bench.kube, selects, count), timeout=timeout,
                   interval=POLL, message=f"{count} Nodes hold podCIDRs")  # fmt: skip
        done = time.monotonic()

        def spent() -> float:  # since ready, child processes that ended included
            return task_cpu_seconds(child.pid) - cpu0 + children_cpu_seconds(child.pid) - children0

        allocated = spent()
        posted = _wait_for_events(bench.kube, pool, timeout)
        drained = time.monotonic()
        cpu, ticks = spent(), cpu_seconds(child.pid) - ticks0
        wakeups = task_wakeups(child.pid) - wakeups0
        hwm = memory_kib(child.pid)["VmHWM"]
    finally:
        child.stop(grace=15)
    _clean(bench.kube, pool, selects)
    return {
        "impl": impl, "tag": tag, "flags": [GO_CLIENT] if impl == "go" else list(qps),
        "nodes": count,
        "spawn_to_ready_s": round(ready_s, 2), "startup_cpu_s": round(cpu0 + children0, 4),
        "startup_children_cpu_s": round(children0, 2),
        "startup_cpu_ticks_s": round(ticks0, 2), "allocation_cpu_s": round(allocated, 4),
        "cpu_s": round(cpu, 4), "cpu_ticks_s": round(ticks, 2),
        "cpu_per_1000_s": round(cpu * 1000 / count, 3),
        "wakeups_per_node": round(wakeups / count, 2),
        "events_posted": posted, "events_after_allocated_s": round(drained - done, 2),
        "create_s": round(created - start, 2), "after_last_create_s": round(done - created, 2),
        "rss_ready_mib": round(rss_ready / 1024, 1), "rss_peak_mib": round(hwm / 1024, 1),
    }  # fmt: skip


def _clean(kube: Client, pool: str, selects: dict[str, str]) -> None:
    """Delete the run's Nodes and pool, so the next controller starts from the same state."""
    selector = ",".join(f"{k}={v}" for k, v in selects.items())
    for node in list_pod_cidrs(kube, selector):
        kube.delete(r.NODES, node)
    kube.patch(r.CLUSTER_CIDRS, pool, {"metadata": {"finalizers": None}}, patch_type="merge")
    kube.delete(r.CLUSTER_CIDRS, pool)


def floor_values(run: dict[str, Any]) -> dict[str, float | None]:
    """What a floor's run is compared on: start-up and CPU at the same 5 QPS."""
    return {
        "ipam_startup_cpu_s": run["startup_cpu_s"],
        "ipam_cpu_per_1000_same_qps_s": run["cpu_per_1000_s"],
        "ipam_rss_ready_mib": run["rss_ready_mib"],
    }


def metric_values(same: dict[str, Any], default: dict[str, Any] | None) -> dict[str, float | None]:
    """The compare metrics of one implementation's runs in a round."""
    return {
        "ipam_cpu_per_1000_same_qps_s": same["cpu_per_1000_s"],
        "ipam_cpu_per_1000_default_s": (default or same)["cpu_per_1000_s"],
        "ipam_all_allocated_same_qps_s": same["after_last_create_s"],
        "ipam_startup_cpu_s": same["startup_cpu_s"],
        "ipam_rss_ready_mib": same["rss_ready_mib"],
        "ipam_rss_peak_mib": same["rss_peak_mib"],
    }
