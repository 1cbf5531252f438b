"""L25's audit part, L28 and L33 on a dedicated, audited control
plane whose apiserver these tests stop and restart (tests/support/audit.py), so nothing shared
is disturbed.

L33 "compacts etcd past the controller's watch revision and forces a reconnect": every Node
watch is served by the apiserver's watch cache, which answers 410 for a resourceVersion older
than the revision it started from; etcd compaction alone does not make it (the kube helper's
finding, tests/integration/test_kube_watch.py). So the test holds the controller's next watch,
stops the apiserver (which cuts the stream), writes to etcd directly (a revision no Node watch
has seen) and compacts etcd there, restarts the apiserver, changes the Nodes, then releases the
watch: it resumes from its old resourceVersion, which is older than the restarted cache's start.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.lifecycle.test_l01_l10_scope_and_probes import DELETED, gone, kept
from tests.support import resources as r
from tests.support.audit import audited_plane, start_apiserver, stop_apiserver
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.fixtures import run_state
from tests.support.lifecycle_harness import (
    InProcessController,
    eligible_node,
    leading,
    metric,
    options,
    spawn_controller,
)
from tests.support.lifecycle_plane import (
    HeldWatch,
    PlaneSetup,
    etcd_bump,
    etcd_compact,
    nodes_listed,
    plane_setup,
)
from tests.support.netns import HostLink
from tests.support.processes import Child, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
OUTAGE = 15.0  # L28: "the apiserver is stopped for 15 s"
RENEW_DEADLINE = 3.0  # lifecycle_harness.FAST


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with audited_plane(request.config, binaries) as started:
        yield started


@pytest.fixture
def world(plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[PlaneSetup]:
    with plane_setup(plane, run_state(request.config).run_id, request.node.nodeid) as setup:
        try:
            yield setup
        finally:
            apiserver = next(c for c in plane.children if c.name == "kube-apiserver")
            if apiserver.exited() is not None:  # a failed test left it stopped
                start_apiserver(plane)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.stop()


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def exit_time(child: Child) -> list[float]:
    """Filled with the monotonic time `child` exits, by a waiting thread."""
    when: list[float] = []

    def wait() -> None:
        child.proc.wait()
        when.append(time.monotonic())

    threading.Thread(target=wait, daemon=True).start()
    return when


# ------------------------------------------------------------------ L25, the audit part
def test_l25_the_dry_run_delete_reaches_the_apiserver_with_dry_run_all(
    world: PlaneSetup, link: HostLink
) -> None:
    node = eligible_node(world.make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    opts = options(world.argv("--dry-run"), world.kubeconfig)
    with InProcessController(opts, watch_selector=world.selector) as c:
        eventually(lambda: c.value("deletions_total", result="dry_run") == 1, timeout=DELETED,
                   message="dry-run decision")  # fmt: skip
        kept(world.kube, node, seconds=5)
    deletes = world.requests("delete", "nodes", name)
    assert len(deletes) == 1, [str(e) for e in deletes]
    assert "dryRun=All" in deletes[0].raw["requestURI"]
    assert deletes[0].code == 200


# ------------------------------------------------------------------ L28
@pytest.mark.timeout(120)
def test_l28_a_leader_exits_3_when_the_apiserver_stops_and_deletes_nothing(
    world: PlaneSetup, link: HostLink, children: list[Child], test_artifacts: Path
) -> None:
    node = eligible_node(world.make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    port = free_port()
    argv = world.argv("--ping-timeout=3s", f"--metrics-bind-address=127.0.0.1:{port}",
                      "--metrics-secure=false", f"--node-selector={world.selector}")  # fmt: skip
    child = spawn_controller("l28-leader", argv, world.kubeconfig, test_artifacts)
    children.append(child)
    eventually(lambda: leading(port) == 1 and metric(port, "probes_in_flight") > 0,
               timeout=20, interval=0.05, message="leading and probing")  # fmt: skip
    exited = exit_time(child)
    stopped = time.monotonic()
    stop_apiserver(world.plane)
    eventually(lambda: bool(exited), timeout=RENEW_DEADLINE + 2 + 3, interval=0.05,
               message="the controller exited")  # fmt: skip
    assert exited[0] - stopped <= RENEW_DEADLINE + 2.0
    assert child.exited() == 3
    time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
    start_apiserver(world.plane)
    assert world.kube.get(r.NODES, name)["metadata"]["uid"] == node["metadata"]["uid"]
    assert world.requests("delete", "nodes", name) == []


@pytest.mark.timeout(150)
def test_l28_without_leader_election_it_stays_up_and_deletes_after_a_fresh_get(
    world: PlaneSetup, link: HostLink, children: list[Child], test_artifacts: Path
) -> None:
    # Eligible 15 s after creation, i.e. during the outage: nothing can be deleted before it.
    node = eligible_node(world.make_node, str(link.unused_v4), age=0)
    name = node["metadata"]["name"]
    metrics_port, health_port = free_port(), free_port()
    argv = world.argv(
        "--leader-elect=false", "--not-ready-timeout=15s", "--ping-timeout=3s",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--metrics-secure=false",
        f"--health-probe-bind-address=127.0.0.1:{health_port}", f"--node-selector={world.selector}",
    )  # fmt: skip
    child = spawn_controller("l28-no-election", argv, world.kubeconfig, test_artifacts)
    children.append(child)
    eventually(lambda: http_status(health_port, "/readyz") == 200, timeout=20, message="ready")
    assert world.kube.get(r.NODES, name)  # still there: not yet eligible
    stopped = time.monotonic()
    stop_apiserver(world.plane)
    eventually(lambda: http_status(health_port, "/readyz") == 503, timeout=10, interval=0.2,
               message="/readyz fails during the outage")  # fmt: skip
    assert http_status(health_port, "/healthz") == 200
    time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
    assert http_status(health_port, "/healthz") == 200
    assert child.exited() is None
    restarted = datetime.now(UTC)
    start_apiserver(world.plane)
    nodes_listed(world.kube, world.selector)  # a read first: it replaces pooled connections
    eventually(lambda: gone(world.kube, node), timeout=DELETED + 5, interval=0.2,
               message="deleted after the outage")  # fmt: skip
    eventually(lambda: http_status(health_port, "/readyz") == 200, timeout=10, message="ready")
    assert child.exited() is None
    deletes = world.requests("delete", "nodes", name)
    assert [e.code for e in deletes] == [200], [str(e) for e in deletes]
    fresh = [e for e in world.requests("get", "nodes", name)
             if e.code == 200 and restarted <= e.received <= deletes[0].received]  # fmt: skip
    assert fresh, "no successful fresh GET between the restart and the DELETE"
    assert metric(metrics_port, "deletions_total", result="deleted") == 1


# ------------------------------------------------------------------ L33
@pytest.mark.timeout(150)
def gone_restarts(c: InProcessController) -> float:
    return c.sample("local_ccm_watch_restarts_total", controller="node-lifecycle",
                    resource="nodes", reason="gone")  # fmt: skip


def test_l33_watch_expiry_relists_and_the_cache_matches_a_fresh_list(
    world: PlaneSetup, link: HostLink
) -> None:
    peers = [world.make_node(ready="True", addresses=[
        {"type": "InternalIP", "address": f"127.0.0.{30 + i}"}]) for i in range(3)]  # fmt: skip
    held = HeldWatch()
    # Without leader election: the outage must not end the process (L28 covers that).
    opts = options(world.argv("--leader-elect=false"), world.kubeconfig)
    with InProcessController(opts, watch_selector=world.selector, wrap_api=held.wrap) as c:
        eventually(lambda: c.value("watched_nodes") == 3, timeout=10, message="cache synced")
        held.hold()
        stop_apiserver(world.plane)
        etcd_compact(world.plane.etcd_url, etcd_bump(world.plane.etcd_url))
        start_apiserver(world.plane)
        nodes_listed(world.kube, world.selector)  # a read first: it replaces pooled connections
        # Changes the controller's watch never sees: it must relist to learn them.
        world.kube.delete(r.NODES, peers[0]["metadata"]["name"])
        world.make_node(ready="True", addresses=[{"type": "InternalIP", "address": "127.0.0.40"}])
        world.make_node(ready="True")
        assert gone_restarts(c) == 0
        held.release()
        eventually(lambda: gone_restarts(c) >= 1, timeout=20,
                   message="410 Gone on the re-watch")  # fmt: skip
        listed = nodes_listed(world.kube, world.selector)
        eventually(lambda: c.value("watched_nodes") == len(listed) == 4, timeout=10,
                   message=f"the cache matches a fresh LIST {listed}")  # fmt: skip
        node = eligible_node(world.make_node, str(link.unused_v4))
        eventually(lambda: gone(world.kube, node), timeout=DELETED, message="deleted after relist")
