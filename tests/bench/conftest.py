"""Fixtures of the agent benchmarks (tests/bench/test_agent_*.py)."""

from __future__ import annotations

import secrets

import pytest

from local_ccm.kube.client import Client
from tests.bench.agent_bench import AgentIdentity, Tracker, grant_agent
from tests.support.chart import ShippedRbac
from tests.support.controlplane import ControlPlane
from tests.support.processes import compile_optimized


@pytest.fixture(scope="session")
def shipped_pyc() -> None:
    """The agent runs as the image runs it (PYTHONOPTIMIZE=2): its level-2 .pyc files exist."""
    compile_optimized()


@pytest.fixture
def agent_identity(
    *,
    shipped_pyc: None,
    control_plane: ControlPlane,
    kube: Client,
    track: Tracker,
    test_labels: dict[str, str],
    shipped_agent_rbac: ShippedRbac,
) -> AgentIdentity:
    """A client-certificate user with exactly the agent's permissions on the shared plane."""
    user = f"local-ccm-bench-{secrets.token_hex(3)}"
    grant_agent(kube, user, test_labels, track, shipped_agent_rbac)
    port = int(control_plane.api_url.rsplit(":", 1)[1])
    return AgentIdentity(user, control_plane.user_kubeconfig(user, []), port, control_plane.version)
