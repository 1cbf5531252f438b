"""Detection failures keep the last good state and never block, and the condition says so
(A08, A10); in-process agent, netlink in a namespace."""

from __future__ import annotations

import pytest

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options
from tests.support.agent_scenarios import (
    A01_ADDRESSES,
    A01_ARGS,
    NodeRecorder,
    a01_network,
    condition_is,
    events_with,
    hold,
    initialised,
    kubelet_seed,
    metric_total,
    pairs,
    patches,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
NO_ROUTE = {"type": "external", "family": "ipv4", "result": "no_route"}


def test_a08_no_route_with_a_kubelet_internal_ip_initialises_and_then_stays_quiet(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(
        node_if="eth1", v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None, default_routes=False
    )
    name = make_node(uninitialized=True)["metadata"]["name"]
    kubelet_seed(kube, name)
    argv = [f"--node-name={name}", *FAST, *QUIET_HTTP]  # default flags: ExternalIP via 8.8.8.8
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name) as run:
        agent = run.agent
        eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        eventually(lambda: condition_is(kube, name, "False", "NoRoute"), timeout=10)
        eventually(lambda: events_with(kube, name, "AddressDetectionFailed"), timeout=10)
        assert patches(agent) == 2  # the status (condition + annotation) and the taint
        before = metric_total(agent, "local_ccm_agent_detections_total", **NO_ROUTE)
        hold(10, lambda: patches(agent) == 2, what="no PATCH after the first two writes")
        grown = metric_total(agent, "local_ccm_agent_detections_total", **NO_ROUTE) - before
    assert grown >= 8, f"no_route detections grew by {grown} in 10 ticks of 1 s"
    failed = events_with(kube, name, "AddressDetectionFailed")
    assert len(failed) == 1, failed
    assert failed[0].get("count", 1) == 1, failed
    assert pairs(kube.get(r.NODES, name)) == [("InternalIP", "192.0.2.10"), ("Hostname", name)]


def test_a10_route_lost_and_restored_keeps_the_external_ip(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name) as run:
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        assert pairs(node) == A01_ADDRESSES
        writes = metric_total(run.agent, "local_ccm_agent_node_writes_total", kind="addresses")
        with NodeRecorder(kube, name, node["metadata"]["resourceVersion"]) as recorder:
            ns.ip("route", "del", "default")
            lost = eventually(lambda: condition_is(kube, name, "False", "NoRoute"), timeout=10)
            assert pairs(lost) == A01_ADDRESSES, lost
            ns.ip("route", "add", "default", "via", "198.51.100.1", "dev", "eth0")
            eventually(lambda: condition_is(kube, name, "True", "AddressesSynced"), timeout=10)
            eventually(lambda: events_with(kube, name, "AddressDetectionRecovered"), timeout=10)
        written = metric_total(run.agent, "local_ccm_agent_node_writes_total", kind="addresses")
        assert written == writes
    assert recorder.address_lists() == [A01_ADDRESSES], recorder.address_lists()
