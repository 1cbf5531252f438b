"""Fixtures of the node-ipam-controller integration tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam import harness
from tests.integration.ipam.objects import Selector, cluster_cidr
from tests.support import names
from tests.support import resources as r
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane

# The apiserver accepts core/v1 Events about cluster-scoped objects only in "default" (legacy
# Event validation), which is why --event-namespace defaults to it.
EVENT_NAMESPACE = "default"
FIXTURE_U_FLAGS = (
    "--cluster-cidr=10.96.0.0/12,fd00:10:96::/112",
    "--node-cidr-mask-size-ipv4=24",
    "--node-cidr-mask-size-ipv6=120",
    "--service-cluster-ip-range=10.94.0.0/24,2001:db2::/120",
)


class StartIpam(Protocol):
    def __call__(
        self, *args: str, leader_election: bool = False, env: Mapping[str, str] | None = None
    ) -> harness.IpamProcess: ...


@pytest.fixture
def scope_label(test_labels: dict[str, str]) -> dict[str, str]:
    """The label every selector of the test also requires, so pools match only its Nodes."""
    return {names.TEST_LABEL: test_labels[names.TEST_LABEL]}


@pytest.fixture
def make_pool(
    kube: Client,
    track: Tracker,
    unique_name: str,
    test_labels: dict[str, str],
    scope_label: dict[str, str],
) -> Callable[..., Obj]:
    """`make_pool(suffix, bits=…, ipv4=…, ipv6=…, sel={…} | [{…}, …] | None)`.

    Each selector term also requires the test's label (a catch-all stays a catch-all)."""

    def make(suffix: str, *, sel: Selector = None, scoped: bool = True, **kw: Any) -> Obj:
        name = f"{unique_name[:45]}-{suffix}"[:63].rstrip("-")
        if sel is not None and scoped:
            sel = (
                {**sel, **scope_label}
                if isinstance(sel, Mapping)
                else [{**t, **scope_label} for t in sel]
            )
        created = kube.create(r.CLUSTER_CIDRS, cluster_cidr(name, test_labels, sel=sel, **kw))
        track(r.CLUSTER_CIDRS, name)
        return created

    return make


@pytest.fixture
def node_name(unique_name: str) -> Callable[[str], str]:
    return lambda suffix: f"{unique_name[:45]}-{suffix}"[:63].rstrip("-")


@pytest.fixture
def new_node(
    kube: Client, make_node: NodeFactory, node_name: Callable[[str], str]
) -> Callable[..., Obj]:
    """`new_node(suffix, labels={…}, pod_cidrs=[…])`: a Node with the test's labels."""

    def make(suffix: str, labels: Mapping[str, str] | None = None, **kw: Any) -> Obj:
        pod_cidrs = kw.pop("pod_cidrs", None)
        if pod_cidrs is None:
            return make_node(node_name(suffix), labels=labels, **kw)
        return _node_with_cidrs(kube, make_node, node_name(suffix), labels, pod_cidrs)

    return make


def _node_with_cidrs(
    kube: Client, make_node: NodeFactory, name: str, labels: Mapping[str, str] | None,
    pod_cidrs: list[str],
) -> Obj:  # fmt: skip
    """A Node holding CIDRs from history: created, then patched at once by the test."""
    node = make_node(name, labels=labels, ready=None)
    patch = [
        {"op": "add", "path": "/spec/podCIDR", "value": pod_cidrs[0]},
        {"op": "add", "path": "/spec/podCIDRs", "value": pod_cidrs},
    ]
    return kube.patch(r.NODES, node["metadata"]["name"], patch, patch_type="json") or node


@pytest.fixture
def start_ipam(  # noqa: PLR0917 (pytest passes fixtures by name)
    kube: Client,
    track: Tracker,
    control_plane: ControlPlane,
    test_namespace: str,
    test_labels: dict[str, str],
    unique_name: str,
    test_artifacts: Path,
) -> Iterator[StartIpam]:
    """Start the controller (subprocess) with the shipped RBAC; all stopped at teardown."""
    procs: list[harness.IpamProcess] = []
    counter = itertools.count(1)
    lease = f"{unique_name[:40]}-lease"
    harness.apply_rbac(
        kube, track, test_labels, name=unique_name, namespace=test_namespace,
        lease_name=lease, event_namespace=EVENT_NAMESPACE,
    )  # fmt: skip
    # A ServiceAccount token (preferred): the client-certificate form would
    # need a CN of at most 64 characters, which the per-test namespace name exceeds.
    kubeconfig = control_plane.token_kubeconfig(harness.SA, test_namespace)

    def start(
        *args: str, leader_election: bool = False, env: Mapping[str, str] | None = None
    ) -> harness.IpamProcess:
        election = (
            [f"--leader-elect-namespace={test_namespace}", f"--leader-elect-resource-name={lease}"]
            if leader_election
            else ["--enable-leader-election=false"]
        )
        log_path = test_artifacts / f"node-ipam-controller-{next(counter)}.log"
        proc = harness.start(
            [*election, f"--event-namespace={EVENT_NAMESPACE}", *args], kubeconfig, log_path,
            env=env,
        )  # fmt: skip
        procs.append(proc)
        return proc

    yield start
    for proc in reversed(procs):
        proc.stop()
