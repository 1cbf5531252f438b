"""The agent's start-up read of its Node on real API servers: one watch with initial events
(`sendInitialEvents`, served by 1.37) that stays open for the informer, and the LIST + WATCH
fallback where the server refuses it (1.30, WatchList off)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodecache import REFUSED_INITIAL_EVENTS, NodeCache
from local_ccm.agent.triggers import Health
from local_ccm.clock import SystemClock
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.kube.nodes import KubeNodeApi
from tests.support import names
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.recipes import APISERVER_POLICY_MINIMUM
from tests.support.resources import NODES

Seen = list[tuple[str, str, str]]


@pytest.fixture(scope="module")
def policy_minimum_plane(
    request: pytest.FixtureRequest, binaries: Binaries
) -> Iterator[ControlPlane]:
    """The oldest API server the chart supports (1.30): no streaming list."""
    with dedicated_plane(
        request.config, binaries, "initial-events-1-30", apiserver=APISERVER_POLICY_MINIMUM
    ) as plane:
        yield plane


def read_node(plane: ControlPlane, name: str) -> tuple[str | None, Seen, bool]:
    """NodeCache.read against `plane`: the Node's name, the requests seen, a watch left open."""
    seen: Seen = []
    client = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="test-initial")

    async def scenario() -> tuple[str | None, bool]:
        api = KubeNodeApi(AsyncClient(client), observe=lambda v, r, c, _: seen.append((v, r, c)))
        clock = SystemClock()
        cache = NodeCache(
            api, name, clock=clock, rng=random.Random(), metrics=AgentMetrics(),
            health=Health(clock, 60.0), timeout=15.0,
        )  # fmt: skip
        await cache.read()
        open_watch = cache._initial is not None
        if cache._initial is not None:
            await cache._initial.aclose()
        node = cache.node
        return (node["metadata"]["name"] if node else None), open_watch

    try:
        found, open_watch = asyncio.run(scenario())
    finally:
        client.close()
    return found, seen, open_watch


def create(plane: ControlPlane, name: str) -> None:
    with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="test-initial") as kube:
        kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def delete(plane: ControlPlane, name: str) -> None:
    with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="test-initial") as kube:
        kube.delete(NODES, name)


def test_a_current_api_server_answers_the_start_up_read_with_one_watch(
    control_plane: ControlPlane, unique_name: str
) -> None:
    create(control_plane, unique_name)
    try:
        found, seen, open_watch = read_node(control_plane, unique_name)
    finally:
        delete(control_plane, unique_name)
    assert found == unique_name
    assert open_watch  # handed on to the informer: no second request
    assert [v for v, _, _ in seen] == ["WATCH"]  # observed when the test closed it; no LIST


def test_an_api_server_without_streaming_lists_instead(
    policy_minimum_plane: ControlPlane, request: pytest.FixtureRequest
) -> None:
    name = names.unique_name(request.node.name, "a1")
    create(policy_minimum_plane, name)
    try:
        found, seen, open_watch = read_node(policy_minimum_plane, name)
    finally:
        delete(policy_minimum_plane, name)
    assert found == name
    assert not open_watch
    refused = [(v, c) for v, _, c in seen if v == "WATCH"]
    assert len(refused) == 1
    assert int(refused[0][1]) in REFUSED_INITIAL_EVENTS
    assert ("LIST", "nodes", "200") in seen
