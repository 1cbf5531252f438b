"""Fixtures of the benchmarks: the agent benchmarks' (tests/bench/test_agent_*.py) and those
every `make bench-compare` file shares (its scale settings, the Go originals built)."""

from __future__ import annotations

import os
import secrets

import pytest

from local_ccm.kube.client import Client
from tests.bench.agent_bench import AgentIdentity, Tracker, grant_agent
from tests.bench.compare_record import resumed_parts
from tests.bench.compare_stats import Settings, settings_from_env
from tests.support import originals
from tests.support.chart import ShippedRbac
from tests.support.controlplane import ControlPlane
from tests.support.processes import compile_optimized


@pytest.fixture(scope="session")
def shipped_pyc() -> None:
    """The agent runs as the image runs it (PYTHONOPTIMIZE=2): its level-2 .pyc files exist."""
    compile_optimized()


@pytest.fixture(scope="session")
def settings() -> Settings:
    """The scale of `make bench-compare` (its BENCH_* variables); a baseline's tree gets its
    level-2 .pyc files as ours does."""
    chosen = settings_from_env(os.environ)
    if chosen.baseline:
        compile_optimized(chosen.baseline)
    return chosen


@pytest.fixture(scope="session")
def built(shipped_pyc: None) -> originals.Built:
    """The Go originals built, and ours compiled as the image ships it (level-2 .pyc)."""
    return originals.ensure()


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """BENCH_RESUME=1: a `make bench-compare` stopped midway goes on where it stopped; each part
    whose newest result in test-artifacts/bench is of this commit at these settings is kept."""
    if os.environ.get("BENCH_RESUME", "").strip() not in {"1", "true", "yes"}:
        return
    kept = resumed_parts(settings_from_env(os.environ).as_dict())
    for item in items:
        part = getattr(item, "originalname", item.name).removeprefix("test_compare_")
        if part in kept:
            reason = f"BENCH_RESUME: {kept[part]} holds this part, of this commit and settings"
            item.add_marker(pytest.mark.skip(reason=reason))
