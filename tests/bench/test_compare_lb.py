"""`make bench-compare`, LoadBalancer part: ours (service-lb-ipam) against MetalLB v0.16.1's
controller and kube-vip-cloud-provider v0.0.12, interleaved on one plane.

One dedicated plane (scale flags: no request throttling; audit log at level Metadata) for
every run. For each size of `BENCH_LB_SERVICES`, `BENCH_LB_ROUNDS` rounds (default
`BENCH_ROUNDS`) of one run of each implementation in turn, kube-vip-cloud-provider only up to
`BENCH_LB_KUBEVIP_MAX` Services (its client is fixed at 5 QPS: about 0.8 s per Service, so
5 000 Services take over an hour a run). What a run measures: tests/bench/compare_lb.py. The
result is ``test-artifacts/bench/compare-lb-<stamp>.json``; tests/bench/compare_peers.py turns
it into docs/benchmarks.md's LoadBalancer tables. Nothing is asserted about speed: the test
fails when a measurement could not be taken, or when correctness broke for any implementation
(one address on two live Services at any moment, an address changed by a restart).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.bench import compare_lb, lb_peers
from tests.bench.compare_record import LoadSampler, provenance, write
from tests.bench.compare_stats import Settings
from tests.bench.lb_watch import AuditTail
from tests.support import originals
from tests.support.audit import audit_log
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane

pytestmark = [pytest.mark.compare, pytest.mark.timeout(8 * 3600)]
FIELD_MANAGER = "local-ccm-bench"
PEER_BINARIES = {"metallb": (lb_peers.METALLB, "metallb-controller"),
                 "kube-vip-cp": (lb_peers.KUBEVIP, "kube-vip-cloud-provider")}  # fmt: skip


@pytest.fixture(scope="module")
def lb_plane(
    request: pytest.FixtureRequest, binaries: Binaries, built: originals.Built
) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "compare-lb", scale=True, audit=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube:
            lb_peers.prepare(kube, built)
        yield plane


def implementations(size: int, settings: Settings) -> list[str]:
    return [i for i in lb_peers.IMPLS if i != "kube-vip-cp" or size <= settings.lb_kubevip_max]


def test_compare_lb(
    lb_plane: ControlPlane, binaries: Binaries, settings: Settings,
    built: originals.Built, test_artifacts: Path,
) -> None:  # fmt: skip
    kube = Client.from_kubeconfig(lb_plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    bench = compare_lb.LbBench(
        lb_plane, kube, AuditTail(audit_log(lb_plane).path, compare_lb.USER_PREFIX),
        {impl: built.path(*found) for impl, found in PEER_BINARIES.items()}, test_artifacts,
    )  # fmt: skip
    sizes: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    with LoadSampler() as load:
        for size in settings.lb_services:
            impls = implementations(size, settings)
            rounds: dict[str, dict[str, list[Any]]] = {}
            for k in range(settings.lb_rounds or settings.rounds):
                for impl in impls:
                    run = compare_lb.run_lb(bench, impl, f"n{size}-r{k}", size)
                    runs.append(run)
                    for key, value in compare_lb.metric_values(run).items():
                        rounds.setdefault(key, {i: [] for i in impls})[impl].append(value)
            sizes[str(size)] = {"impls": impls, "rounds": rounds}
    kube.close()
    write("lb", binaries, lb_plane, {
        "settings": settings.as_dict(),
        "originals": {impl: provenance(built, found[0]) for impl, found in
                      PEER_BINARIES.items()},
        "sizes": sizes, "runs": runs, "loadavg_samples": load.samples,
        "wall_s": round(time.monotonic() - started, 1),
    })  # fmt: skip
    assert [(r["impl"], r["tag"], r["error"]) for r in runs if "error" in r] == []
    duplicates = [(r["impl"], r["tag"], r["watch"]) for r in runs if r["watch"]["duplicates"]]
    assert duplicates == [], "one address on two live Services"
    changed = [(r["impl"], r["tag"], r["watch"]) for r in runs if r.get("restart_changed")]
    assert changed == [], "a restart with every Service addressed changed an address"
