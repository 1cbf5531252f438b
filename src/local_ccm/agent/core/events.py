"""Which Kubernetes Events a pass emits: detector failures and recoveries, writes, address
fights, each on a transition only, and their rate limit (a held taint's Events are
``core.gates``', label conflicts ``core.labels``').

Pure, no I/O. ``local_ccm.runtime`` builds and posts them from a queue: no pass waits on one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm import names
from local_ccm.agent.core.addresses import NodeAddress
from local_ccm.agent.core.candidates import Detection, DetectorKey, Failed, Found
from local_ccm.agent.core.config import AgentConfig, family_name
from local_ccm.runtime.events import EventBudget, EventSpec, Subject, node

ADDRESSES_UPDATED = "AddressesUpdated"
NODE_INITIALIZED = "NodeInitialized"
PROVIDER_ID_SET = "ProviderIDSet"
DETECTION_FAILED = "AddressDetectionFailed"
DETECTION_RECOVERED = "AddressDetectionRecovered"
INITIALIZATION_BLOCKED = "InitializationBlocked"
KUBELET_ADDRESS_CONFLICT = "KubeletAddressConflict"
ADDRESS_CONFLICT_RESOLVED = "AddressConflictResolved"
PROVIDER_ID_MISMATCH = "ProviderIDMismatch"
NODE_UPDATE_REJECTED = "NodeUpdateRejected"
METADATA_LABEL_CONFLICT = "MetadataLabelConflict"
METADATA_RULES_INVALID = "MetadataRulesInvalid"


def budget() -> EventBudget:
    """The same (reason, message) once per 10 min; at most 10 Events per minute in total."""
    return EventBudget(per_minute=10)


def about(obj: Mapping[str, Any]) -> Subject:
    meta = obj.get("metadata") or {}
    return node(str(meta.get("name", "")), str(meta.get("uid", "")))


# ------------------------------------------------------------------ what to emit
def detection_events(
    previous: Mapping[DetectorKey, Detection] | None,
    current: Mapping[DetectorKey, Detection],
    config: AgentConfig,
) -> list[EventSpec]:
    """Transitions only: ok (or unknown, at start-up) -> failed, failed -> found."""
    events = []
    for key, detection in sorted(current.items()):
        before = None if previous is None else previous.get(key)
        if isinstance(detection, Failed) and not isinstance(before, Failed):
            events.append(EventSpec("Warning", DETECTION_FAILED, _failed(key, detection, config)))
        elif isinstance(detection, Found) and isinstance(before, Failed):
            kind, family = key
            text = f"{kind} {family_name(family)}: detected {detection.address} again"
            events.append(EventSpec("Normal", DETECTION_RECOVERED, text))
    return events


def _failed(key: DetectorKey, detection: Failed, config: AgentConfig) -> str:
    kind, family = key
    target = config.settings(kind).target(family)
    via = f" (target {target})" if target is not None else ""
    detail = f": {detection.detail}" if detection.detail else ""
    return f"{kind} {family_name(family)}{via}: {detection.reason}{detail}"


def addresses_updated(old: Sequence[NodeAddress], new: Sequence[NodeAddress]) -> EventSpec | None:
    """``ExternalIP 198.51.100.10 → 198.51.100.20``; None when the list did not change."""
    if tuple(old) == tuple(new):
        return None
    return EventSpec("Normal", ADDRESSES_UPDATED, describe_change(old, new))


def describe_change(old: Sequence[NodeAddress], new: Sequence[NodeAddress]) -> str:
    """Removed and added entries per type, paired as replacements where possible."""
    parts: list[str] = []
    for kind in dict.fromkeys(a.type for a in (*old, *new)):
        removed = [a.address for a in old if a.type == kind and a not in new]
        added = [a.address for a in new if a.type == kind and a not in old]
        for before, after in zip(removed, added, strict=False):
            parts.append(f"{kind} {before} → {after}")
        parts += [f"added {kind} {a}" for a in added[len(removed) :]]
        parts += [f"removed {kind} {a}" for a in removed[len(added) :]]
    if not parts:
        parts.append("reordered: " + ", ".join(f"{a.type} {a.address}" for a in new))
    return "; ".join(parts)


def node_initialized(delay: float | None) -> EventSpec:
    since = f" {delay:.1f}s after creation" if delay is not None else ""
    return EventSpec(
        "Normal", NODE_INITIALIZED, f"removed taint {names.UNINITIALIZED_TAINT}{since}"
    )


def provider_id_set(value: str) -> EventSpec:
    return EventSpec("Normal", PROVIDER_ID_SET, f"set spec.providerID to {value}")


def provider_id_mismatch(existing: str, configured: str | None) -> EventSpec:
    text = f"spec.providerID is {existing}, configured {configured}; not changed (set-once)"
    return EventSpec("Warning", PROVIDER_ID_MISMATCH, text)


def conflict_entered(manager: str | None) -> EventSpec:
    who = manager or "another writer"
    text = (
        f"status.addresses keeps being reverted by {who}; address writes paused. "
        "Start the kubelet with --cloud-provider=external"
    )
    return EventSpec("Warning", KUBELET_ADDRESS_CONFLICT, text)


def conflict_resolved() -> EventSpec:
    return EventSpec("Normal", ADDRESS_CONFLICT_RESOLVED, "address write survived 10 min")


def update_rejected(what: str, message: str) -> EventSpec:
    return EventSpec("Warning", NODE_UPDATE_REJECTED, f"{what} rejected: {message}")


def rules_invalid(problems: Sequence[str]) -> EventSpec:
    text = "; ".join(problems)
    return EventSpec(
        "Warning", METADATA_RULES_INVALID, f"the last good rules stay in force: {text}"
    )
