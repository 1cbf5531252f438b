"""The writes the node-bmc controller sends: the shutdown taint's JSON Patches and the NodeBMC
status body. Pure, no I/O.

A taint patch touches only `node.cloudprovider.kubernetes.io/shutdown:NoSchedule` and is
guarded by a `test` of the resourceVersion it was decided on, as the agent's and the
lifecycle controller's Node patches are: a Node changed meanwhile refuses it (the client
reports a Conflict) and the worker decides again on the newer Node, so a taint someone else
added or removed in between is never overwritten.
"""

from __future__ import annotations

from typing import Any

from local_ccm.bmc.core.decide import TaintAction
from local_ccm.bmc.core.model import SHUTDOWN_EFFECT, NodeView
from local_ccm.kube.request import pointer
from local_ccm.names import SHUTDOWN_TAINT

Operation = dict[str, Any]
SHUTDOWN: dict[str, str] = {"key": SHUTDOWN_TAINT, "effect": SHUTDOWN_EFFECT}


def taint_patch(node: NodeView, action: TaintAction) -> list[Operation]:
    """The JSON Patch that adds or removes the shutdown taint on `node` as the view shows it."""
    guard: Operation = {"op": "test", "path": "/metadata/resourceVersion",
                        "value": node.resource_version}  # fmt: skip
    if action == "add":
        if not node.taints:
            return [guard, {"op": "add", "path": "/spec/taints", "value": [dict(SHUTDOWN)]}]
        return [guard, {"op": "add", "path": "/spec/taints/-", "value": dict(SHUTDOWN)}]
    ops = [guard]
    ours = [i for i, taint in enumerate(node.taints) if taint == (SHUTDOWN_TAINT, SHUTDOWN_EFFECT)]
    for index in reversed(ours):  # highest first: a removal does not shift the ones after it
        path = pointer("spec", "taints", index)
        ops += [{"op": "test", "path": path + "/key", "value": SHUTDOWN_TAINT},
                {"op": "remove", "path": path}]  # fmt: skip
    return ops
