"""Changes to an initialised Node and its host: classification, settle time, a Node deleted
or replaced (A14, A19, A29); in-process agent, netlink in a namespace."""

from __future__ import annotations

import pytest

from local_ccm import names
from local_ccm.kube.client import Client, Obj
from tests.support import resources as r
from tests.support.agent_harness import FAST, QUIET_HTTP, InProcessAgent, metric, options
from tests.support.agent_scenarios import (
    A01_ADDRESSES,
    A01_ARGS,
    NodeRecorder,
    a01_network,
    events_with,
    hold,
    initialised,
    metric_total,
    move_address,
    pairs,
    patches,
    set_addresses,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


def with_addresses(kube: Client, name: str, expected: list[tuple[str, str]]) -> Obj | None:
    node = kube.get(r.NODES, name)
    return node if pairs(node) == expected else None


def test_a14_foreign_entries_are_preserved_when_the_own_address_changes(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with (
        InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name),
        Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="other") as other,
    ):
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        foreign = [("ExternalIP", "203.0.113.99"), ("InternalDNS", "n1.example.")]
        set_addresses(other, name, [*pairs(node), *foreign])
        move_address(ns, "eth0", "198.51.100.10/24", "198.51.100.20/24", "198.51.100.1")
        expected = [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.20"), *foreign]
        node = eventually(
            lambda: with_addresses(kube, name, expected),
            timeout=10,
            message=f"addresses {expected}",
        )
        owned = node["metadata"]["annotations"][names.OWNED_ADDRESSES_ANNOTATION]
        assert owned == "InternalIP=192.0.2.10,ExternalIP=198.51.100.20"

        def change_reported() -> bool:
            messages = [str(e.get("message")) for e in events_with(kube, name, "AddressesUpdated")]
            return any("198.51.100.10 → 198.51.100.20" in m for m in messages)

        eventually(change_reported, timeout=10, message="AddressesUpdated 198.51.100.10 → .20")


def test_a19_node_deleted_and_recreated_is_initialised_again(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    first = make_node(uninitialized=True)
    name = first["metadata"]["name"]
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name) as run:
        agent = run.agent
        assert agent is not None
        eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        sent = patches(agent)
        kube.delete(r.NODES, name)
        eventually(lambda: metric(agent, "local_ccm_agent_node_present") == 0, timeout=10)

        def absent_and_quiet() -> bool:
            return metric(agent, "local_ccm_agent_node_present") == 0 and patches(agent) == sent

        hold(5, absent_and_quiet, what="no PATCH while the Node is absent")
        assert run.exit_code is None
        assert run.error is None
        second = make_node(name, uninitialized=True)
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        node = eventually(lambda: initialised(kube, name), timeout=10, message="re-initialised")
        assert pairs(node) == A01_ADDRESSES, node["status"]
        assert metric(agent, "local_ccm_agent_node_present") == 1


def test_a29_address_flapping_within_the_settle_time_writes_nothing(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name) as run:
        node = eventually(lambda: initialised(kube, name), timeout=10, message="taint removed")
        writes = metric_total(run.agent, "local_ccm_agent_node_writes_total", kind="addresses")
        flap = [
            "addr del 198.51.100.10/24 dev eth0",
            "addr add 198.51.100.10/24 dev eth0",
            "route add default via 198.51.100.1 dev eth0",
        ] * 10
        with NodeRecorder(kube, name, node["metadata"]["resourceVersion"]) as recorder:
            ns.batch(*flap)  # ten deletes and re-adds in a few milliseconds
            hold(
                10,
                lambda: (
                    metric_total(run.agent, "local_ccm_agent_node_writes_total", kind="addresses")
                    == writes
                ),
                what="no address PATCH",
            )
        assert metric_total(run.agent, "local_ccm_agent_netlink_events_total", kind="addr") >= 20
    assert recorder.address_lists() in ([], [A01_ADDRESSES]), recorder.address_lists()
