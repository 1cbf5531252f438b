"""Fixtures of the agent's integration scenarios (spec/agent.md §11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chart import ShippedRbac, shipped_rbac


@pytest.fixture(scope="session")
def shipped_agent_rbac(helm_binary: Path) -> ShippedRbac:
    """The agent's ServiceAccount and RBAC exactly as the chart ships them, rendered once per
    session; :func:`tests.support.agent_process.create_agent_identity` adapts them per test."""
    return shipped_rbac(helm_binary, "agent")
