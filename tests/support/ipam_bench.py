"""node-ipam-controller at scale (scenario I27).

The controller runs as a subprocess of its real entry point with the shipped RBAC against a
dedicated scale plane (tests/support/dedicated.py). Nodes are created at once from a thread
pool; the clock stops when the controller's own counter of successful Node PATCHes reaches the
Node count, and one paged LIST then checks every Node. Controller CPU time and RSS come from
/proc/<pid>. The allocator's CPU time is measured in-process on the pure `Allocator`, fed the
same Nodes (same labels, same pool) in the same order, with `time.thread_time()`.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_ccm.ipam.core.allocator import Allocation, Allocator
from local_ccm.ipam.core.model import FINALIZER, project_cluster_cidr, project_node
from local_ccm.kube.client import Client, Obj
from tests.integration.ipam import harness
from tests.integration.ipam.objects import cluster_cidr
from tests.support import benchrecord, names
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.kwok import create_fake_nodes
from tests.support.processes import cpu_seconds, memory_kib
from tests.support.waiting import eventually

ROOT, RESULTS = benchrecord.ROOT, benchrecord.RESULTS
POOL_V4, POOL_V6, BITS = "10.128.0.0/9", "fd00:128::/104", 8
SCALE_LABEL = {"scale": "1"}
NODE_PATCHES_OK = ("local_ccm_ipam_node_writes_total", {"code": "200"})
MIB = 1024 * 1024


# ------------------------------------------------------------------ /proc
@dataclass(frozen=True)
class ProcStats:
    cpu_seconds: float  # user + system, all threads
    rss_mib: float
    hwm_mib: float  # peak RSS


def proc_stats(pid: int) -> ProcStats:
    kib = memory_kib(pid)
    return ProcStats(cpu_seconds(pid), kib["VmRSS"] * 1024 / MIB, kib["VmHWM"] * 1024 / MIB)


# ------------------------------------------------------------------ objects
def node_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(count)]


def plain_node(name: str, labels: Mapping[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


def make_big_pool(kube: Client, track: Tracker, name: str, labels: Mapping[str, str]) -> Obj:
    """Pool `big` of I27 ({10.128.0.0/9, fd00:128::/104}, bits 8), selecting `labels`."""
    body = cluster_cidr(name, labels, bits=BITS, ipv4=POOL_V4, ipv6=POOL_V6, sel=labels)
    created = kube.create(r.CLUSTER_CIDRS, body)
    track(r.CLUSTER_CIDRS, name)
    return created


def create_all(kube: Client, bodies: Sequence[Obj], workers: int) -> tuple[float, float]:
    """Create the Nodes from `workers` threads; (start, end) on the monotonic clock."""
    start = time.monotonic()
    create_fake_nodes(lambda body: kube.create(r.NODES, body), bodies, workers=workers)
    return start, time.monotonic()


def list_pod_cidrs(kube: Client, selector: str) -> dict[str, list[str]]:
    """Node name -> spec.podCIDRs of every Node matching `selector` (paged LIST)."""
    out: dict[str, list[str]] = {}
    token: str | None = None
    while True:
        page = kube.list(r.NODES, label_selector=selector, limit=500, continue_token=token)
        for item in page["items"]:
            out[item["metadata"]["name"]] = list((item.get("spec") or {}).get("podCIDRs") or [])
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return out


def block_indices(cidrs: Mapping[str, list[str]], pool: str, bits: int = BITS) -> list[int]:
    """Sorted index of every held CIDR inside `pool` (blocks of 2**bits addresses), for the
    exactness checks; CIDRs of the other family or of other pools are left out."""
    net = ipaddress.ip_network(pool)
    held = (ipaddress.ip_network(c) for node in cidrs.values() for c in node)
    return sorted(
        (int(c.network_address) - int(net.network_address)) >> bits
        for c in held
        if c.version == net.version and c.subnet_of(net)  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------ the controller
@dataclass
class Controller:
    proc: harness.IpamProcess
    #: (monotonic time, successful Node PATCHes) sampled by `wait_patches`, for the plots.
    progress: list[tuple[float, float]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.child.pid

    def patches(self) -> float:
        return self.proc.metric(*NODE_PATCHES_OK)

    def events_dropped(self) -> float:
        return self.proc.metric("local_ccm_ipam_events_dropped_total")

    def wait_patches(self, count: int, timeout: float) -> float:
        """Wait until `count` Node PATCHes succeeded; the monotonic time it was seen."""

        def sample() -> bool:
            done = self.patches()
            self.progress.append((time.monotonic(), done))
            return done >= count

        eventually(sample, timeout=timeout, interval=0.25, message=f"{count} Node PATCHes")
        return time.monotonic()

    def progress_since(self, start: float) -> list[list[float]]:
        """`progress` as [seconds since `start`, Node PATCHes] pairs, for the result file."""
        return [[round(t - start, 2), n] for t, n in self.progress]


@contextmanager
def running_controller(
    kube: Client,
    track: Tracker,
    plane: ControlPlane,
    *,
    namespace: str,
    labels: Mapping[str, str],
    name: str,
    log_path: Path,
    args: Sequence[str] = (),
) -> Iterator[Controller]:
    """The controller with the shipped RBAC and a ServiceAccount token,
    stopped (SIGTERM) when the block ends."""
    harness.apply_rbac(
        kube, track, labels, name=name, namespace=namespace, lease_name=f"{name[:40]}-lease",
        event_namespace="default",
    )  # fmt: skip
    kubeconfig = plane.token_kubeconfig(harness.SA, namespace)
    proc = harness.start(["--enable-leader-election=false", *args], kubeconfig, log_path)
    try:
        proc.wait_ready(timeout=60)
        yield Controller(proc)
    finally:
        proc.stop()


def pool_allocated(kube: Client, pool: str) -> int:
    status = kube.get(r.CLUSTER_CIDRS, pool).get("status") or {}
    return int((status.get("ipv4") or {}).get("allocated") or 0)


def wait_allocated(kube: Client, pool: str, count: int) -> int:
    return eventually(lambda: pool_allocated(kube, pool) == count and count, timeout=30,
                      message=f"status.ipv4.allocated = {count}")  # fmt: skip


# ------------------------------------------------------------------ the pure allocator
def allocator_cpu(names_: Sequence[str], labels: Mapping[str, str]) -> dict[str, float]:
    """Thread CPU time of the pure Allocator for the same Nodes and pool: every allocation
    decision plus its commit, then start-up recovery of the same Nodes holding their CIDRs."""
    body = cluster_cidr("big", {}, bits=BITS, ipv4=POOL_V4, ipv6=POOL_V6, sel=labels)
    body["metadata"].update(uid="big", generation=1, finalizers=[FINALIZER])
    cc = project_cluster_cidr(body)
    pool = cc.pool()  # type: ignore[union-attr]
    views = [project_node(_node_obj(n, labels)) for n in names_]
    allocator = Allocator()
    allocator.set_pool(pool, ready=True, uid="big")
    decisions: list[float] = []
    held: list[Obj] = []
    start = time.thread_time()
    for view in views:
        before = time.thread_time()
        result = allocator.allocate(view)
        allocator.commit(view.uid)
        decisions.append(time.thread_time() - before)
        assert isinstance(result, Allocation), result
        held.append(_node_obj(view.name, labels, [str(c) for c in result.cidrs]))
    allocate_total = time.thread_time() - start
    fresh = Allocator()
    fresh.set_pool(pool, ready=True, uid="big")
    holding = [project_node(obj) for obj in held]
    start = time.thread_time()
    fresh.recover(holding)
    recover_total = time.thread_time() - start
    decisions.sort()
    return {
        "allocate_and_commit_total_s": round(allocate_total, 4),
        "decision_p50_ms": round(decisions[len(decisions) // 2] * 1000, 4),
        "decision_p99_ms": round(decisions[int(len(decisions) * 0.99)] * 1000, 4),
        "recover_total_s": round(recover_total, 4),
    }


def _node_obj(name: str, labels: Mapping[str, str], cidrs: list[str] | None = None) -> Obj:
    obj: Obj = {"metadata": {"name": name, "uid": f"uid-{name}", "labels": dict(labels),
                             "creationTimestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
    if cidrs:
        obj["spec"] = {"podCIDR": cidrs[0], "podCIDRs": cidrs}
    return obj


# ------------------------------------------------------------------ results
def machine_facts(binaries: Binaries, plane: ControlPlane) -> dict[str, Any]:
    return benchrecord.machine_facts(
        go=benchrecord.command_output("go", "version"), kube_apiserver=plane.version,
        pins={"etcd": binaries.pins.etcd, "kwok": binaries.pins.kwok},
    )  # fmt: skip


def write_result(name: str, result: dict[str, Any]) -> Path:
    return benchrecord.write_result("ipam", name, result)


def table(rows: Sequence[tuple[str, str, str]]) -> str:
    """| measure | budget | measured | as printed by the bench."""
    lines = ["| measure | budget | measured |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def selector_of(labels: Mapping[str, str]) -> str:
    return f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}"
