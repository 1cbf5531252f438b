"""2,000 Nodes: I27, and restart plus failover during a
2,000-Node churn: zero duplicate CIDRs, checked across all Nodes, and no leaked blocks.

Both run on one dedicated scale plane (an apiserver without request throttling), shared by the
module so it starts once; the controllers are subprocesses of the real entry point under the
shipped RBAC with a ServiceAccount token. The pools of the two tests do not overlap, and each
test's Nodes carry its own labels.

Timeouts: the module's explicit 600 s per test covers creating 2,000 Nodes (~40 s), the
controller's default client limit of 50 requests/s (a PATCH and an Event per Node, ~60 s), and
the failovers of the churn test, on a loaded 2-core machine; the scenario's own budgets (I27:
120 s after the last creation) are asserted inside the test.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from tests.integration.ipam import harness
from tests.integration.ipam.conftest import StartIpam
from tests.integration.ipam.test_i26_leader_and_access import holder
from tests.support import crds
from tests.support import ipam_bench as b
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(600)  # see the module docstring
NODES, CREATORS = 2000, 16
DEADLINE, CPU_BUDGET, RSS_BUDGET = 120.0, 30.0, 200.0
# The churn pool: as large as I27's in blocks, disjoint from it.
CHURN_V4, CHURN_V6 = "10.16.0.0/12", "fd00:16::/104"  # blocks of b.BITS, as I27's pool
# Slower than I26's election so a loaded leader is not deposed by accident; fast enough that
# each failover takes a few seconds of the churn.
ELECTION = (
    "--leader-elect-lease-duration=8s",
    "--leader-elect-renew-deadline=6s",
    "--leader-elect-retry-period=1s",
)


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "ipam-2000", scale=True) as plane:
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
    b.write_result("i27", {
        **facts, "nodes": NODES, "creators": CREATORS,
        "create_s": round(created - start, 2),
        "all_allocated_after_last_create_s": round(done - created, 2),
        "all_allocated_after_first_create_s": round(done - start, 2),
        "node_patches": patches, "events_dropped": dropped,
        "controller_cpu_total_s": round(stats.cpu_seconds, 2),
        "controller_cpu_allocation_phase_s": round(stats.cpu_seconds - ready.cpu_seconds, 2),
        "controller_rss_mib": round(stats.rss_mib, 1),
        "controller_rss_peak_mib": round(stats.hwm_mib, 1),
        "status_ipv4_allocated": allocated, "progress": ctl.progress_since(start),
    })  # fmt: skip
    assert len(cidrs) == NODES
    assert all(len(c) == 2 for c in cidrs.values()), "a Node without two CIDRs"
    assert b.block_indices(cidrs, b.POOL_V4) == list(range(NODES)), "not exactly blocks 0-1999"
    assert patches == NODES
    assert allocated == NODES
    assert done - created <= DEADLINE
    assert stats.cpu_seconds <= CPU_BUDGET
    assert stats.hwm_mib <= RSS_BUDGET


# ------------------------------------------------------------------ churn
def overlaps(cidrs: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs of CIDRs sharing an address (a duplicate is the extreme case)."""
    nets = sorted(
        (ipaddress.ip_network(c) for c in cidrs),
        key=lambda n: (n.version, int(n.network_address), n.prefixlen),
    )
    return [
        (str(a), str(b_))
        for a, b_ in itertools.pairwise(nets)
        if a.version == b_.version and int(a.broadcast_address) >= int(b_.network_address)
    ]


class Churn:
    """Creates `names` from CREATORS threads; the Node created 8 steps after a doomed one
    deletes it again, so deletions interleave with creations and with allocations in flight;
    a final sweep deletes every doomed Node still there."""

    LAG = 8

    def __init__(self, kube: Client, labels: Mapping[str, str], names: Sequence[str]) -> None:
        self.kube, self.labels, self.names = kube, dict(labels), list(names)
        self.doomed = set(self.names[::4])
        self.created = 0
        self._lock = threading.Lock()

    def step(self, index: int) -> None:
        self.kube.create(r.NODES, b.plain_node(self.names[index], self.labels))
        with self._lock:
            self.created += 1
        if index >= self.LAG and self.names[index - self.LAG] in self.doomed:
            self.delete(self.names[index - self.LAG])

    def delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.kube.delete(r.NODES, name)

    def run(self) -> None:
        with ThreadPoolExecutor(max_workers=CREATORS) as pool:
            list(pool.map(self.step, range(len(self.names))))
            # The last LAG doomed Nodes, and those whose deletion ran before their creation
            # (the creators race each other).
            list(pool.map(self.delete, sorted(self.doomed)))


