"""What to write to the Node: the address status patch, the condition, the taint and
provider-ID patch and the taint gates. The address-fight state machine lives in
``agent.fight`` and is re-exported.

Pure, no I/O, no clock: times are parameters. A planner returns the patch to send or None.
Patches are RFC 6902 JSON Patches, never strategic merge: ``status.addresses`` merges by
``type``, which is not unique, and would collapse dual-stack InternalIPs
(kubernetes/kubernetes#79391).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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
from local_ccm.agent.core.candidates import (
    Detection,
    DetectorKey,
    Failed,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AgentConfig, IPAddress, family_name
from local_ccm.agent.core.fight import (
    FIRST_PAUSE,
    MAX_PAUSE,
    RESOLVE_AFTER,
    REVERT_WINDOW,
    REVERTS_FOR_CONFLICT,
    FightEvent,
    FightState,
    fight_may_write,
    fight_observe,
    fight_record_write,
    fight_tick,
    last_address_writer,
)

__all__ = [  # the address-fight names are re-exported from agent.fight
    "FIRST_PAUSE", "MAX_MESSAGE", "MAX_PAUSE", "NO_INTERNAL_IP", "RESOLVE_AFTER",
    "REVERTS_FOR_CONFLICT", "REVERT_WINDOW", "BlockReason", "Condition", "FightEvent",
    "FightState", "NodeInputs", "Obj", "Operation", "Patch", "ProviderIDAction", "TaintDecision",
    "addresses_match", "advise_no_internal_ip", "decide_taint", "desired_condition",
    "desired_provider_id", "fight_may_write", "fight_observe", "fight_record_write", "fight_tick",
    "has_ip", "is_tainted", "last_address_writer", "no_internal_ip_advice", "node_inputs",
    "owned_annotation", "plan_addresses", "plan_annotation_patch", "plan_status_patch",
    "plan_taint_patch", "pointer", "provider_id_action", "render_provider_id",
]  # fmt: skip

Obj = Mapping[str, Any]
Operation = dict[str, Any]
BlockReason = Literal["no_internal_ip", "provided_node_ip_mismatch", "provider_id_unavailable"]
MAX_MESSAGE = 1024
NO_INTERNAL_IP = (
    "no InternalIP: set --internal-ip-target or --internal-ip-cidrs, "
    "or start the kubelet with --node-ip"
)


@dataclass(frozen=True)
class Patch:
    """A JSON Patch for the Node's main resource (``subresource=None``) or ``status``."""

    subresource: Literal["status"] | None
    operations: tuple[Operation, ...]

    content_type = "application/json-patch+json"  # set explicitly: a dict body means SMP

    def body(self) -> list[Operation]:
        return list(self.operations)


