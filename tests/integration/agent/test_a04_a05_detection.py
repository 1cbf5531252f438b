"""External dedupe and dual-stack detection order against the real apiserver (A04, A05); in-process
agent, netlink in a namespace."""

from __future__ import annotations

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options
from tests.support.agent_scenarios import hold, initialised, kubelet_seed, pairs, patches
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def test_a04_external_ip_equal_to_the_internal_ip_is_not_written(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None)  # eth0, default route
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.10")["metadata"]["name"]
    kubelet_seed(kube, name)
    argv = [
        f"--node-name={name}",
        "--external-ip-target=8.8.8.8",
        "--remove-taint=true",
        "--reconcile-interval=10s",
        "--v=2",
    ]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
    assert pairs(node) == [("InternalIP", "192.0.2.10"), ("Hostname", name)], node["status"]
    assert node["metadata"]["annotations"][names.OWNED_ADDRESSES_ANNOTATION] == ""


DUAL_STACK = [
    ("InternalIP", "192.0.2.10"),
    ("InternalIP", "2001:db8:1::10"),
    ("ExternalIP", "198.51.100.10"),
    ("ExternalIP", "2001:db8:2::10"),
]
IPV6_FIRST = [DUAL_STACK[1], DUAL_STACK[0], DUAL_STACK[3], DUAL_STACK[2]]


def test_a05_dual_stack_detection_and_family_order(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    eth1 = netns.uplink(
        node_if="eth1",
        gateway_if="gw1",
        v4=("192.0.2.10/24", "192.0.2.1/24"),
        v6=("2001:db8:1::10/64", "2001:db8:1::1/64"),
        default_routes=False,
    )
    netns.uplink(
        eth1.node,
        node_if="eth0",
        v4=("198.51.100.10/24", "198.51.100.1/24"),
        v6=("2001:db8:2::10/64", "2001:db8:2::1/64"),
    )
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [
        f"--node-name={name}",
        "--internal-ip-target=192.0.2.1,2001:db8:1::1",
        "--external-ip-target=203.0.113.1,2001:db8:ffff::1",
        *FAST,
        *QUIET_HTTP,
    ]
    admin = control_plane.admin_kubeconfig
    with InProcessAgent(options(argv, admin), netns=eth1.node.name):
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
    assert pairs(node) == DUAL_STACK, node["status"]
    ordered = [*argv, "--ip-family-order=ipv6,ipv4"]
    with InProcessAgent(options(ordered, admin), netns=eth1.node.name) as run:
        eventually(
            lambda: pairs(kube.get(r.NODES, name)) == IPV6_FIRST, timeout=10, message="IPv6 first"
        )
        hold(5, lambda: patches(run.agent) == 1, what="exactly one write")
    assert pairs(kube.get(r.NODES, name)) == IPV6_FIRST
