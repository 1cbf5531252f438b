"""Air-gapped and address-less Nodes (A07, A09), in-process agent with
its netlink side in a test namespace."""

from __future__ import annotations

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
    metric,
    options,
    run_once,
    taint_keys,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def untainted(kube: Client, name: str) -> bool:
    return names.UNINITIALIZED_TAINT not in taint_keys(kube.get(r.NODES, name))


def test_a07_air_gapped_node_is_initialised_without_warnings(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(node_if="eth1", v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None,
                      default_routes=False)  # fmt: skip
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [f"--node-name={name}", "--external-ip-target=", "--internal-ip-target=192.0.2.1"]
    opts = options([*argv, *FAST, *QUIET_HTTP], control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=up.node.name):
        eventually(lambda: untainted(kube, name), timeout=10, message="taint removed")
        assert addresses(kube, name) == [("InternalIP", "192.0.2.10")]
        node = kube.get(r.NODES, name)
        assert condition(node, names.ADDRESSES_SYNCED_CONDITION) == ("True", "AddressesSynced")
        eventually(lambda: "NodeInitialized" in event_reasons(kube, name), timeout=10)
        events = kube.list(
            r.EVENTS, namespace="default", field_selector=f"involvedObject.name={name}"
        )["items"]
        assert [e["reason"] for e in events if e["type"] == "Warning"] == []


def test_a09_no_internal_ip_holds_the_taint_until_an_address_appears_without_restart(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(node_if="eth1", v4=None, v6=None, default_routes=False)
    name = make_node(uninitialized=True)["metadata"]["name"]
    # Default --reconcile-interval (10 s): recovery within 5 s can only come from netlink.
    argv = [f"--node-name={name}", "--internal-ip-cidrs=192.0.2.0/24", "--settle-time=1s"]
    opts = options([*argv, *QUIET_HTTP], control_plane.admin_kubeconfig)
    with InProcessAgent(opts, netns=up.node.name) as running:
        assert running.agent is not None
        agent = running.agent

        def blocked() -> bool:
            node = kube.get(r.NODES, name)
            held = names.UNINITIALIZED_TAINT in taint_keys(node)
            reason = condition(node, names.ADDRESSES_SYNCED_CONDITION)
            return held and reason == ("False", "NoInternalIP")

        eventually(blocked, timeout=10, message="condition False/NoInternalIP")
        eventually(lambda: "InitializationBlocked" in event_reasons(kube, name), timeout=10)
        gauge = "local_ccm_agent_initialization_blocked"
        assert metric(agent, gauge, {"reason": "no_internal_ip"}) == 1
        up.node.add_address("eth1", "192.0.2.10/24")
        eventually(lambda: untainted(kube, name), timeout=5, message="netlink-triggered init")
        assert addresses(kube, name) == [("InternalIP", "192.0.2.10")]
        assert metric(agent, gauge, {"reason": "no_internal_ip"}) == 0


def test_a24_run_once_exit_codes(
    control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(node_if="eth1", v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None,
                      default_routes=False)  # fmt: skip
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = ["--run-once", "--internal-ip-target=192.0.2.1", "--external-ip-target=", *QUIET_HTTP]
    admin = control_plane.admin_kubeconfig
    assert run_once(options([f"--node-name={name}", *argv], admin), netns=up.node.name) == 0
    assert untainted(kube, name)
    absent = options([f"--node-name={name}-absent", *argv], admin)
    assert run_once(absent, netns=up.node.name) == 1
    # No route and no InternalIP: exits 1 (well within 60 s) and the taint stays.
    bare = netns.uplink(node_if="eth1", v4=None, v6=None, default_routes=False)
    other = make_node(uninitialized=True)["metadata"]["name"]
    assert run_once(options([f"--node-name={other}", *argv], admin), netns=bare.node.name) == 1
    assert not untainted(kube, other)
