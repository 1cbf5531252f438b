"""Fixtures of the chart checks.

The chart's checks run at the oldest Kubernetes its admission policy supports (1.30) and at the
newest supported minor:
`policy_minimum_plane` is a second etcd + kube-apiserver at the pin `kubernetes_policy_minimum`,
shared by the session. A module that runs its checks at both versions overrides `control_plane`
and `kube_version` with `control_plane, kube_version = at_both_versions()`; the per-test
fixtures (`kube`, `track`, `test_namespace`, `make_node`) then follow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import Binaries, load_pins
from tests.support.chart import IPAM_MINIMUM_KUBE_VERSION, Helm, helm, pinned_kube_version
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


def at_both_versions() -> tuple[object, object]:
    """Module fixtures `control_plane` (parametrized over PLANE_VERSIONS) and `kube_version`
    (renders for that plane) for a module that runs its checks at both versions:
    `control_plane, kube_version = at_both_versions()`."""

    @pytest.fixture(scope="module", params=PLANE_VERSIONS, name="control_plane")
    def plane(
        request: pytest.FixtureRequest,
        control_plane: ControlPlane,
        policy_minimum_plane: ControlPlane,
    ) -> ControlPlane:
        return plane_at(request.param, control_plane, policy_minimum_plane)

    @pytest.fixture(scope="module", name="kube_version")
    def version(control_plane: ControlPlane) -> str:
        return control_plane.version.removeprefix("v")

    return plane, version


def ipam_renders_at(kube_version: str) -> bool:
    """Whether the chart renders node-ipam-controller for `kube_version` (D03): its CRD's CEL
    rules use the CIDR library, which an apiserver allows in new rules from 1.31 on (1.30 only
    in rules already stored), so a real 1.30 apiserver refuses the CRD."""

    def minor(version: str) -> tuple[int, int]:
        major, minor_, *_ = version.removeprefix("v").split(".")
        return int(major), int(minor_)

    return minor(kube_version) >= minor(IPAM_MINIMUM_KUBE_VERSION)


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
