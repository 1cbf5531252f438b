"""I27 — 2,000 Nodes created by 16 concurrent creators (spec/ipam.md §18.4, §14 rule 5).

On a dedicated scale plane (TESTING.md §3.3/§3.4 scale flags, §3.7), the controller as a
subprocess with the shipped RBAC and default flags. The scenario's functional outcomes are
asserted (every Node two CIDRs, IPv4 blocks exactly 0..1999, one PATCH per Node, the pool's
status); its budgets (120 s, CPU ≤ 30 s, RSS ≤ 200 MiB) are asserted too, because the spec
states them as outcomes, and recorded with the machine's load in test-artifacts/bench/.
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

pytestmark = pytest.mark.timeout(600)
NODES, CREATORS = 2000, 16
DEADLINE, CPU_BUDGET, RSS_BUDGET = 120.0, 30.0, 200.0


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-i27", scale=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="local-ccm-test") as kube:
            crds.install(kube)
        yield plane


def test_i27_two_thousand_nodes(  # noqa: PLR0917 (pytest passes fixtures by name)
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
        name=unique_name, log_path=test_artifacts / "node-ipam-controller.log",
    ) as ctl:  # fmt: skip
        ready = b.proc_stats(ctl.pid)
        bodies = [b.plain_node(n, labels) for n in b.node_names("i27", NODES)]
        start, created = b.create_all(kube, bodies, CREATORS)
        done = ctl.wait_patches(NODES, timeout=DEADLINE + 60)
        stats = b.proc_stats(ctl.pid)
        cidrs = b.list_pod_cidrs(kube, b.selector_of(test_labels))
        allocated = b.wait_allocated(kube, pool, NODES)
        patches, dropped = ctl.patches(), ctl.events_dropped()
    result = {
        **facts,
        "nodes": NODES,
        "creators": CREATORS,
        "create_s": round(created - start, 2),
        "all_allocated_after_last_create_s": round(done - created, 2),
        "all_allocated_after_first_create_s": round(done - start, 2),
        "node_patches": patches,
        "events_dropped": dropped,
        "controller_cpu_total_s": round(stats.cpu_seconds, 2),
        "controller_cpu_allocation_phase_s": round(stats.cpu_seconds - ready.cpu_seconds, 2),
        "controller_rss_mib": round(stats.rss_mib, 1),
        "controller_rss_peak_mib": round(stats.hwm_mib, 1),
        "status_ipv4_allocated": allocated,
    }
    b.write_result("i27", result)
    print(b.table([
        ("all hold CIDRs after the last creation", f"≤ {DEADLINE:.0f} s",
         f"{result['all_allocated_after_last_create_s']} s"),
        ("controller CPU time", f"≤ {CPU_BUDGET:.0f} s", f"{result['controller_cpu_total_s']} s"),
        ("controller RSS (peak)", f"≤ {RSS_BUDGET:.0f} MiB", f"{stats.hwm_mib:.1f} MiB"),
    ]))  # fmt: skip
    assert len(cidrs) == NODES
    assert all(len(c) == 2 for c in cidrs.values()), "a Node without two CIDRs"
    assert b.v4_block_indices(cidrs) == list(range(NODES)), "not exactly blocks 0-1999"
    assert patches == NODES
    assert allocated == NODES
    assert done - created <= DEADLINE
    assert stats.cpu_seconds <= CPU_BUDGET
    assert stats.hwm_mib <= RSS_BUDGET
