"""Fixtures for tests that run the real `local-ccm` binary (a pytest plugin, loaded by
tests/conftest.py): the chart's agent RBAC, rendered once per session, and an agent for a
fresh tainted Node on the A01 network, as scenarios A28/A33 and the
footprint check D13 start it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from local_ccm.kube.client import Client
from tests.support.agent_process import AgentProcess, agent_for_node
from tests.support.agent_scenarios import A01_ARGS, a01_network
from tests.support.chart import ShippedRbac, shipped_rbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import Namespace, NetnsFactory


class A01Run(NamedTuple):
    node: str
    agent: AgentProcess  # not started yet
    netns: Namespace  # the A01 network, for route changes


#: `a01_agent(extra_flags)` -> A01Run.
A01Agent = Callable[[Sequence[str]], A01Run]


@pytest.fixture(scope="session")
def shipped_agent_rbac(helm_binary: Path) -> ShippedRbac:
    """The agent's ServiceAccount and RBAC exactly as the chart ships them, rendered once per
    session; :func:`tests.support.agent_process.create_agent_identity` adapts them per test."""
    return shipped_rbac(helm_binary, "agent")


@pytest.fixture
def a01_agent(
    *,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> A01Agent:
    """The real agent, as uid 65532 with a Pod-bound token under the chart's RBAC, in the A01
    network namespace, for a new Node with the uninitialized taint; A01's targets plus
    `extra_flags`."""

    def make(extra_flags: Sequence[str]) -> A01Run:
        ns = a01_network(netns)
        name = make_node(uninitialized=True)["metadata"]["name"]
        agent = agent_for_node(
            control_plane, kube, track, rbac=shipped_agent_rbac, namespace=test_namespace,
            node=name, netns=ns.name, argv=[*A01_ARGS, *extra_flags],
            log_path=test_artifacts / "agent.log", labels=test_labels,
        )  # fmt: skip
        return A01Run(name, agent, ns)

    return make
