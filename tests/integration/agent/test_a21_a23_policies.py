"""Address fights, provided-node-ip policies and the provider ID against the real apiserver
(A21-A23); in-process agent, netlink in a namespace
(pattern 3 in docs/testing.md)."""

from __future__ import annotations

import threading

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import resources as r
from tests.support.agent_harness import (
    FAST,
    QUIET_HTTP,
    InProcessAgent,
    metric,
    options,
    taint_keys,
)
from tests.support.agent_scenarios import (
    A01_ARGS,
    NodeRecorder,
    a01_network,
    condition_is,
    events_with,
    hold,
    initialised,
    is_untainted,
    metric_total,
    pairs,
    set_addresses,
)
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns


class FightingKubelet:
    """A kubelet without --cloud-provider=external: on every change of the Node it writes
    ``[InternalIP 192.0.2.10, Hostname <node>]`` back, as field manager ``kubelet``."""

    def __init__(self, cp: ControlPlane, name: str) -> None:
        self.name = name
        self.client = Client.from_kubeconfig(cp.admin_kubeconfig, field_manager="kubelet")
        self.wanted = [("InternalIP", "192.0.2.10"), ("Hostname", name)]
        self.writes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="fighting-kubelet", daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                node = self.client.get(r.NODES, self.name)
                if pairs(node) != self.wanted:
                    set_addresses(self.client, self.name, self.wanted)
                    self.writes += 1
                stream = self.client.watch(
                    r.NODES,
                    field_selector=f"metadata.name={self.name}",
                    resource_version=node["metadata"]["resourceVersion"],
                    timeout_seconds=2,
                )
                for _ in stream:  # any change: look again
                    break
                stream.close()
            except (ApiError, OSError):
                continue

    def __enter__(self) -> FightingKubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.client.close()


@pytest.mark.timeout(180)  # the scenario itself: up to 60 s to detect, then 60 s observed
def test_a21_kubelet_fight_is_detected_and_writes_pause(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    with (
        FightingKubelet(control_plane, name),
        InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name) as run,
    ):
        agent = run.agent
        assert agent is not None
        eventually(
            lambda: condition_is(kube, name, "False", "KubeletOwnsAddresses"),
            timeout=60,
            interval=0.5,
            message="condition KubeletOwnsAddresses",
        )
        conflict = eventually(lambda: events_with(kube, name, "KubeletAddressConflict"), timeout=10)
        assert "kubelet" in str(conflict[0].get("message")), conflict
        assert metric(agent, "local_ccm_agent_address_conflict") == 1
        written = metric_total(agent, "local_ccm_agent_node_writes_total", kind="addresses")
        hold(
            60,
            lambda: (
                metric_total(agent, "local_ccm_agent_node_writes_total", kind="addresses")
                <= written + 2
            ),
            interval=1.0,
            what="at most 2 address PATCHes",
        )


@pytest.mark.parametrize("policy", ["prefer", "strict", "ignore"])
def test_a22_provided_node_ip_policies(
    *,
    policy: str,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
) -> None:
    up = netns.uplink(
        node_if="eth1", v4=("192.0.2.10/24", "192.0.2.1/24"), v6=None, default_routes=False
    )
    name = make_node(uninitialized=True, provided_node_ip="192.0.2.5")["metadata"]["name"]
    set_addresses(kube, name, [("InternalIP", "192.0.2.5")])
    argv = [
        f"--node-name={name}",
        "--internal-ip-target=192.0.2.1",
        "--external-ip-target=",
        f"--provided-node-ip-policy={policy}",
        *FAST,
        *QUIET_HTTP,
    ]
    with InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=up.node.name):
        if policy == "prefer":
            node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
            eventually(lambda: events_with(kube, name, "ProvidedNodeIPMismatch"), timeout=10)
            assert pairs(node) == [("InternalIP", "192.0.2.5")], node["status"]
        elif policy == "strict":
            eventually(lambda: events_with(kube, name, "InitializationBlocked"), timeout=10)
            node = eventually(
                lambda: condition_is(kube, name, "False", "ProvidedNodeIPMismatch"), timeout=10
            )
            assert names.UNINITIALIZED_TAINT in taint_keys(node), node["spec"]
            assert pairs(node) == [("InternalIP", "192.0.2.5")], node["status"]
        else:
            node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
            assert pairs(node) == [("InternalIP", "192.0.2.10")], node["status"]


def test_a23_provider_id_is_set_before_the_taint_goes_and_never_overwritten(
    *, control_plane: ControlPlane, kube: Client, make_node: NodeFactory, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)
    fresh = make_node(uninitialized=True, node_info={"systemUUID": "ABC-1"})
    name = fresh["metadata"]["name"]
    argv = [*A01_ARGS, "--provider-id=local://{system_uuid}", *FAST, *QUIET_HTTP]
    admin = control_plane.admin_kubeconfig
    with (
        NodeRecorder(kube, name, fresh["metadata"]["resourceVersion"]) as recorder,
        InProcessAgent(options([f"--node-name={name}", *argv], admin), netns=ns.name),
    ):
        node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
        eventually(lambda: any(is_untainted(n) for n in recorder.snapshot()), timeout=10)
    assert node["spec"]["providerID"] == "local://abc-1"
    first_untainted = next(n for n in recorder.snapshot() if is_untainted(n))
    assert first_untainted["spec"].get("providerID") == "local://abc-1", first_untainted["spec"]

    other = make_node(
        uninitialized=True, provider_id="other://x", node_info={"systemUUID": "ABC-1"}
    )["metadata"]["name"]
    with InProcessAgent(options([f"--node-name={other}", *argv], admin), netns=ns.name):
        node = eventually(lambda: initialised(kube, other), timeout=10, message="untainted")
        eventually(lambda: events_with(kube, other, "ProviderIDMismatch"), timeout=10)
    assert kube.get(r.NODES, other)["spec"]["providerID"] == "other://x"
