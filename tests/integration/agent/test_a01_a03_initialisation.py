"""Initialisation against the real apiserver (A01-A03, A06), with the
agent's netlink side in a test namespace."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import (
    FAST,
    QUIET_HTTP,
    InProcessAgent,
    addresses,
    condition,
    event_reasons,
    options,
    taint_keys,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import Namespace, NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def a01_network(netns: NetnsFactory) -> Namespace:
    """eth1 192.0.2.10/24 (route 192.0.2.0/24), eth0 198.51.100.10/24 with the default route."""
    eth1 = netns.uplink(node_if="eth1", gateway_if="gw1", v4=("192.0.2.10/24", "192.0.2.1/24"),
                        v6=None, default_routes=False)  # fmt: skip
    netns.uplink(eth1.node, node_if="eth0", gateway_if="gw0",
                 v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)  # fmt: skip
    return eth1.node


A01_ARGS = (
    "--internal-ip-target=192.0.2.1",
    "--external-ip-target=203.0.113.1",
    *FAST,
    *QUIET_HTTP,
)
A01_ADDRESSES = [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.10")]


def initialised(kube: Client, name: str) -> dict[str, Any] | None:
    node = kube.get(r.NODES, name)
    return None if names.UNINITIALIZED_TAINT in taint_keys(node) else node


def test_a01_single_stack_initialisation(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    opts = options([f"--node-name={name}", *A01_ARGS], control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=ns.name):
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        assert addresses(kube, name) == A01_ADDRESSES
        annotations = node["metadata"]["annotations"]
        owned = "InternalIP=192.0.2.10,ExternalIP=198.51.100.10"
        assert annotations[names.OWNED_ADDRESSES_ANNOTATION] == owned
        assert condition(node, names.ADDRESSES_SYNCED_CONDITION) == ("True", "AddressesSynced")
        eventually(
            lambda: {"AddressesUpdated", "NodeInitialized"} <= set(event_reasons(kube, name)),
            timeout=10,
            message="Events AddressesUpdated and NodeInitialized",
        )


def test_a02_addresses_are_written_before_the_taint_is_removed(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    created = make_node(uninitialized=True)
    name = created["metadata"]["name"]
    seen: list[dict[str, Any]] = []
    stream = kube.watch(
        r.NODES, field_selector=f"metadata.name={name}",
        resource_version=created["metadata"]["resourceVersion"], timeout_seconds=30,
    )  # fmt: skip

    def collect() -> None:
        for event in stream:
            seen.append(event.object)
            if names.UNINITIALIZED_TAINT not in taint_keys(event.object):
                return

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()  # the watch is open before the agent starts
    try:
        opts = options([f"--node-name={name}", *A01_ARGS], control_plane.admin_kubeconfig)
        with InProcessAgent(opts, netns=ns.name):
            reader.join(15)
    finally:
        stream.close()
    untainted = [n for n in seen if names.UNINITIALIZED_TAINT not in taint_keys(n)]
    assert untainted, f"no untainted version seen: {seen}"
    first = untainted[0]
    got = [(a["type"], a["address"]) for a in first["status"].get("addresses") or []]
    assert got == A01_ADDRESSES
    with_addresses = [n for n in seen if n["status"].get("addresses")]
    status_rv = int(with_addresses[0]["metadata"]["resourceVersion"])
    assert status_rv < int(first["metadata"]["resourceVersion"])


def test_a03_original_default_flags_with_a_kubelet_seeded_node(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    # Only a default route via eth0; the lookup of 8.8.8.8 happens inside the namespace and
    # sends nothing.
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    seeded = make_node(uninitialized=True, provided_node_ip="192.0.2.10")
    name = seeded["metadata"]["name"]
    kubelet = [
        {"type": "InternalIP", "address": "192.0.2.10"},
        {"type": "Hostname", "address": name},
    ]
    kube.patch(
        r.NODES, name, {"status": {"addresses": kubelet}}, patch_type="merge", subresource="status"
    )
    argv = ["--node-name=$(NODE_NAME)", "--external-ip-target=8.8.8.8", "--remove-taint=true",
            "--reconcile-interval=10s", "--v=2"]  # fmt: skip
    argv[0] = argv[0].replace("$(NODE_NAME)", name)  # expanded as the kubelet would
    opts = options(argv, control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=up.node.name):
        eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        expected = [
            ("InternalIP", "192.0.2.10"),
            ("ExternalIP", "198.51.100.10"),
            ("Hostname", name),
        ]
        assert addresses(kube, name) == expected


def test_a06_dual_stack_kubelet_addresses_survive(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    seeded = make_node(uninitialized=True, provided_node_ip="192.0.2.10,2001:db8:1::10")
    name = seeded["metadata"]["name"]
    kubelet = [
        {"type": "InternalIP", "address": "192.0.2.10"},
        {"type": "InternalIP", "address": "2001:db8:1::10"},
        {"type": "Hostname", "address": name},
    ]
    kube.patch(
        r.NODES, name, {"status": {"addresses": kubelet}}, patch_type="merge", subresource="status"
    )
    argv = [f"--node-name={name}", "--external-ip-target=203.0.113.1", *FAST, *QUIET_HTTP]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        assert addresses(kube, name) == [
            ("InternalIP", "192.0.2.10"),
            ("InternalIP", "2001:db8:1::10"),
            ("ExternalIP", "198.51.100.10"),
            ("Hostname", name),
        ]