def pointer(*parts: str | int) -> str:
    """RFC 6901 JSON Pointer: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _test_rv(node: Obj) -> Operation:
    rv = node["metadata"]["resourceVersion"]
    return {"op": "test", "path": "/metadata/resourceVersion", "value": rv}


# ------------------------------------------------------------------ reading the Node
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
    current = node_addresses((node.get("status") or {}).get("addresses"))
    return NodeInputs(current, provided, owned, (*bad_provided, *bad_owned))


def plan_addresses(
    node: Obj, detected: Mapping[DetectorKey, Detection], config: AgentConfig
) -> AddressPlan:
    """desired_addresses() for this Node, with the annotation-parsing findings first."""
    inputs = node_inputs(node)
    policy = address_policy(config, inputs.provided)
    plan = desired_addresses(inputs.current, inputs.provided, detected, inputs.owned, policy)
    return replace(plan, findings=(*inputs.findings, *plan.findings))


def no_internal_ip_advice(
    config: AgentConfig, provided: Sequence[IPAddress], findings: Sequence[Finding]
) -> str:
    """What to change when the Node has no InternalIP. Advice to set a flag that is already set
    sends the operator in circles, so the flags in use are named and the fix fits the case."""
    detecting = _internal_detection(config)
    node_ip = ",".join(str(ip) for ip in provided)
    mismatch = next((f for f in findings if f.kind == "provided_mismatch"), None)
    if mismatch is not None:
        wanted, found = mismatch.expected, mismatch.address
        return (
            f"no InternalIP: the kubelet's --node-ip is {wanted}, but {detecting or 'detection'} "
            f"selects {found} on this host; if {wanted} is not an address of this host, correct "
            f"the kubelet's --node-ip; if it is, change {detecting or 'the detection'} to "
            f"select it; or set --provided-node-ip-policy=ignore to use {found}"
        )
    if detecting and provided:
        return (
            f"no InternalIP: {detecting} finds no address and the kubelet's --node-ip {node_ip} "
            f"is not among the Node's addresses; change {detecting}"
        )
    if detecting:
        fix = "change it, or start the kubelet with --node-ip"
        return f"no InternalIP: {detecting} finds no address; {fix}"
    if provided:
        return (
            f"no InternalIP: the kubelet's --node-ip is {node_ip} but the Node has no InternalIP "
            "entry; set --internal-ip-target or --internal-ip-cidrs to select it"
        )
    return NO_INTERNAL_IP


def _internal_detection(config: AgentConfig) -> str:
    """The InternalIP detection flags as set, e.g. ``--internal-ip-target=192.0.2.1``."""
    internal = config.internal
    flags = []
    if internal.targets:
        flags.append("--internal-ip-target=" + ",".join(str(t) for t in internal.targets))
    if internal.include:
        cidrs = [*(str(n) for n in internal.include), *(f"!{n}" for n in internal.exclude)]
        flags.append("--internal-ip-cidrs=" + ",".join(cidrs))
    return " ".join(flags)


def advise_no_internal_ip(node: Obj, plan: AddressPlan, config: AgentConfig) -> str:
    """:func:`no_internal_ip_advice` for this Node and its plan."""
    return no_internal_ip_advice(config, node_inputs(node).provided, plan.findings)


def owned_annotation(node: Obj) -> str | None:
    annotations = node.get("metadata", {}).get("annotations") or {}
    value = annotations.get(names.OWNED_ADDRESSES_ANNOTATION)
    return None if value is None else str(value)


def addresses_match(node: Obj, plan: AddressPlan) -> bool:
    """Ordered (type, address) pairs, and the ownership record."""
    current = node_addresses((node.get("status") or {}).get("addresses"))
    return current == plan.addresses and owned_annotation(node) == plan.annotation


# ------------------------------------------------------------------ condition
@dataclass(frozen=True)
class Condition:
    status: Literal["True", "False"]
    reason: str
    message: str


_FAILURE_REASONS = {
    "no_route": "NoRoute",
    "no_eligible_address": "NoEligibleAddress",
    "netlink_error": "NetlinkError",
}
_PROVIDED_REASONS = {
    "provided_mismatch": "ProvidedNodeIPMismatch",
    "unparsable_provided": "ProvidedNodeIPUnparsable",
}
_REASON_ORDER = (
    "KubeletOwnsAddresses", "NoInternalIP", "ProvidedNodeIPMismatch",
    "ProvidedNodeIPUnparsable", "ProviderIDUnavailable", "NoRoute", "NoEligibleAddress",
    "NetlinkError",
)  # fmt: skip


def desired_condition(
    plan: AddressPlan,
    detected: Mapping[DetectorKey, Detection],
    *,
    blocked: Sequence[BlockReason] = (),
    conflict_manager: str | None = None,
    no_internal_ip: str = NO_INTERNAL_IP,
) -> Condition:
    """Highest-priority reason; the message lists every problem in that order (deterministic).

    ``blocked`` names the gates that hold the taint now. ``NoInternalIP`` means gate 3
    holds it, or the list has no IP at all (a gate-3 failure under any setting); a Node
    initialised with an ExternalIP only is not a problem here, the loop warns about it.
    """
    problems: list[tuple[str, str]] = []
    if conflict_manager is not None:
        why = f"status.addresses keeps being reverted by {conflict_manager}"
        fix = "start the kubelet with --cloud-provider=external"
        problems.append(("KubeletOwnsAddresses", f"{why}; {fix}"))
    if "no_internal_ip" in blocked or not has_ip(plan.addresses):
        problems.append(("NoInternalIP", no_internal_ip))
    for f in plan.findings:
        if f.kind in _PROVIDED_REASONS:
            problems.append((_PROVIDED_REASONS[f.kind], f.message))
    if "provider_id_unavailable" in blocked:
        problems.append(("ProviderIDUnavailable", "provider ID template has an empty value"))
    kept = {(f.type, f.family): f.address for f in plan.findings if f.kind == "kept_last_good"}
    for (kind, family), d in sorted(detected.items()):
        if isinstance(d, Failed):
            keeping = f"; keeping {kept[(kind, family)]}" if (kind, family) in kept else ""
            detail = f"{kind} {family_name(family)}: {d.detail or d.reason}{keeping}"
            problems.append((_FAILURE_REASONS[d.reason], detail))
    if not problems:
        return Condition("True", "AddressesSynced", "every enabled detector found an address")
    problems.sort(key=lambda p: _REASON_ORDER.index(p[0]))
    message = "; ".join(m for _, m in problems)
    return Condition("False", problems[0][0], message[:MAX_MESSAGE])


def has_ip(addresses: Sequence[NodeAddress], *, internal_only: bool = False) -> bool:
    """Gate 3's test: an InternalIP, or (by default) an InternalIP or ExternalIP."""
    wanted = {INTERNAL} if internal_only else {INTERNAL, EXTERNAL}
    return any(a.type in wanted for a in addresses)


