"""One node-lifecycle-controller run of `make bench-compare`: ours or the Go one (v0.3.0).

The plane holds N kwok Nodes, Ready, each with a loopback InternalIP (127.1.x.y: Linux
answers on all of 127/8). A run starts the controller with default flags except
``--not-ready-timeout`` (both take the same value), its Lease in the bench namespace, and:

1. waits until it leads (ours: ``/readyz``; Go: its Lease names a holder) and ``SETTLE`` s;
2. measures a window: CPU seconds (schedstat of every thread) and RSS from /proc, API
   requests and response bytes from the apiserver's own counters, minus a background window
   measured without any controller;
3. creates one Node tainted ``ToBeDeletedByClusterAutoscaler`` (what both manage by default),
   Ready=Unknown since now, whose InternalIP is an unused address of the bench's veth /28
   (nothing answers, nothing leaves the machine), `deletion_phase` s after the window, and
   times its deletion; the figure is
   deleted − (created + timeout). The Go controller starts its own clock when it first sees
   the Node NotReady (every 30 s) and pings 3 times with a 5 s timeout; ours reads the
   condition's lastTransitionTime. Both as shipped.

The Go controller pings over a raw socket (pro-bing, privileged): it runs as root, as ours
does, in the bench's network namespace.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import resources as r
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.lifecycle_bench import (
    BINARY,
    by_request,
    counter_delta,
    net_rates,
    per_hour,
    read_counters,
)
from tests.support.lifecycle_harness import AUTOSCALER_TAINT
from tests.support.processes import (
    Child,
    free_port,
    memory_kib,
    python_env,
    spawn,
    task_cpu_seconds,
)
from tests.support.waiting import eventually

SETTLE = 5.0
GO_PASS_S = 30.0  # the Go controller's --reconcile-interval default


def deletion_phase(round_: int, rounds: int) -> float:
    """Seconds to wait before the unreachable Node is created in round `round_`: spread evenly
    over one pass of the Go controller, so that its 30 s loop is met at different points."""
    return round(GO_PASS_S * (round_ + 0.5) / rounds, 1)


DELETE_WAIT = 120.0  # beyond the timeout: the Go controller's 30 s pass and 5 s of pings


@dataclass(frozen=True)
class LifecycleBench:
    plane: ControlPlane
    kube: Client
    namespace: str
    kubeconfig: Path  # ours: the shipped RBAC's ServiceAccount token
    go_binary: Path
    make_node: NodeFactory
    silent: Sequence[str]  # unused addresses of the bench's /28
    logs: Path
    baseline: str = ""  # another checkout's src, run as "baseline" (BENCH_BASELINE)


@dataclass
class Running:
    child: Child
    ready: Callable[[], bool]


def _start(bench: LifecycleBench, impl: str, lease: str, extra: Sequence[str],
           log: Path) -> Running:  # fmt: skip
    if impl != "go":
        lease = bench.namespace  # the shipped RBAC names the one Lease it may update
    common = [f"--namespace={bench.namespace}", f"--leader-elect-id={lease}", *extra]
    if impl == "go":
        kubeconfig = bench.plane.user_kubeconfig(f"go-nlc-{lease[-4:]}", ["system:masters"])
        argv = [str(bench.go_binary), f"--kubeconfig={kubeconfig}", *common]
        child = spawn("lifecycle-go", argv, log, env={"PATH": "/usr/bin:/bin"})
        return Running(child, lambda: _holds(bench.kube, bench.namespace, lease))
    health = free_port()
    argv = [str(BINARY), f"--kubeconfig={bench.kubeconfig}", *common,
            f"--health-probe-bind-address=127.0.0.1:{health}"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", **python_env(impl, bench.baseline)}
    child = spawn(f"lifecycle-{impl}", argv, log, env=env)
    return Running(child, lambda: _http_ok(health, "/readyz"))


def _holds(kube: Client, namespace: str, lease: str) -> bool:
    try:
        spec = kube.get(r.LEASES, lease, namespace=namespace).get("spec") or {}
    except ApiError:
        return False
    return bool(spec.get("holderIdentity"))


def _http_ok(port: int, path: str) -> bool:
    import urllib.request  # noqa: PLC0415 - only the readiness probe speaks HTTP here

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def _wait_ready(running: Running) -> float:
    spawned = time.monotonic()

    def ready() -> bool:
        if running.child.exited() is not None:
            raise AssertionError(f"{running.child.name} exited: see {running.child.log_path}")
        return running.ready()

    eventually(ready, timeout=90, interval=0.2, message=f"{running.child.name} leads")
    return time.monotonic() - spawned


def window(plane: ControlPlane, pid: int | None, seconds: float) -> dict[str, Any]:
    """API counters (and the process's CPU and RSS, when `pid`) over `seconds`."""
    before, t0 = read_counters(plane), time.monotonic()
    cpu0 = task_cpu_seconds(pid) if pid else 0.0
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    delta = counter_delta(before, read_counters(plane))
    out: dict[str, Any] = {
        "seconds": round(elapsed, 1),
        "requests": by_request(delta, "apiserver_request_total"),
        "response_bytes": by_request(delta, "apiserver_response_sizes_sum"),
    }
    if pid:
        cpu = task_cpu_seconds(pid) - cpu0
        out |= {"cpu_s": round(cpu, 3), "cpu_s_per_hour": per_hour(cpu, elapsed),
                "rss_mib": round(memory_kib(pid)["VmRSS"] / 1024, 1)}  # fmt: skip
    return out


def net_of(measured: dict[str, Any], background: dict[str, Any]) -> dict[str, float]:
    """The controller's share of the apiserver's counters, per hour."""
    ratio = measured["seconds"] / background["seconds"]
    requests = net_rates(measured["requests"], background["requests"], ratio)
    sizes = net_rates(measured["response_bytes"], background["response_bytes"], ratio)
    return {
        "requests_per_hour": per_hour(sum(requests.values()), measured["seconds"]),
        "response_bytes_per_hour": per_hour(sum(sizes.values()), measured["seconds"]),
    }


class Deletions:
    """An admin watch on one Node name; the monotonic time it was deleted."""

    def __init__(self, kube: Client, name: str) -> None:
        self.stream = kube.watch(r.NODES, field_selector=f"metadata.name={name}",
                                 timeout_seconds=600, allow_bookmarks=False)  # fmt: skip
        self.seen: queue.Queue[float] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if event.type == "DELETED":
                    self.seen.put(time.monotonic())
        except (ApiError, OSError):
            pass  # closed

    def wait(self, timeout: float) -> float | None:
        try:
            return self.seen.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.stream.close()
        self.thread.join(timeout=10)


def _deletion(bench: LifecycleBench, timeout_s: float, tag: str) -> float | None:
    name = f"bench-unreachable-{tag}-{secrets.token_hex(2)}"
    watch = Deletions(bench.kube, name)
    try:
        created = time.monotonic()
        bench.make_node(name, taints=[AUTOSCALER_TAINT], ready="Unknown",
                        ready_since=datetime.now(UTC),
                        addresses=[{"type": "InternalIP", "address": bench.silent[0]}])  # fmt: skip
        deleted = watch.wait(timeout_s + DELETE_WAIT)
    finally:
        watch.close()
    return None if deleted is None else round(deleted - created - timeout_s, 3)


def run_lifecycle(bench: LifecycleBench, impl: str, tag: str, *, window_s: float,
                  background: dict[str, Any], timeout_s: float,
                  phase_s: float) -> dict[str, Any]:  # fmt: skip
    lease = f"bench-{impl}-{tag}-{secrets.token_hex(2)}"
    flags = [f"--not-ready-timeout={timeout_s:g}s"]
    running = _start(bench, impl, lease, flags, bench.logs / f"lifecycle-{impl}-{tag}.log")
    out: dict[str, Any] = {"impl": impl, "tag": tag, "flags": flags}
    try:
        out["start_to_leading_s"] = round(_wait_ready(running), 2)
        time.sleep(SETTLE)
        out["window"] = window(bench.plane, running.child.pid, window_s)
        out["api"] = net_of(out["window"], background)
        time.sleep(phase_s)
        out["phase_s"] = phase_s
        out["timeout_to_deleted_s"] = _deletion(bench, timeout_s, tag)
    finally:
        running.child.stop(grace=15)
    return out


def run_empty(bench: LifecycleBench, impl: str, tag: str, window_s: float) -> dict[str, Any]:
    """RSS and CPU of a controller whose --node-selector matches no Node: the cost at 0 Nodes
    (Lease renewals, the process itself)."""
    lease = f"bench-empty-{impl}-{tag}-{secrets.token_hex(2)}"
    flags = ["--node-selector=local-ccm-bench/none=1"]
    running = _start(bench, impl, lease, flags, bench.logs / f"lifecycle-empty-{impl}-{tag}.log")
    try:
        _wait_ready(running)
        time.sleep(SETTLE)
        pid, t0 = running.child.pid, time.monotonic()
        cpu0 = task_cpu_seconds(pid)
        time.sleep(window_s)
        cpu, elapsed = task_cpu_seconds(pid) - cpu0, time.monotonic() - t0
        return {"rss_mib": round(memory_kib(pid)["VmRSS"] / 1024, 1),
                "cpu_s_per_hour": per_hour(cpu, elapsed)}  # fmt: skip
    finally:
        running.child.stop(grace=15)


def metric_values(run: dict[str, Any], empty: dict[str, Any]) -> dict[str, float | None]:
    return {
        "lifecycle_rss_mib": run["window"]["rss_mib"],
        "lifecycle_rss_empty_mib": empty["rss_mib"],
        "lifecycle_cpu_empty_s_per_hour": empty["cpu_s_per_hour"],
        "lifecycle_cpu_s_per_hour": run["window"]["cpu_s_per_hour"],
        "lifecycle_api_requests_per_hour": run["api"]["requests_per_hour"],
        "lifecycle_api_bytes_per_hour": round(run["api"]["response_bytes_per_hour"] / 1e6, 3),
        "lifecycle_timeout_to_deleted_s": run["timeout_to_deleted_s"],
    }
