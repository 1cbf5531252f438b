"""L19-L21: replicas as subprocesses of the real entry point,
each with the shipped RBAC's credential, scoped to this test's Nodes by --node-selector."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.integration.lifecycle.conftest import Setup
from tests.support import resources as r
from tests.support.cleanup import NodeFactory
from tests.support.lifecycle_harness import (
    eligible_node,
    exists,
    leading,
    metric,
    node_events,
    spawn_controller,
)
from tests.support.netns import HostLink
from tests.support.processes import Child, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
LEASE, RETRY = 4.0, 0.5
SLACK = 1.5  # process scheduling and request latency on a loaded 2-core machine


class Replica:
    def __init__(self, name: str, setup: Setup, artifacts: Path) -> None:
        self.port = free_port()
        argv = setup.argv(f"--node-selector={setup.selector}",
                          f"--metrics-bind-address=127.0.0.1:{self.port}",
                          "--metrics-secure=false")  # fmt: skip
        self.child: Child = spawn_controller(name, argv, setup.kubeconfig, artifacts)

    def leader(self) -> float | None:
        try:
            return leading(self.port)
        except OSError:
            return None

    def identity(self) -> str:
        """From the start-up line, logged just after the servers start (so it may trail the
        first answer of the metrics server by a moment on a loaded machine)."""

        def logged() -> re.Match[str] | None:
            return re.search(r"running identity=(\S+)", self.child.log_path.read_text())

        return eventually(logged, timeout=10, message="the start-up identity line").group(1)

    def kill(self) -> None:
        os.killpg(self.child.pid, signal.SIGKILL)
        self.child.proc.wait()


class Replicas:
    def __init__(self, setup: Setup, artifacts: Path) -> None:
        self.setup, self.artifacts = setup, artifacts
        self.started: list[Replica] = []

    def start(self, name: str) -> Replica:
        replica = Replica(name, self.setup, self.artifacts)
        self.started.append(replica)
        eventually(lambda: replica.leader() is not None, timeout=20, message=f"{name} serving")
        return replica


@pytest.fixture
def replicas(setup: Setup, test_artifacts: Path) -> Iterator[Replicas]:
    started = Replicas(setup, test_artifacts)
    yield started
    for replica in reversed(started.started):
        replica.child.stop(grace=10)


def lease(kube: Client, setup: Setup) -> dict[str, Any]:
    spec: dict[str, Any] = kube.get(r.LEASES, setup.lease, namespace=setup.namespace)["spec"]
    return spec


def test_l19_leader_failover_with_two_replicas(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client, replicas: Replicas
) -> None:
    a = replicas.start("replica-a")
    eventually(lambda: a.leader() == 1, timeout=10, message="A leads")
    b = replicas.start("replica-b")
    before = lease(kube, setup)
    assert before["holderIdentity"] == a.identity()
    # Mid-countdown: NotReady for 6 s of the 10 s timeout when A dies.
    node = eligible_node(make_node, str(link.unused_v4), age=5)
    time.sleep(1)
    a.kill()
    killed = time.monotonic()
    eventually(lambda: b.leader() == 1, timeout=LEASE + 3 * RETRY + SLACK, message="B leads")
    assert time.monotonic() - killed <= LEASE + 3 * RETRY + SLACK
    after = lease(kube, setup)
    assert after["holderIdentity"] == b.identity() != a.identity()
    assert after["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
    meta = node["metadata"]
    eventually(lambda: not exists(kube, meta["name"], meta["uid"]), timeout=10, message="deleted")
    time.sleep(2)  # a second DELETE or Event would show up by now
    deleting = [e for e in node_events(kube, meta["uid"]) if e["reason"] == "DeletingNode"]
    assert [e["reportingInstance"] for e in deleting] == [b.identity()]
    assert metric(b.port, "deletions_total", result="deleted") == 1


def test_l20_graceful_release(setup: Setup, kube: Client, replicas: Replicas) -> None:
    a = replicas.start("replica-a")
    eventually(lambda: a.leader() == 1, timeout=10, message="A leads")
    b = replicas.start("replica-b")
    a.child.proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    released: list[dict[str, Any]] = []

    def b_holds() -> bool:
        spec = lease(kube, setup)
        if not spec.get("holderIdentity"):
            released.append(spec)
        return spec.get("holderIdentity") == b.identity()

    eventually(b_holds, timeout=3 * RETRY + SLACK + 2, interval=0.02, message="B holds")
    assert a.child.proc.wait(timeout=10) == 0
    assert time.monotonic() - stopped < LEASE  # sooner than waiting out the lease
    if released:  # the empty-holder window is short; when seen, it must say 1 s
        assert released[0]["leaseDurationSeconds"] == 1


def test_l21_same_hostname_distinct_identities(
    replicas: Replicas,
) -> None:
    a = replicas.start("replica-a")
    b = replicas.start("replica-b")
    assert a.identity() != b.identity()
    assert a.identity().split("_")[0] == b.identity().split("_")[0]  # one UTS namespace
    eventually(lambda: (a.leader() or 0) + (b.leader() or 0) == 1, timeout=10, message="a leader")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert (a.leader() or 0) + (b.leader() or 0) == 1
        time.sleep(0.5)