def _condition_operations(node: Obj, condition: Condition | None, now: str) -> list[Operation]:
    """Replace ours by index with a type test; add it; or (reporting off) remove it once."""
    conditions = (node.get("status") or {}).get("conditions")
    index = next(
        (
            i
            for i, c in enumerate(conditions or ())
            if c.get("type") == names.ADDRESSES_SYNCED_CONDITION
        ),
        None,
    )
    path = pointer("status", "conditions", index) if index is not None else ""
    test = {"op": "test", "path": path + "/type", "value": names.ADDRESSES_SYNCED_CONDITION}
    if condition is None:
        return [] if index is None else [test, {"op": "remove", "path": path}]
    old = conditions[index] if conditions is not None and index is not None else None
    if old is not None and _same_condition(old, condition):
        return []
    body = {
        "type": names.ADDRESSES_SYNCED_CONDITION,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": _transition_time(old, condition, now),
    }
    if old is not None:
        return [test, {"op": "replace", "path": path, "value": body}]
    if conditions is None:
        return [{"op": "add", "path": "/status/conditions", "value": [body]}]
    return [{"op": "add", "path": "/status/conditions/-", "value": body}]


def _same_condition(old: Obj, new: Condition) -> bool:
    return (old.get("status"), old.get("reason"), old.get("message")) == (
        new.status,
        new.reason,
        new.message,
    )


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
    current = node_addresses((node.get("status") or {}).get("addresses"))
    differs = not addresses_match(node, plan) if with_annotation else current != plan.addresses
    if write_addresses and differs:
        addresses = [a.to_api() for a in plan.addresses]
        ops.append({"op": "add", "path": "/status/addresses", "value": addresses})
        if with_annotation:
            ops.append(_annotation_operation(node, plan.annotation))
    ops += _condition_operations(node, condition, now)
    return Patch("status", (_test_rv(node), *ops)) if ops else None


