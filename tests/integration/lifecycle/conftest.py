"""Fixtures of the node-lifecycle-controller scenarios: the shipped
RBAC in a fresh namespace, a credential bound by it, and a host-side /28 for silent targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.lifecycle_harness import apply_rbac, controller_kubeconfig
from tests.support.names import TEST_LABEL
from tests.support.netns import HostLink, NetnsFactory


@dataclass(frozen=True)
class Setup:
    kube: Client
    namespace: str
    lease: str
    kubeconfig: Path
    selector: str  # matches exactly this test's Nodes

    def argv(self, *more: str) -> list[str]:
        return [f"--namespace={self.namespace}", f"--leader-elect-id={self.lease}", *more]


def _setup(
    control_plane: ControlPlane, kube: Client, track: Tracker, *, namespace: str,
    labels: dict[str, str], out_of_service: bool,
) -> Setup:  # fmt: skip
    """The namespace's name (unique per test) also names the Lease and the RBAC objects."""
    apply_rbac(kube, track, labels, name=namespace, namespace=namespace, lease=namespace,
               out_of_service=out_of_service)  # fmt: skip
    kubeconfig = controller_kubeconfig(control_plane, kube, namespace)
    return Setup(kube, namespace, namespace, kubeconfig, f"{TEST_LABEL}={labels[TEST_LABEL]}")


@pytest.fixture
def setup(
    control_plane: ControlPlane, kube: Client, track: Tracker, test_namespace: str,
    test_labels: dict[str, str],
) -> Setup:  # fmt: skip
    return _setup(control_plane, kube, track, namespace=test_namespace, labels=test_labels,
                  out_of_service=False)  # fmt: skip


@pytest.fixture
def setup_oos(
    control_plane: ControlPlane, kube: Client, track: Tracker, test_namespace: str,
    test_labels: dict[str, str],
) -> Setup:  # fmt: skip
    return _setup(control_plane, kube, track, namespace=test_namespace, labels=test_labels,
                  out_of_service=True)  # fmt: skip


@pytest.fixture
def link(netns: NetnsFactory) -> HostLink:
    """A host-side /28: <base+5> and up are silent targets, nothing leaves the machine."""
    return netns.host_link(netns())
