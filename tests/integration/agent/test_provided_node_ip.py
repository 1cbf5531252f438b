"""The kubelet's provided node IP in the cases that went unreported or were mishandled: an
annotation that does not parse, a provided IP the agent cannot see on this host, and an
ExternalIP equal to the provided IP with --dedupe-external-ip=false. In-process agent over the
real API server, netlink in a namespace."""

from __future__ import annotations

import logging

import pytest

from local_ccm.kube.client import Client
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, options
from tests.support.agent_scenarios import (
    condition_is,
    condition_of,
    events_with,
    initialised,
    kubelet_seed,
    pairs,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns

HOST_V4 = ("192.0.2.10/24", "192.0.2.1/24")  # (node, gateway) on the node's eth1
INTERNAL_BY_ROUTE = ("--internal-ip-target=192.0.2.1",)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and text in r.getMessage()
    ]


@pytest.mark.parametrize("annotation", ["not-an-ip", "10.0.0.1,10.0.0.2,10.0.0.3"])
def test_an_unparsable_provided_node_ip_is_reported_like_a_mismatch(
    *,
    annotation: str,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    up = netns.uplink(node_if="eth1", v4=HOST_V4, v6=None, default_routes=False)
    name = make_node(uninitialized=True, provided_node_ip=annotation)["metadata"]["name"]
    argv = [f"--node-name={name}", *INTERNAL_BY_ROUTE, "--external-ip-target=", *FAST, *QUIET_HTTP]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        node = eventually(
            lambda: condition_is(kube, name, "False", "ProvidedNodeIPUnparsable"),
            timeout=15,
            message="condition False/ProvidedNodeIPUnparsable",
        )
        event = eventually(lambda: events_with(kube, name, "ProvidedNodeIPUnparsable"), timeout=10)
    condition = condition_of(node)
    assert condition is not None
    assert annotation in str(condition["message"]), condition
    assert annotation in str(event[0]["message"]), event
    assert event[0]["type"] == "Warning", event
    assert _warnings(caplog, annotation), [r.getMessage() for r in caplog.records]


def test_advice_for_a_provided_ip_not_on_this_host_names_the_flags_that_are_set(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The kubelet says 192.0.2.5 (not on this host); the agent detects 192.0.2.10. The Node
    is initialised with the ExternalIP only, and the warning must not advise setting flags
    that are set: it says which are, and what to change."""
    caplog.set_level(logging.INFO)
    up = netns.uplink(node_if="eth1", v4=HOST_V4, v6=None, default_routes=False)
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.5")["metadata"]["name"]
    argv = [
        f"--node-name={name}", *INTERNAL_BY_ROUTE, "--external-ip-target=192.0.2.1",
        *FAST, *QUIET_HTTP,
    ]  # fmt: skip
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        node = eventually(lambda: initialised(kube, name), timeout=15, message="untainted")
        advice = eventually(
            lambda: _warnings(caplog, "NoInternalIP"), timeout=15, message="the warning"
        )
    assert pairs(node) == [("ExternalIP", "192.0.2.10")], node["status"]
    text = advice[0]
    assert "set --internal-ip-target or" not in text, text
    assert "start the kubelet with --node-ip" not in text, text
    assert "192.0.2.5" in text, text
    assert "--internal-ip-target=192.0.2.1" in text, text
    assert "192.0.2.10" in text, text


def test_without_dedupe_an_external_ip_equal_to_the_provided_ip_is_kept(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    up = netns.uplink(node_if="eth1", v4=HOST_V4, v6=None, default_routes=False)
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.10")["metadata"]["name"]
    kubelet_seed(kube, name, "192.0.2.10")
    argv = [
        f"--node-name={name}", *INTERNAL_BY_ROUTE, "--external-ip-target=192.0.2.1",
        "--dedupe-external-ip=false", *FAST, *QUIET_HTTP,
    ]  # fmt: skip
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        node = eventually(
            lambda: condition_is(kube, name, "True", "AddressesSynced"),
            timeout=15,
            message="addresses synced",
        )
    assert pairs(node) == [
        ("InternalIP", "192.0.2.10"),
        ("ExternalIP", "192.0.2.10"),
        ("Hostname", name),
    ], node["status"]
