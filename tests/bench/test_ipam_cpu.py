"""Our node-ipam-controller's CPU alone, for profiling and before/after comparisons.

The runs of `make bench-compare` (tests/bench/compare_ipam.py), without the Go side unless
``BENCH_IPAM_GO=1`` (below):
``BENCH_IPAM_NODES`` Nodes (1 000), ``BENCH_ROUNDS`` runs (3) at client-go's 5 QPS, and with
``BENCH_IPAM_PROFILE=<dir>`` every run under cProfile, its stats written to
``<dir>/ipam-<run>.prof`` when the process exits on SIGTERM. Prints CPU at ready, over the
allocation and until the Events about the run's Nodes stopped coming (every run alike:
`compare_ipam.run_ipam`), per run and their medians.
``BENCH_IPAM_SCRIPTS=before=/a/run.py,after=/b/run.py`` runs each of those Python entry
points in every round instead (interleaved before/after comparisons of two source trees).
``BENCH_IPAM_FLOOR=sync,loop,threads,decisions,coalesce,coalesce-decisions`` adds, in every round,
`tests/bench/floor_ipam.py` in each of those modes: the least a Python process spends on the
same Nodes, and (``decisions``) that plus ours' per-Node decisions without the controller kit
(its docstring says what each leaves out). ``BENCH_IPAM_GO=1`` adds the Go
node-ipam-controller (built from `tests/bench/originals.toml`) to every round, so both sides of a
comparison come from one run.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.bench import compare_ipam
from tests.integration.ipam import harness
from tests.support import crds, names, originals
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.fixtures import run_state

pytestmark = [pytest.mark.compare, pytest.mark.timeout(3 * 3600)]


@pytest.fixture(scope="module")
def ipam_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "cpu-ipam", scale=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="bench") as kube:
            crds.install(kube)
        yield plane


FLOOR = Path(__file__).with_name("floor_ipam.py")


def _variants(scripts: str, profile: str, tag: str, floors: str) -> dict[str, tuple[str, ...]]:
    """Name -> argv prefix of each controller a round runs."""
    modes = [mode.strip() for mode in floors.split(",") if mode.strip()]
    floor = {f"floor-{m}": (sys.executable, str(FLOOR), f"--floor-mode={m}") for m in modes}
    if scripts:
        pairs = (item.split("=", 1) for item in scripts.split(","))
        return {**{name: (sys.executable, path) for name, path in pairs}, **floor}
    if not profile:
        return {"ours": (str(harness.BINARY),), **floor}
    out = Path(profile) / f"ipam-{tag}.prof"
    return {"ours": (sys.executable, "-m", "cProfile", "-o", str(out), str(harness.BINARY))}


def test_ipam_cpu(
    ipam_plane: ControlPlane, test_artifacts: Path, request: pytest.FixtureRequest
) -> None:
    kube = Client.from_kubeconfig(ipam_plane.admin_kubeconfig, field_manager="bench")
    state = run_state(request.config)
    track = Tracker(kube, state.run_id)
    namespace = f"bench-ipam-{secrets.token_hex(3)}"
    labels = names.test_labels(state.run_id, request.node.nodeid)
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace, "labels": labels}})  # fmt: skip
    harness.apply_rbac(kube, track, labels, name=namespace, namespace=namespace,
                       lease_name=namespace, event_namespace="default")  # fmt: skip
    count = int(os.environ.get("BENCH_IPAM_NODES", "1000"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    qps = compare_ipam.SAME_QPS if os.environ.get("BENCH_IPAM_QPS") != "default" else ()
    profile = os.environ.get("BENCH_IPAM_PROFILE", "")
    scripts = os.environ.get("BENCH_IPAM_SCRIPTS", "")
    floors = os.environ.get("BENCH_IPAM_FLOOR", "")
    go = Path("/nonexistent")
    if os.environ.get("BENCH_IPAM_GO") == "1":
        go = originals.ensure().path("go-node-ipam-controller", "node-ipam-controller")
    runs: dict[str, list[dict[str, Any]]] = {}
    for i in range(rounds):
        variants = _variants(scripts, profile, f"r{i}", floors)
        for name, argv in [*variants.items(), *([("go", ())] if go.exists() else [])]:
            bench = compare_ipam.IpamBench(ipam_plane, kube, track, namespace, go,
                                           test_artifacts, argv)  # fmt: skip
            impl = "go" if name == "go" else "ours"
            run = compare_ipam.run_ipam(bench, impl, f"{name}-r{i}", qps=qps, count=count,
                                        timeout=60 + count * 0.5)  # fmt: skip
            run["loadavg"] = os.getloadavg()
            print(name, json.dumps(run))
            runs.setdefault(name, []).append(run)
    track.cleanup()
    kube.close()
    for name, done in runs.items():
        for key in ("startup_cpu_s", "allocation_cpu_s", "cpu_s", "cpu_per_1000_s"):
            print(name, key, "median", statistics.median(r[key] for r in done),
                  [r[key] for r in done])  # fmt: skip
