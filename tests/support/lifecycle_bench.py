"""Measuring node-lifecycle-controller for its bench (tests/bench/test_lifecycle_scale.py).

The controller under test is the real `node-lifecycle-controller` console script, one process
per run, with the shipped RBAC (a TokenRequest kubeconfig). What is read, and from where:

- RSS: VmRSS / VmHWM of /proc/<pid>/status;
- CPU: utime + stime of /proc/<pid>/stat over a window, extrapolated per hour;
- API requests and bytes: the apiserver's own `apiserver_request_total` and
  `apiserver_response_sizes` (GET /metrics with the admin certificate) before and after a
  window; the apiserver has no per-user label, so a window without the controller gives the
  background that is subtracted.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import benchrecord
from tests.support.controlplane import ControlPlane
from tests.support.processes import Child, free_port, spawn
from tests.support.waiting import eventually

ROOT, RESULTS = benchrecord.ROOT, benchrecord.RESULTS
BINARY = Path(sys.executable).parent / "node-lifecycle-controller"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} ([0-9.eE+-]+|NaN)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
COUNTED = ("apiserver_request_total", "apiserver_response_sizes_sum",
           "apiserver_watch_events_total", "apiserver_watch_events_sizes_sum")  # fmt: skip
# What the controller reads and writes: the part of the apiserver's
# counters that can be its requests; the rest is the apiserver's own background.
CONTROLLER_RESOURCES = frozenset(
    {"nodes", "leases", "events", "selfsubjectaccessreviews", "volumeattachments"}
)
Key = tuple[str, str, str]  # verb, resource, code ("" where the metric has none)


# ------------------------------------------------------------------ pure helpers
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0-100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def parse_counters(exposition: str) -> dict[str, dict[Key, float]]:
    """The samples of `COUNTED` in a Prometheus text exposition, summed by (verb, resource,
    code). Pure."""
    found: dict[str, dict[Key, float]] = {name: {} for name in COUNTED}
    for line in exposition.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in found:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("code", ""))
        bucket = found[match.group(1)]
        bucket[key] = bucket.get(key, 0.0) + float(match.group(3))
    return found


def counter_delta(
    before: Mapping[str, Mapping[Key, float]], after: Mapping[str, Mapping[Key, float]]
) -> dict[str, dict[Key, float]]:
    """after − before per metric and key (keys absent before count from 0). Pure."""
    delta: dict[str, dict[Key, float]] = {}
    for name, samples in after.items():
        old = before.get(name, {})
        moved = {k: v - old.get(k, 0.0) for k, v in samples.items()}
        delta[name] = {k: v for k, v in moved.items() if v > 0}
    return delta


def by_request(delta: Mapping[str, Mapping[Key, float]], metric: str) -> dict[str, float]:
    """One metric's delta per "VERB resource" (codes summed). Pure."""
    out: dict[str, float] = {}
    for (verb, resource, _), value in delta.get(metric, {}).items():
        name = f"{verb} {resource or '-'}".strip()
        out[name] = out.get(name, 0.0) + value
    return dict(sorted(out.items()))


def net_rates(
    measured: Mapping[str, float], background: Mapping[str, float], ratio: float
) -> dict[str, float]:
    """measured − ratio × background per "VERB resource" of `CONTROLLER_RESOURCES`,
    never below 0 (the background is itself a sample). Pure."""
    out = {}
    for key, value in measured.items():
        if key.rsplit(" ", 1)[-1] in CONTROLLER_RESOURCES:
            out[key] = round(max(0.0, value - ratio * background.get(key, 0.0)), 1)
    return {k: v for k, v in out.items() if v > 0}


def per_hour(value: float, seconds: float) -> float:
    return round(value * 3600.0 / seconds, 1)


# ------------------------------------------------------------------ the processes
def read_counters(plane: ControlPlane) -> dict[str, dict[Key, float]]:
    answer = plane.http.request("GET", "/metrics")
    assert answer.status == 200, answer.status
    return parse_counters(answer.text)


@dataclass
class Controller:
    """One `node-lifecycle-controller` process with metrics and health on loopback."""

    child: Child
    metrics_port: int
    health_port: int
    spawned: float  # monotonic

    @classmethod
    def start(cls, kubeconfig: Path, argv: Sequence[str], log: Path) -> Controller:
        metrics, health = free_port(), free_port()
        cmd = [str(BINARY), f"--kubeconfig={kubeconfig}", *argv,
               f"--metrics-bind-address=127.0.0.1:{metrics}", "--metrics-secure=false",
               f"--health-probe-bind-address=127.0.0.1:{health}"]  # fmt: skip
        spawned = time.monotonic()
        child = spawn("node-lifecycle-controller", cmd, log, env={"PATH": "/usr/bin:/bin"})
        return cls(child, metrics, health, spawned)

    @property
    def pid(self) -> int:
        return self.child.pid  # setpriv execs: the pid is the controller's

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), ""

    def wait_ready(self, timeout: float) -> float:
        """Seconds from the spawn to /readyz 200 (leading, Node cache synced)."""
        eventually(lambda: self.child.exited() is None and self.get(self.health_port,
                   "/readyz")[0] == 200, timeout=timeout, interval=0.1,
                   message="the controller is ready")  # fmt: skip
        return time.monotonic() - self.spawned

    def metric(self, name: str) -> float:
        """The sum of every sample of `local_ccm_lifecycle_<name>` (any labels)."""
        prefix = f"local_ccm_lifecycle_{name}"
        total = 0.0
        for line in self.get(self.metrics_port, "/metrics")[1].splitlines():
            if line.startswith(prefix) and line[len(prefix)] in " {":
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> int | None:
        self.child.stop(grace=15)
        return self.child.proc.returncode


# ------------------------------------------------------------------ results
def machine_facts(plane: ControlPlane) -> dict[str, Any]:
    return benchrecord.machine_facts(kube_apiserver=plane.version)


def write_result(name: str, result: dict[str, Any]) -> Path:
    return benchrecord.write_result("lifecycle", name, result)
