"""L22-L25: circuit breaker, self-check (the
controller's own partition), rate limit and dry-run, on the real apiserver and prober."""

from __future__ import annotations

import itertools
import logging
import time

import pytest

from local_ccm.kube.client import Client
from tests.integration.lifecycle.conftest import Setup
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import (
    DELETED,
    controller,
    gone,
    kept,
    uid,
)
from tests.support import resources as r
from tests.support.cleanup import NodeFactory
from tests.support.lifecycle_harness import eligible_node, reasons
from tests.support.netns import HostLink
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def ready_node(make_node: NodeFactory, address: str | None, **kw: object) -> dict[str, object]:
    addresses = [{"type": "InternalIP", "address": address}] if address else []
    return make_node(ready="True", addresses=addresses, **kw)  # type: ignore[arg-type]


def test_l22_circuit_breaker(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    z = eligible_node(make_node, str(link.unused_v4))
    for i in range(4):
        ready_node(make_node, f"127.0.0.{20 + i}")  # reachable peers: the self-check passes
    sick = [eligible_node(make_node, taints=()) for _ in range(5)]  # untainted Ready=Unknown
    with controller(setup, "--max-unhealthy=40%") as c:
        eventually(lambda: c.value("circuit_breaker_open") == 1, timeout=10, message="open")
        kept(kube, z, seconds=4)
        assert "DeletionBlockedByCircuitBreaker" in reasons(kube, uid(z))
        for node in sick[:2]:
            name = node["metadata"]["name"]
            kube.patch(r.NODES, name, {"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                patch_type="merge", subresource="status")  # fmt: skip
        eventually(lambda: c.value("circuit_breaker_open") == 0, timeout=5, interval=0.05,
                   message="closed")  # fmt: skip
        closed = time.monotonic()
        eventually(lambda: gone(kube, z), timeout=DELETED, interval=0.05, message="z deleted")
        assert time.monotonic() - closed >= 1.0 - 0.3  # one interval, less polling slack


def test_l23_self_check_blocks_deletion_during_the_controllers_own_partition(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4))
    peers = [ready_node(make_node, str(link.block[6 + i])) for i in range(3)]
    with controller(setup) as c:
        eventually(lambda: c.value("self_check", result="failed") == 1, timeout=10,
                   message="self-check failed")  # fmt: skip
        kept(kube, node, seconds=4)
        assert "DeletionBlockedBySelfCheck" in reasons(kube, uid(node))
        assert c.value("deletions_skipped_total", reason="self_check_failed") == 1
        name = peers[0]["metadata"]["name"]  # type: ignore[index]
        kube.patch(r.NODES, name, {"status": {"addresses": [
            {"type": "InternalIP", "address": "127.0.0.5"}]}},
            patch_type="merge", subresource="status")  # fmt: skip
        eventually(lambda: gone(kube, node), timeout=DELETED, message="deleted after recovery")
        assert c.value("self_check", result="passed") == 1


def test_l24_rate_limit(setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client) -> None:
    nodes = [eligible_node(make_node, str(link.block[6 + i]), age=age)
             for i, age in enumerate((90, 80, 70))]  # fmt: skip
    deleted_at: dict[str, float] = {}

    def all_gone() -> bool:
        for node in nodes:
            if uid(node) not in deleted_at and gone(kube, node):
                deleted_at[uid(node)] = time.monotonic()
        return len(deleted_at) == 3

    with controller(setup, "--reconcile-interval=3s", "--max-deletions-per-interval=1"):
        eventually(all_gone, timeout=25, interval=0.05, message="all deleted")
    times = [deleted_at[uid(n)] for n in nodes]
    assert times == sorted(times), "oldest t0 first"
    assert all(b - a >= 3.0 - 0.3 for a, b in itertools.pairwise(times))
    for node in nodes[1:]:
        assert "DeletionRateLimited" in reasons(kube, uid(node))


def test_l25_dry_run(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    node = eligible_node(make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    with controller(setup, "--dry-run") as c:
        kept(kube, node, seconds=7)
        assert reasons(kube, uid(node)).count("NodeDeletionDryRun") == 1
        assert c.value("deletions_total", result="dry_run") == 1
    lines = [m for m in caplog.messages if f"[DRY-RUN] Would delete node {name} " in m]
    assert len(lines) == 1
