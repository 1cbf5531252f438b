"""What to write to the Node: the address status patch (with the condition and the ownership
annotation), the annotation alone, and the taint and provider-ID patch. Whether the taint may
go and what the condition says is ``core.gates``.

Pure, no I/O, no clock. Patches are RFC 6902 JSON Patches, never strategic merge:
``status.addresses`` merges by ``type``, which is not unique, and would collapse dual-stack
InternalIPs (kubernetes/kubernetes#79391).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, astuple, replace
from typing import Any, Literal

from local_ccm import names
from local_ccm.agent.core.addresses import (
    AddressPlan,
    Finding,
    NodeAddress,
    address_policy,
    desired_addresses,
    node_addresses,
    parse_owned,
    parse_provided,
)
from local_ccm.agent.core.candidates import Detected
from local_ccm.agent.core.config import AgentConfig, IPAddress
from local_ccm.kube.request import pointer
from local_ccm.names import OWNED_ADDRESSES_ANNOTATION, OWNED_LABELS_ANNOTATION
from local_ccm.records import dataclass

Obj = Mapping[str, Any]
Operation = dict[str, Any]


@dataclass(frozen=True)
class Patch:
    """A JSON Patch for the Node's main resource (``subresource=None``) or ``status``."""

    subresource: Literal["status"] | None
    operations: tuple[Operation, ...]

    content_type = "application/json-patch+json"  # set explicitly: a dict body means SMP

    def body(self) -> list[Operation]:
        return list(self.operations)


_PATCH_KINDS = (  # metric label, the paths its operations start with
    (
        "addresses",
        ("/status/addresses", pointer("metadata", "annotations", OWNED_ADDRESSES_ANNOTATION)),
    ),
    ("labels", ("/metadata/labels", pointer("metadata", "annotations", OWNED_LABELS_ANNOTATION))),
    ("condition", ("/status/conditions",)),
    ("taint", ("/spec/taints",)),
    ("provider_id", ("/spec/providerID",)),
)


def _paths(op: Operation) -> list[str]:
    """The paths an operation writes; adding the whole annotation map writes each key."""
    path, value = str(op["path"]), op.get("value")
    if path == "/metadata/annotations" and isinstance(value, dict):
        return [pointer("metadata", "annotations", key) for key in value]
    return [path]


def patch_kinds(patch: Patch) -> list[str]:
    """Metric ``kind`` labels for one PATCH; an ownership annotation counts as what it owns."""
    paths = [p for op in patch.operations if op["op"] != "test" for p in _paths(op)]
    return [kind for kind, starts in _PATCH_KINDS if any(p.startswith(starts) for p in paths)]


def test_rv(node: Obj) -> Operation:
    rv = node["metadata"]["resourceVersion"]
    return {"op": "test", "path": "/metadata/resourceVersion", "value": rv}


# ------------------------------------------------------------------ reading the Node
def node_rv(node: Obj | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("resourceVersion", ""))


def node_uid(node: Obj | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("uid", ""))


def is_older(rv: str, than: str) -> bool:
    """An event older than the response of our own write (the newest Node is kept)."""
    try:
        return int(rv) < int(than)
    except ValueError:  # resourceVersions are opaque; etcd's are integers
        return False


def current_addresses(node: Obj) -> tuple[NodeAddress, ...]:
    return node_addresses((node.get("status") or {}).get("addresses"))


@dataclass(frozen=True)
class NodeInputs:
    current: tuple[NodeAddress, ...]
    provided: tuple[IPAddress, ...]
    owned: tuple[NodeAddress, ...] | None
    findings: tuple[Finding, ...]


def node_inputs(node: Obj) -> NodeInputs:
    """The inputs of the desired-address function that come from the Node object."""
    annotations = node.get("metadata", {}).get("annotations") or {}
    provided, bad_provided = parse_provided(annotations.get(names.PROVIDED_NODE_IP_ANNOTATION))
    owned, bad_owned = parse_owned(annotations.get(names.OWNED_ADDRESSES_ANNOTATION))
    return NodeInputs(current_addresses(node), provided, owned, (*bad_provided, *bad_owned))


def plan_addresses(node: Obj, detected: Detected, config: AgentConfig) -> AddressPlan:
    """desired_addresses() for this Node, with the annotation-parsing findings first."""
    inputs = node_inputs(node)
    policy = address_policy(config, inputs.provided)
    plan = desired_addresses(inputs.current, inputs.provided, detected, inputs.owned, policy)
    return replace(plan, findings=(*inputs.findings, *plan.findings))


def owned_annotation(node: Obj) -> str | None:
    annotations = node.get("metadata", {}).get("annotations") or {}
    value = annotations.get(names.OWNED_ADDRESSES_ANNOTATION)
    return None if value is None else str(value)


def addresses_match(node: Obj, plan: AddressPlan) -> bool:
    """Ordered (type, address) pairs, and the ownership record."""
    return current_addresses(node) == plan.addresses and owned_annotation(node) == plan.annotation


