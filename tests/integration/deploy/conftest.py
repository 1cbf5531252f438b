"""Fixtures of the chart checks (spec/deploy.md §9, TESTING.md §6 and §3.9).

§9 asks for the checks "at the minimum policy version 1.30 and at the newest supported minor":
`policy_minimum_plane` is a second etcd + kube-apiserver at the pin `kubernetes_policy_minimum`,
shared by the session. A module that runs its checks at both versions overrides `control_plane`
with a module fixture parametrized over `PLANE_VERSIONS` that returns `plane_at(...)`; the
per-test fixtures (`kube`, `track`, `test_namespace`, `make_node`) then follow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import Binaries, load_pins
from tests.support.chart import Helm, helm, pinned_kube_version
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.recipes import APISERVER_POLICY_MINIMUM

_PINS = load_pins()
#: The newest pinned Kubernetes and the admission policy's oldest; also the test ids.
PLANE_VERSIONS = (_PINS.kubernetes, _PINS.kubernetes_policy_minimum)


def plane_at(version: str, *planes: ControlPlane) -> ControlPlane:
    """The running plane whose apiserver reports `version`."""
    for plane in planes:
        if plane.version == version:
            return plane
    raise AssertionError(f"no plane at {version}: {[p.version for p in planes]}")


@pytest.fixture(scope="session")
def chart_helm(helm_binary: Path) -> Iterator[Helm]:
    """helm with private HELM_* directories, shared by the session."""
    with helm(helm_binary) as h:
        yield h


@pytest.fixture(scope="session")
def kube_version() -> str:
    """The control plane's version: every render of a test that talks to it uses this."""
    return pinned_kube_version()


@pytest.fixture(scope="session")
def policy_minimum_plane(
    request: pytest.FixtureRequest, binaries: Binaries
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver `kubernetes_policy_minimum` (no kcm, no CRDs), on first request."""
    with dedicated_plane(
        request.config, binaries, "policy-minimum-plane", apiserver=APISERVER_POLICY_MINIMUM
    ) as plane:
        yield plane
