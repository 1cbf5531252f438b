"""What the real-node demo prints (tests/support/demo_realnode.py): compact lines for a Node, a
CSR, a Pod and a Service (pure), the step timer, and a node's resource cost (read from /proc)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_ccm import names as product
from tests.support.realnode import RealNode, rss_kib

# Labels every kubelet writes; the demo shows only what else a Node carries.
ONLY_KUBELET = "(none but the kubelet's own)"
KUBELET_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                  "beta.kubernetes.io/os", "beta.kubernetes.io/arch")  # fmt: skip


def describe_node(node: Mapping[str, Any]) -> list[str]:
    """Addresses, taints, labels beyond the kubelet's, podCIDRs and Ready of a Node."""
    status, spec = node.get("status") or {}, node.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    found = [f"{a['type']} {a['address']}" for a in status.get("addresses") or []]
    taints = [f"{t['key']}:{t['effect']}" for t in spec.get("taints") or []]
    extra = [f"{k}={v}" for k, v in sorted(labels.items()) if k not in KUBELET_LABELS]
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return [
        f"  addresses: {', '.join(found) or '(none)'}",
        f"  taints:    {', '.join(taints) or '(none)'}",
        f"  labels:    {', '.join(extra) or ONLY_KUBELET}",
        f"  podCIDRs:  {', '.join(spec.get('podCIDRs') or []) or '(none)'}",
        f"  Ready:     {_condition(ready)}",
    ]


def _condition(ready: Mapping[str, Any] | None) -> str:
    if ready is None:
        return "(not reported yet)"
    message = str(ready.get("message", ""))
    return f"{ready['status']} ({ready.get('reason', '')}: {message[:70]})"


def describe_csr(csr: Mapping[str, Any] | None) -> list[str]:
    if csr is None:
        return ["  serving CSR: (none)"]
    conditions = [f"{c['type']} by {c.get('reason', '')}" for c in csr["status"].get("conditions")
                  or []]  # fmt: skip
    signed = "signed" if csr["status"].get("certificate") else "not signed"
    return [f"  serving CSR {csr['metadata']['name']} from {csr['spec']['username']}: "
            f"{', '.join(conditions) or 'pending'}, {signed}"]  # fmt: skip


def describe_pod(pod: Mapping[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    return [f"  Pod {pod['metadata']['name']} on {pod['spec'].get('nodeName', '(unbound)')}: "
            f"{status.get('phase')}, podIP {status.get('podIP', '(none)')}"]  # fmt: skip


def describe_service(svc: Mapping[str, Any]) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    found = ", ".join(i.get("ip", "") for i in ingress) or "(none)"
    return [f"  Service {svc['metadata']['name']} type {svc['spec']['type']}: "
            f"clusterIP {svc['spec'].get('clusterIP')}, loadBalancer ingress {found}"]  # fmt: skip


def is_initialised(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return all(t.get("key") != product.UNINITIALIZED_TAINT for t in taints)


def chart_is_current(packaged: Path, chart_dir: Path) -> bool:
    """A packaged chart is up to date when no file of the chart is newer than it."""
    built = packaged.stat().st_mtime
    return all(p.stat().st_mtime <= built for p in chart_dir.rglob("*") if p.is_file())


@dataclass
class Steps:
    """Numbers, prints and times the demo's steps."""

    total: int
    started: float = field(default_factory=time.monotonic)
    times: list[tuple[str, float]] = field(default_factory=list)
    current: str = ""
    logs: Path | None = None  # the control plane's and nodes' logs, once there are any
    _step_started: float = 0.0

    def begin(self, title: str) -> None:
        self.current = f"step {len(self.times) + 1}/{self.total}: {title}"
        self._step_started = time.monotonic()
        print(f"\n== {self.current}", flush=True)

    def done(self, summary: str) -> None:
        seconds = time.monotonic() - self._step_started
        self.times.append((self.current, seconds))
        print(f"  -> ok: {summary} [{seconds:.1f} s]", flush=True)

    def show(self, label: str, lines: list[str]) -> None:
        print(label)
        print("\n".join(lines), flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def report_build(line: str) -> None:
    """tests.support.binaries' progress, indented; a cache hit needs no build history."""
    print(f"  {line.partition('; wall')[0] if 'cache hit' in line else line}", flush=True)


def read_cost(each: RealNode) -> str:
    """Resident memory by process name and CPU time so far of a node's processes (kubelet,
    containerd, shims and every container)."""
    pids = each.processes()
    rss = rss_kib(pids)
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    named = {k: rss.pop(k, 0) for k in ("kubelet", "containerd")}
    parts = ", ".join(f"{k} {v / 1024:.0f}" for k, v in named.items())
    total = (sum(rss.values()) + sum(named.values())) / 1024
    cpu = ticks / os.sysconf("SC_CLK_TCK")
    rest = sum(rss.values()) / 1024
    return (f"  Node {each.spec.name}: {len(pids)} processes, RSS {total:.0f} MiB ({parts}, "
            f"the rest {rest:.0f}), CPU {cpu:.1f} s since it started")  # fmt: skip