def plan_annotation_patch(node: Obj, plan: AddressPlan) -> Patch | None:
    """The ownership annotation alone, on the main resource, guarded by the resourceVersion;
    None when it is already stored (the fallback for an apiserver that drops metadata changes
    on a status write)."""
    if owned_annotation(node) == plan.annotation:
        return None
    return Patch(None, (_test_rv(node), _annotation_operation(node, plan.annotation)))


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
        ops += [_test_rv(node), {"op": "add", "path": "/spec/providerID", "value": provider_id}]
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


_PLACEHOLDERS = ("{node_name}", "{system_uuid}", "{machine_id}")


def render_provider_id(template: str, node: Obj) -> str | None:
    """Fill placeholders from the Node; None when a used placeholder is empty."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    values = {
        "{node_name}": str(node.get("metadata", {}).get("name") or ""),
        "{system_uuid}": str(info.get("systemUUID") or "").lower(),
        "{machine_id}": str(info.get("machineID") or ""),
    }
    result = template
    for placeholder in _PLACEHOLDERS:
        if placeholder in result:
            if not values[placeholder]:
                return None
            result = result.replace(placeholder, values[placeholder])
    return result


@dataclass(frozen=True)
class ProviderIDAction:
    kind: Literal["none", "set", "mismatch", "unavailable"]
    value: str | None = None  # the value to set, or the configured value on a mismatch
    existing: str | None = None


def provider_id_action(node: Obj, desired: str | None, *, configured: bool) -> ProviderIDAction:
    """Set-once (kubernetes/kubernetes#51761): write only when empty, report a mismatch.

    ``desired`` is the rendered value (None: a placeholder was empty, or Azure is not
    available); ``configured`` says whether any provider-ID source is set at all.
    """
    existing = (node.get("spec") or {}).get("providerID") or None
    if not configured:
        return ProviderIDAction("none", existing=existing)
    if existing is not None:
        kind: Literal["none", "mismatch"] = "none" if desired in (None, existing) else "mismatch"
        return ProviderIDAction(kind, desired, existing)
    return ProviderIDAction("set", desired) if desired else ProviderIDAction("unavailable")


def desired_provider_id(node: Obj, *, template: str, fetched: str | None) -> ProviderIDAction:
    """The action for a --provider-id ``template``, else a value ``fetched`` from instance
    metadata (Azure; None: not Azure, nothing configured or given up: never blocks)."""
    if template:
        return provider_id_action(node, render_provider_id(template, node), configured=True)
    return provider_id_action(node, fetched, configured=fetched is not None)


# ------------------------------------------------------------------ gates
@dataclass(frozen=True)
class TaintDecision:
    remove: bool
    blocked: tuple[BlockReason, ...] = ()  # reported while the taint is held
    waiting_for_addresses: bool = False  # gate 2: the status write has not landed


def decide_taint(
    config: AgentConfig,
    *,
    tainted: bool,
    addresses_synced: bool,
    plan: AddressPlan,
    provider_id_blocks: bool = False,
) -> TaintDecision:
    """The five gates of taint removal: enabled and tainted, addresses synced, an IP, no strict
    --node-ip mismatch, the provider ID. Addresses are written before the taint goes, unlike the
    upstream cloud node controller, which leaves a schedulable Node without addresses for a
    while (kubernetes/kubernetes#120720). ``provider_id_blocks``: a configured template has an
    empty placeholder (Azure's "not Azure" never blocks)."""
    if not (config.remove_taint and tainted):
        return TaintDecision(False)
    blocked: list[BlockReason] = []
    if not has_ip(plan.addresses, internal_only=config.require_internal_ip):
        blocked.append("no_internal_ip")
    mismatch = any(f.kind == "provided_mismatch" for f in plan.findings)
    if config.provided_node_ip_policy == "strict" and mismatch:
        blocked.append("provided_node_ip_mismatch")
    if provider_id_blocks:
        blocked.append("provider_id_unavailable")
    remove = addresses_synced and not blocked
    return TaintDecision(remove, tuple(blocked), waiting_for_addresses=not addresses_synced)
