"""`make bench` for node-ipam-controller: 5,000 kwok Nodes created at once → time
until all have podCIDRs, allocator CPU time, RSS.

A dedicated scale plane (an apiserver without request throttling) with kwok managing the Nodes
(`--node-lease-duration-seconds=200`), and the controller as a subprocess with the shipped
RBAC. The client-side limit is raised (`--kube-api-qps=500 --kube-api-burst=500`) so the wall
time is bounded by API latency, not by the default 50 requests/s; each allocation costs a
PATCH and an Event. Allocator CPU time is measured in-process on the pure `Allocator` for the
same 5,000 Nodes (see tests/support/ipam_bench.py); the controller's whole CPU time and RSS
come from /proc. Numbers are recorded, not asserted: only the outcome is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import crds
from tests.support import ipam_bench as b
from tests.support.binaries import Binaries
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.kwok import fake_node_body, start_kwok

pytestmark = [pytest.mark.kwok, pytest.mark.timeout(600)]
NODES, CREATORS = 5000, 16
QPS = ("--kube-api-qps=500", "--kube-api-burst=500")
ALLOCATOR_BUDGET = 1.0  # s of CPU in total for 5,000 Nodes


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-scale", scale=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="local-ccm-test") as kube:
            crds.install(kube)
        start_kwok(plane, binaries, lease_seconds=200)  # stopped with the plane
        yield plane


def test_ipam_scale_5000_kwok_nodes(  # noqa: PLR0917 (pytest passes fixtures by name)
    control_plane: ControlPlane,
    binaries: Binaries,
    kube: Client,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    unique_name: str,
    test_artifacts: Path,
) -> None:
    facts = b.machine_facts(binaries, control_plane)
    labels = {**test_labels, **b.SCALE_LABEL}
    pool = b.make_big_pool(kube, track, "big", labels)["metadata"]["name"]
    with b.running_controller(
        kube, track, control_plane, namespace=test_namespace, labels=test_labels,
        name=unique_name, log_path=test_artifacts / "node-ipam-controller.log", args=QPS,
    ) as ctl:  # fmt: skip
        ready = b.proc_stats(ctl.pid)
        names = b.node_names("kwok-ipam", NODES)
        bodies = [fake_node_body(n, labels) for n in names]
        start, created = b.create_all(kube, bodies, CREATORS)
        done = ctl.wait_patches(NODES, timeout=480)
        stats = b.proc_stats(ctl.pid)
        cidrs = b.list_pod_cidrs(kube, b.selector_of(test_labels))
        allocated = b.wait_allocated(kube, pool, NODES)
        patches, dropped = ctl.patches(), ctl.events_dropped()
        allocator = b.allocator_cpu(names, labels)
    result = {
        **facts,
        "nodes": NODES,
        "creators": CREATORS,
        "controller_flags": list(QPS),
        "create_s": round(created - start, 2),
        "create_rate_per_s": round(NODES / (created - start), 1),
        "all_allocated_after_first_create_s": round(done - start, 2),
        "all_allocated_after_last_create_s": round(done - created, 2),
        "node_patches": patches,
        "events_dropped": dropped,
        "controller_cpu_startup_s": round(ready.cpu_seconds, 2),
        "controller_cpu_allocation_phase_s": round(stats.cpu_seconds - ready.cpu_seconds, 2),
        "controller_rss_mib": round(stats.rss_mib, 1),
        "controller_rss_peak_mib": round(stats.hwm_mib, 1),
        "allocator_in_process": allocator,
        "status_ipv4_allocated": allocated,
        "progress": ctl.progress_since(start),
    }
    b.write_result("scale-5000", result)
    print(b.table([
        ("allocator CPU, 5,000 decisions + commits", f"≤ {ALLOCATOR_BUDGET:.0f} s in total",
         f"{allocator['allocate_and_commit_total_s']} s"),
        ("one allocation decision", "p99 ≤ 1 ms", f"p99 {allocator['decision_p99_ms']} ms"),
        ("start-up recovery of 5,000 Nodes", "≤ 2 s CPU",
         f"{allocator['recover_total_s']} s"),
        ("all hold podCIDRs, from the first creation", "bounded by API latency",
         f"{result['all_allocated_after_first_create_s']} s"),
        ("controller CPU, allocation phase", "–",
         f"{result['controller_cpu_allocation_phase_s']} s"),
        ("controller RSS (peak)", "≤ 200 MiB (at 2,000)",
         f"{stats.hwm_mib:.1f} MiB"),
    ]))  # fmt: skip
    assert len(cidrs) == NODES
    assert all(len(c) == 2 for c in cidrs.values()), "a Node without two CIDRs"
    assert b.block_indices(cidrs, b.POOL_V4) == list(range(NODES)), "duplicate or skipped blocks"
    assert allocated == NODES
