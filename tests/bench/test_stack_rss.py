"""The dependency-stack measurement behind docs/design.md.

Runs tests/bench/stack_probe.py - a minimal "watch my Node, patch it" process on the
project's own stack - against the real apiserver, five fresh processes per variant, and
records the median VmRSS per phase with the baselines, under test-artifacts/bench/. Numbers
are written down, never asserted: budgets are checked by reading the table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from local_ccm.kube.resources import NODES
from tests.support.cleanup import NodeFactory

ROOT = Path(__file__).resolve().parents[2]
RUNS = 5
BASELINES = {
    "bare `python -c pass`": "pass",
    "`import asyncio, json, ssl`": "import asyncio, json, ssl",
    "stack imported: kube client + aio + netlink": (
        "import local_ccm.kube.aio, local_ccm.kube.client, local_ccm.netlink"
    ),
    "stack imported + serve (/metrics, promtext)": (
        "import local_ccm.kube.aio, local_ccm.kube.client, local_ccm.netlink, "
        "local_ccm.runtime.serve"
    ),
    # What the product no longer imports, for comparison: the library it rendered /metrics with.
    "stack imported + serve + prometheus_client": (
        "import local_ccm.kube.aio, local_ccm.kube.client, local_ccm.netlink, "
        "local_ccm.runtime.serve, prometheus_client"
    ),
}
RSS = (
    "import pathlib;print([l.split()[1] for l in pathlib.Path('/proc/self/status')"
    ".read_text().splitlines() if l.startswith('VmRSS:')][0])"
)


def baseline_kib(code: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\n{RSS}"], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def drive(kube: Client, name: str, stop: threading.Event) -> int:
    """Modify the Node's labels until told to stop; each change is one watch event."""
    sent = 0
    while not stop.is_set() and sent < 20_000:
        patch = {"metadata": {"labels": {"bench.local-ccm.io/tick": str(sent)}}}
        kube.patch(NODES, name, patch, patch_type="merge")
        sent += 1
    return sent


def probe_once(kube: Client, kubeconfig: Path, name: str, metrics: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "tests/bench/stack_probe.py"), "--kubeconfig",
           str(kubeconfig), "--node", name]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    phases: dict[str, Any] = {}
    stop = threading.Event()
    driver: threading.Thread | None = None
    argv = [*cmd, *(["--metrics"] if metrics else [])]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            record = json.loads(line)
            phases[record["phase"]] = record
            if record["phase"] == "work":
                driver = threading.Thread(target=drive, args=(kube, name, stop), daemon=True)
                driver.start()
        stop.set()
        if driver is not None:
            driver.join(timeout=30)
        assert proc.wait(timeout=60) == 0, phases
    return phases


def test_stack_rss(control_plane: Any, kube: Client, make_node: NodeFactory) -> None:
    node = make_node()
    name = node["metadata"]["name"]
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "kube_apiserver": control_plane.version,
        "runs": RUNS,
        "baselines_mib": {
            k: median_mib([baseline_kib(c) for _ in range(RUNS)]) for k, c in BASELINES.items()
        },
    }
    for metrics in (False, True):
        runs = [
            probe_once(kube, control_plane.admin_kubeconfig, name, metrics) for _ in range(RUNS)
        ]
        key = "with_metrics" if metrics else "without_metrics"
        result[key] = {
            phase: {
                "rss_mib": median_mib([r[phase]["rss_kib"] for r in runs]),
                "t_s": round(statistics.median(r[phase]["t"] for r in runs), 3),
            }
            for phase in ("imported", "first", "work", "steady")
        }
        result[key]["steady_events"] = min(r["steady"]["events"] for r in runs)
        result[key]["steady_writes"] = min(r["steady"]["writes"] for r in runs)
    out = ROOT / "test-artifacts" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"stack-rss-{datetime.now(UTC):%Y%m%dT%H%M%S}.json").write_text(
        json.dumps(result, indent=2)
    )
    print(json.dumps(result, indent=2))
    for key in ("without_metrics", "with_metrics"):
        assert result[key]["steady_events"] >= 3000, result
        assert result[key]["steady_writes"] >= 302, result


def median_mib(kib: list[int]) -> float:
    return round(statistics.median(kib) / 1024, 1)