# ------------------------------------------------------------------ condition
@dataclass(frozen=True)
class Condition:
    status: Literal["True", "False"]
    reason: str
    message: str


def _condition_operations(node: Obj, condition: Condition | None, now: str) -> list[Operation]:
    """Replace ours by index with a type test; add it; or (reporting off) remove it once."""
    ours = names.ADDRESSES_SYNCED_CONDITION
    conditions = (node.get("status") or {}).get("conditions")
    index = next((i for i, c in enumerate(conditions or ()) if c.get("type") == ours), None)
    path = pointer("status", "conditions", index) if index is not None else ""
    test = {"op": "test", "path": path + "/type", "value": ours}
    if condition is None:
        return [] if index is None else [test, {"op": "remove", "path": path}]
    old = conditions[index] if conditions is not None and index is not None else None
    if old is not None and _same_condition(old, condition):
        return []
    body = {
        "type": ours,
        **asdict(condition),
        "lastHeartbeatTime": now,
        "lastTransitionTime": _transition_time(old, condition, now),
    }
    if old is not None:
        return [test, {"op": "replace", "path": path, "value": body}]
    if conditions is None:
        return [{"op": "add", "path": "/status/conditions", "value": [body]}]
    return [{"op": "add", "path": "/status/conditions/-", "value": body}]


def _same_condition(old: Obj, new: Condition) -> bool:
    return (old.get("status"), old.get("reason"), old.get("message")) == astuple(new)


def _transition_time(old: Obj | None, new: Condition, now: str) -> str:
    if old is not None and old.get("status") == new.status and old.get("lastTransitionTime"):
        return str(old["lastTransitionTime"])
    return now


# ------------------------------------------------------------------ status patch
def plan_status_patch(
    node: Obj,
    plan: AddressPlan,
    *,
    condition: Condition | None,
    now: str,
    write_addresses: bool = True,
    with_annotation: bool = True,
) -> Patch | None:
    """The status PATCH, or None when nothing differs.

    ``condition=None`` means --report-condition=false (an existing condition is removed once).
    ``write_addresses=False`` (address-fight pause) leaves ``status.addresses`` as found.
    ``with_annotation=False``: the ownership annotation goes in a main-resource patch first
    (:func:`plan_annotation_patch`), for an apiserver that drops metadata on status.
    ``now`` is the RFC 3339 time for the condition's timestamps.
    """
    ops: list[Operation] = []
    differs = (
        not addresses_match(node, plan)
        if with_annotation
        else current_addresses(node) != plan.addresses
    )
    if write_addresses and differs:
        addresses = [a.to_api() for a in plan.addresses]
        ops.append({"op": "add", "path": "/status/addresses", "value": addresses})
        if with_annotation:
            ops.append(_annotation_operation(node, plan.annotation))
    ops += _condition_operations(node, condition, now)
    return Patch("status", (test_rv(node), *ops)) if ops else None


def plan_annotation_patch(node: Obj, plan: AddressPlan) -> Patch | None:
    """The ownership annotation alone, on the main resource, guarded by the resourceVersion;
    None when it is already stored."""
    if owned_annotation(node) == plan.annotation:
        return None
    return Patch(None, (test_rv(node), _annotation_operation(node, plan.annotation)))


def _annotation_operation(node: Obj, value: str) -> Operation:
    key = names.OWNED_ADDRESSES_ANNOTATION
    if node.get("metadata", {}).get("annotations") is None:
        return {"op": "add", "path": "/metadata/annotations", "value": {key: value}}
    return {"op": "add", "path": pointer("metadata", "annotations", key), "value": value}


# ------------------------------------------------------------------ taint, provider ID
def is_tainted(node: Obj) -> bool:
    return any(t.get("key") == names.UNINITIALIZED_TAINT for t in _taints(node))


def _taints(node: Obj) -> Sequence[Obj]:
    return (node.get("spec") or {}).get("taints") or ()


def plan_taint_patch(
    node: Obj, *, remove_taint: bool, provider_id: str | None = None
) -> Patch | None:
    """Main-resource PATCH: set the provider ID (RV-guarded) and/or remove every uninitialized
    taint by index, each guarded by a test of its key, highest index first.

    Concurrently added taints survive because they are not part of the patch; an index that no
    longer holds our key fails its test (422) and the caller re-reads.
    """
    ops: list[Operation] = []
    if provider_id:
        ops += [test_rv(node), {"op": "add", "path": "/spec/providerID", "value": provider_id}]
    if remove_taint:
        taints = list(enumerate(_taints(node)))
        for i, taint in reversed(taints):
            if taint.get("key") == names.UNINITIALIZED_TAINT:
                path = pointer("spec", "taints", i)
                ops.append(
                    {"op": "test", "path": path + "/key", "value": names.UNINITIALIZED_TAINT}
                )
                ops.append({"op": "remove", "path": path})
    return Patch(None, tuple(ops)) if ops else None
