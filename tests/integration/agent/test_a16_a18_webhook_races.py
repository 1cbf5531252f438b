"""Races made deterministic by the test's validating webhook (A16-A18): another writer
changes the Node while the agent's PATCH is being admitted.
In-process agent, netlink in a namespace."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import (
    FAST,
    QUIET_HTTP,
    InProcessAgent,
    metric,
    options,
    taint_keys,
)
from tests.support.agent_scenarios import A01_ADDRESSES, A01_ARGS, a01_network, initialised, pairs
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually
from tests.support.webhook import RaceWebhook, Request, is_agent_patch

pytestmark = pytest.mark.netns
UNINITIALIZED = {"key": names.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
NOT_READY = {"key": names.NOT_READY_TAINT, "effect": "NoSchedule"}
WRITES = "local_ccm_agent_node_writes_total"


def set_taints(kube: Client, name: str, taints: list[dict[str, str]]) -> None:
    """Exactly ``taints`` (TaintNodesByCondition added not-ready at creation)."""
    kube.patch(
        r.NODES,
        name,
        [{"op": "replace", "path": "/spec/taints", "value": taints}],
        patch_type="json",
    )


def other_writer(cp: ControlPlane, manager: str) -> Client:
    return Client.from_kubeconfig(cp.admin_kubeconfig, field_manager=manager)


def test_a16_taint_added_during_removal_survives(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_labels: dict[str, str],
    unique_name: str,
) -> None:
    ns = a01_network(netns)
    name = make_node()["metadata"]["name"]
    set_taints(kube, name, [UNINITIALIZED, NOT_READY])
    autoscaler = other_writer(control_plane, "cluster-autoscaler")
    added = {"key": names.AUTOSCALER_TAINT, "value": "1", "effect": "NoSchedule"}

    def add_autoscaler_taint(request: Request) -> None:
        ops = [{"op": "add", "path": "/spec/taints/-", "value": added}]
        autoscaler.patch(r.NODES, name, ops, patch_type="json")

    hook = RaceWebhook(
        kube,
        track,
        test_labels,
        name=unique_name,
        match=lambda q: is_agent_patch(q, ""),
        action=add_autoscaler_taint,
    )
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    agent = InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name)
    with autoscaler, hook.start(probe_node=name), agent:
        node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
    assert hook.fired.is_set()
    assert hook.errors == []
    assert taint_keys(node) == [names.NOT_READY_TAINT, names.AUTOSCALER_TAINT], node["spec"]


def test_a17_index_shift_during_removal_is_detected_and_retried(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_labels: dict[str, str],
    unique_name: str,
) -> None:
    ns = a01_network(netns)
    name = make_node()["metadata"]["name"]
    example = {"key": "example.com/a", "effect": "NoSchedule"}
    set_taints(kube, name, [example, UNINITIALIZED])
    remover = other_writer(control_plane, "example-controller")

    def remove_example_taint(request: Request) -> None:
        ops = [
            {"op": "test", "path": "/spec/taints/0/key", "value": "example.com/a"},
            {"op": "remove", "path": "/spec/taints/0"},
        ]
        remover.patch(r.NODES, name, ops, patch_type="json")

    hook = RaceWebhook(
        kube,
        track,
        test_labels,
        name=unique_name,
        match=lambda q: is_agent_patch(q, ""),
        action=remove_example_taint,
    )
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    agent = InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name)
    with remover, hook.start(probe_node=name), agent as run:
        assert run.agent is not None
        node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
        # The apiserver applies the PATCH before the agent reads the answer and counts it.
        success = {"kind": "taint", "result": "success"}
        running = run.agent
        successes = eventually(
            lambda: metric(running, WRITES, success), timeout=5, message="counted"
        )
        conflicts = metric(running, WRITES, {"kind": "taint", "result": "conflict"})
    assert hook.fired.is_set()
    assert hook.errors == []
    assert taint_keys(node) == [], node["spec"]
    # The first PATCH failed its index test (422), the agent re-read and removed index 0.
    assert len(hook.agent_requests("")) == 2, hook.agent_requests("")
    assert (conflicts, successes) == (1, 1)


def test_a18_status_conflict_is_retried_and_keeps_the_kubelet_change(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_labels: dict[str, str],
    unique_name: str,
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    kubelet = other_writer(control_plane, "kubelet")
    message = "kubelet is posting ready status (written during the agent's PATCH)"

    def touch_ready_condition(request: Request) -> None:
        node = kubelet.get(r.NODES, name)
        i = [c["type"] for c in node["status"]["conditions"]].index("Ready")
        ops = [
            {"op": "test", "path": f"/status/conditions/{i}/type", "value": "Ready"},
            {"op": "replace", "path": f"/status/conditions/{i}/message", "value": message},
        ]
        kubelet.patch(r.NODES, name, ops, patch_type="json", subresource="status")

    hook = RaceWebhook(
        kube,
        track,
        test_labels,
        name=unique_name,
        match=lambda q: is_agent_patch(q, "status"),
        action=touch_ready_condition,
    )
    argv = [f"--node-name={name}", *A01_ARGS, *FAST, *QUIET_HTTP]
    agent = InProcessAgent(options(argv, control_plane.admin_kubeconfig), netns=ns.name)
    with kubelet, hook.start(probe_node=name), agent as run:
        assert run.agent is not None
        node = eventually(lambda: initialised(kube, name), timeout=10, message="untainted")
        conflicts = metric(run.agent, WRITES, {"kind": "addresses", "result": "conflict"})
    assert hook.fired.is_set()
    assert hook.errors == []
    statuses = hook.agent_requests("status")
    assert len(statuses) == 2, statuses  # the failed (resourceVersion test) and the retry
    assert statuses[1][0] - statuses[0][0] <= 1.0, statuses
    assert pairs(node) == A01_ADDRESSES, node
    ready: dict[str, Any] = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["message"] == message, node["status"]["conditions"]
    assert conflicts == 1