class Replicas:
    """The controllers of the churn, by identity; disruptions act on whoever leads."""

    def __init__(self, kube: Client, namespace: str, start: StartIpam) -> None:
        self.kube, self.namespace, self._start = kube, namespace, start
        self.procs: dict[str, harness.IpamProcess] = {}

    def start(self, identity: str) -> None:
        self.procs[identity] = self._start(
            *ELECTION, f"--leader-elect-id={identity}", leader_election=True
        )

    def leader(self, other_than: str = "") -> str:
        return eventually(
            lambda: (h := holder(self.kube, self.namespace)) and h != other_than and h,
            timeout=60, message=f"a leader other than {other_than!r}",
        )  # fmt: skip

    def kill_leader(self) -> str:
        """SIGKILL (no lease release): the standby waits out the lease, then takes over."""
        victim = self.leader()
        os.killpg(self.procs[victim].child.pid, signal.SIGKILL)
        self.procs[victim].stop()
        self.leader(other_than=victim)
        return victim

    def stop_leader(self) -> str:
        """SIGTERM: the leader releases the lease and exits 0."""
        victim = self.leader()
        assert self.procs[victim].stop() == 0, self.procs[victim].log()
        self.leader(other_than=victim)
        return victim

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.stop()


def at(churn: Churn, count: int, action: Callable[[], object]) -> None:
    eventually(lambda: churn.created >= count, timeout=300, interval=0.05,
               message=f"{count} Nodes created")  # fmt: skip
    action()


def test_churn_with_restart_and_failover_leaves_no_duplicate_and_no_leaked_block(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    test_labels: dict[str, str],
    test_namespace: str,
) -> None:
    pool = make_pool("churn", bits=b.BITS, ipv4=CHURN_V4, ipv6=CHURN_V6, sel={"churn": "1"})
    replicas = Replicas(kube, test_namespace, start_ipam)
    replicas.start("replica-a")
    replicas.leader()
    replicas.start("replica-b")
    churn = Churn(kube, {**test_labels, "churn": "1"}, b.node_names("churn", NODES))
    worker = threading.Thread(target=churn.run, name="churn")
    worker.start()
    at(churn, 400, lambda: replicas.start(f"{replicas.kill_leader()}-restarted"))
    at(churn, 1200, replicas.stop_leader)
    at(churn, 1300, lambda: replicas.start("replica-c"))
    worker.join(timeout=400)
    assert not worker.is_alive(), "the churn did not finish"
    survivors = sorted(set(churn.names) - churn.doomed)
    mine = b.selector_of(test_labels)
    eventually(lambda: _all_hold_two(b.list_pod_cidrs(kube, mine), survivors), timeout=180,
               interval=1.0, message="every surviving Node holds two CIDRs")  # fmt: skip

    # Nodes holding blocks go away while a leader runs (released on the watch event) and
    # while no controller runs at all; then a whole restart recovers from the Nodes alone.
    gone = survivors[1::10]
    for name in gone[: len(gone) // 2]:
        churn.delete(name)
    replicas.stop_all()
    for name in gone[len(gone) // 2 :]:
        churn.delete(name)
    survivors = sorted(set(survivors) - set(gone))
    replicas.start("replica-after")
    replicas.leader()
    held = b.list_pod_cidrs(kube, mine)
    assert sorted(held) == survivors, "a deleted Node survived or a created one is missing"
    _assert_no_overlap_across_all_nodes(kube)
    _assert_pool_counts(kube, pool["metadata"]["name"], len(survivors))

    # No leaked block: Nodes created now fill exactly the holes the deleted Nodes left.
    v4 = b.block_indices(held, CHURN_V4)
    holes = sorted(set(range(v4[-1] + 1)) - set(v4))
    fill = b.node_names("fill", len(holes))
    churn_fill = Churn(kube, {**test_labels, "churn": "1"}, fill)
    churn_fill.doomed = set()
    churn_fill.run()
    total = len(survivors) + len(fill)
    eventually(lambda: len(b.block_indices(b.list_pod_cidrs(kube, mine), CHURN_V4)) == total,
               timeout=120, interval=1.0, message=f"{total} Nodes with CIDRs")  # fmt: skip
    final = b.list_pod_cidrs(kube, mine)
    assert b.block_indices(final, CHURN_V4) == list(range(total)), "a freed IPv4 block leaked"
    assert b.block_indices(final, CHURN_V6) == list(range(total)), "a freed IPv6 block leaked"
    _assert_no_overlap_across_all_nodes(kube)
    _assert_pool_counts(kube, pool["metadata"]["name"], total)


def _all_hold_two(cidrs: Mapping[str, list[str]], survivors: Sequence[str]) -> bool:
    return all(len(cidrs.get(name) or []) == 2 for name in survivors)


def _assert_no_overlap_across_all_nodes(kube: Client) -> None:
    every = [c for held in b.list_pod_cidrs(kube, "").values() for c in held]
    assert every, "no Node holds a CIDR"
    assert len(every) == len(set(every)), "a CIDR held by two Nodes"
    assert overlaps(every) == []


def _assert_pool_counts(kube: Client, pool: str, count: int) -> None:
    def counts() -> tuple[int, int]:
        status = kube.get(r.CLUSTER_CIDRS, pool).get("status") or {}
        return tuple(  # type: ignore[return-value]
            int((status.get(family) or {}).get("allocated") or 0) for family in ("ipv4", "ipv6")
        )

    eventually(lambda: counts() == (count, count), timeout=30,
               message=f"status allocated = {count} per family, not {counts()}")  # fmt: skip
