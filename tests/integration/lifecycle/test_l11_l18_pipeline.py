"""L11-L18: TCP probes, protection, timing and the fresh re-read with
uid/resourceVersion preconditions, on the real apiserver with the real prober."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from local_ccm.kube import errors as ke
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.lifecycle.api import KubeNodeApi
from tests.integration.lifecycle.conftest import Setup
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import (
    DELETED,
    controller,
    gone,
    kept,
    uid,
)
from tests.support import nodes
from tests.support import resources as r
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.lifecycle_harness import (
    AUTOSCALER_TAINT,
    InProcessController,
    NamedNodes,
    eligible_node,
    exists,
    options,
)
from tests.support.netns import HostLink
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


@pytest.fixture
def kubelet_port() -> Iterator[int]:
    """A listener on 127.0.0.3:<port>; the same port on 127.0.0.4 has nothing (RST)."""
    with socket.create_server(("127.0.0.3", 0)) as server:
        yield int(server.getsockname()[1])


def test_l11_tcp_probe(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client, kubelet_port: int
) -> None:
    a = eligible_node(make_node, "127.0.0.3")
    b = eligible_node(make_node, "127.0.0.4")
    c = eligible_node(make_node, str(link.unused_v4))
    with controller(setup, f"--probe=tcp:{kubelet_port}", "--max-deletions-per-interval=3"):
        eventually(lambda: gone(kube, c), timeout=DELETED, message="c deleted")
        kept(kube, a, b, seconds=3)


def test_l12_protection_syntax(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    key = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
    p1 = eligible_node(make_node, str(link.block[6]), labels={key: "false"})
    p2 = eligible_node(make_node, str(link.block[7]), labels={"team": "web"})
    with controller(setup, f"--protected-labels={key},team=db"):
        eventually(lambda: gone(kube, p2), timeout=DELETED, message="p2 deleted")
        kept(kube, p1, seconds=3)


def test_l13_an_annotation_protects_a_node_without_labels(
    setup: Setup, link: HostLink, kube: Client, track: Tracker
) -> None:
    name = f"{setup.lease[:50]}-nolab"
    body = nodes.node_body(name, {}, annotations={"kilo.squat.ai/leader": "true"},
                           taints=[AUTOSCALER_TAINT])  # fmt: skip
    del body["metadata"]["labels"]  # the [fix]: the original never looked at annotations here
    created = kube.create(r.NODES, body)
    since = datetime.now(UTC) - timedelta(seconds=60)
    condition = nodes.ready_condition("Unknown", since, since)
    address = {"type": "InternalIP", "address": str(link.unused_v4)}
    kube.patch(r.NODES, name, {"status": {"conditions": [condition], "addresses": [address]}},
               patch_type="merge", subresource="status")  # fmt: skip
    opts = options(setup.argv("--protected-labels=kilo.squat.ai/leader"), setup.kubeconfig)
    try:
        with InProcessController(opts, wrap_api=lambda api: NamedNodes(api, [name])) as c:
            kept(kube, created)
            assert c.value("probes_total", kind="icmp", family="ipv4", outcome="no_reply") == 0
    finally:
        kube.delete(r.NODES, name)  # unlabelled: the run's tracker would refuse to delete it


def test_l14_missing_ready_condition_counts_from_creation(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    created_at = datetime.now(UTC)
    address = {"type": "InternalIP", "address": str(link.unused_v4)}
    node = make_node(taints=[AUTOSCALER_TAINT], ready=None, addresses=[address])
    with controller(setup):
        eventually(lambda: gone(kube, node), timeout=15, message="deleted")
        assert datetime.now(UTC) >= created_at + timedelta(seconds=10)


def _set_ready(kube: Client, name: str, status: str, since: datetime) -> None:
    condition = nodes.ready_condition(status, since, datetime.now(UTC))
    kube.patch(r.NODES, name, {"status": {"conditions": [condition]}},
               patch_type="merge", subresource="status")  # fmt: skip


def test_l15_ready_in_between_restarts_the_episode(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    now = datetime.now(UTC)
    node = eligible_node(make_node, str(link.unused_v4), ready="False", age=8)
    name = node["metadata"]["name"]
    with controller(setup):
        time.sleep(1)
        _set_ready(kube, name, "True", datetime.now(UTC))
        time.sleep(2)
        _set_ready(kube, name, "False", now + timedelta(seconds=3))
        kept(
            kube, node, seconds=(now + timedelta(seconds=12.5) - datetime.now(UTC)).total_seconds()
        )
        eventually(lambda: gone(kube, node), timeout=5, message="deleted before now + 17 s")


def test_l17_a_stale_uid_precondition_gets_409_and_the_recreated_node_survives(
    setup: Setup, make_node: NodeFactory, kube: Client
) -> None:
    old = eligible_node(make_node, "127.0.0.9")
    name = old["metadata"]["name"]
    kube.delete(r.NODES, name)
    new = eligible_node(make_node, "127.0.0.9", name=name)
    with Client.from_kubeconfig(setup.kubeconfig, field_manager="t") as client:
        api = KubeNodeApi(AsyncClient(client))
        stale = old["metadata"]["resourceVersion"]
        with pytest.raises(ke.Conflict):
            asyncio.run(api.delete_node(name, uid=uid(old), resource_version=stale, dry_run=False))
    assert exists(kube, name, uid(new))


def test_l17_recycled_node_name(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    old = eligible_node(make_node, str(link.unused_v4))
    name = old["metadata"]["name"]
    with controller(setup, "--not-ready-timeout=30s", "--ping-timeout=3s") as c:
        eventually(lambda: c.value("probes_in_flight") > 0, timeout=10, message="probing")
        kube.delete(r.NODES, name)
        new = eligible_node(make_node, str(link.unused_v4), name=name, age=0)
        kept(kube, new)
        assert c.value("deletions_total", result="deleted") == 0


def test_l18_recovery_between_probe_and_delete(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    with controller(setup, "--ping-timeout=3s") as c:
        eventually(lambda: c.value("probes_in_flight") > 0, timeout=10, message="probing")
        _set_ready(kube, name, "True", datetime.now(UTC))
        kept(kube, node, seconds=6)
        assert c.value("deletions_total", result="deleted") == 0


def test_l16_restart_in_the_middle_of_a_countdown(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    start = time.monotonic()
    node = eligible_node(make_node, str(link.unused_v4), age=20)
    first = controller(setup, "--not-ready-timeout=30s").start()
    time.sleep(2)
    assert first.stop() == 0  # the in-process SIGTERM path: lease released, exit 0
    time.sleep(2)
    with controller(setup, "--not-ready-timeout=30s"):
        remaining = 14 - (time.monotonic() - start)
        eventually(lambda: gone(kube, node), timeout=remaining, message="deleted before +14 s")
