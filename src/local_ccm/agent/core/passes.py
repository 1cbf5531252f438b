"""Small decisions of one pass of the agent: the Node's age, whether a write must settle,
metric labels of a PATCH, what a held taint reports, and run-once's verdict.

Pure, no I/O, no clock: times are parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, get_args

from local_ccm import names
from local_ccm.agent.core import events as ev
from local_ccm.agent.core.addresses import AddressPlan
from local_ccm.agent.core.candidates import Detected, Disabled, Found
from local_ccm.agent.core.config import FAMILIES, AgentConfig, family_name
from local_ccm.agent.core.gates import BlockReason, Gates
from local_ccm.agent.core.plan import Patch, addresses_match, is_tainted, node_inputs
from local_ccm.agent.core.timing import Settle, settle_step
from local_ccm.kube.request import pointer
from local_ccm.names import OWNED_ADDRESSES_ANNOTATION as OWNED_ADDRESSES
from local_ccm.names import OWNED_LABELS_ANNOTATION as OWNED_LABELS
from local_ccm.records import dataclass
from local_ccm.runtime.events import EventSpec

Obj = Mapping[str, Any]
BLOCK_REASONS: tuple[BlockReason, ...] = get_args(BlockReason)


# ------------------------------------------------------------------ the Node
def creation_delay(node: Obj, now: datetime) -> float | None:
    """Seconds since ``metadata.creationTimestamp``, for the NodeInitialized Event and the
    time-to-initialise histogram."""
    created = (node.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return None
    born = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    return max(0.0, (now - born).total_seconds())


# ------------------------------------------------------------------ settle
def is_settle_needed(node: Obj, plan: AddressPlan) -> bool:
    """The plan removes or replaces an owned address already on the (initialised)
    Node. The first write (nothing owned yet, or still tainted) is immediate."""
    inputs = node_inputs(node)
    if is_tainted(node) or not inputs.owned:
        return False
    current, desired = {a.key for a in inputs.current}, {a.key for a in plan.addresses}
    return any(o.key in current and o.key not in desired for o in inputs.owned)


def plan_settle(
    settle: Settle | None, node: Obj, plan: AddressPlan, now: float, settle_time: float
) -> tuple[Settle | None, float]:
    """:func:`~local_ccm.agent.core.timing.settle_step` when the plan needs to settle."""
    if not is_settle_needed(node, plan):
        return None, 0.0
    return settle_step(settle, plan.owned, now, settle_time)


# ------------------------------------------------------------------ metrics
_ADDRESSES_RECORD = pointer("metadata", "annotations", OWNED_ADDRESSES)
_LABELS_RECORD = pointer("metadata", "annotations", OWNED_LABELS)
_PATCH_KINDS = (  # metric label, the paths its operations start with
    ("addresses", ("/status/addresses", _ADDRESSES_RECORD)),
    ("labels", ("/metadata/labels", _LABELS_RECORD)),
    ("condition", ("/status/conditions",)),
    ("taint", ("/spec/taints",)),
    ("provider_id", ("/spec/providerID",)),
)


def _paths(op: Any) -> list[str]:
    """The paths an operation writes; adding the whole annotation map writes each key."""
    path, value = str(op["path"]), op.get("value")
    if path == "/metadata/annotations" and isinstance(value, dict):
        return [pointer("metadata", "annotations", key) for key in value]
    return [path]


def patch_kinds(patch: Patch) -> list[str]:
    """Metric ``kind`` labels for one PATCH; an ownership annotation counts as what it owns."""
    paths = [p for op in patch.operations if op["op"] != "test" for p in _paths(op)]
    return [kind for kind, starts in _PATCH_KINDS if any(p.startswith(starts) for p in paths)]


# ------------------------------------------------------------------ reporting gates
@dataclass(frozen=True)
class GateReport:
    """Gauge values and Events for one pass's taint decision."""

    blocked: Mapping[str, int]  # local_ccm_agent_initialization_blocked{reason}
    mismatch: Mapping[str, int]  # local_ccm_agent_provided_node_ip_mismatch{family}
    events: tuple[EventSpec, ...]


def gate_report(node: Obj, plan: AddressPlan, gates: Gates) -> GateReport:
    """Never block silently: every held gate, mismatch and provider-ID conflict is reported,
    a missing InternalIP with the remedy that fits this Node."""
    blocked, provider = gates.taint.blocked, gates.provider
    held = set(blocked) if is_tainted(node) else set()
    mismatched = {f.family for f in plan.findings if f.kind == "provided_mismatch"}
    events = [
        *ev.initialization_blocked(blocked if held else (), no_internal_ip=gates.advice),
        *ev.provided_mismatches(plan.findings),
    ]
    if provider.kind == "mismatch" and provider.existing:
        events.append(ev.provider_id_mismatch(provider.existing, provider.value))
    return GateReport(
        blocked={r: int(r in held) for r in BLOCK_REASONS},
        mismatch={family_name(f): int(f in mismatched) for f in FAMILIES},
        events=tuple(events),
    )


# ------------------------------------------------------------------ run-once
def unmet_run_once(
    node: Obj, plan: AddressPlan, detected: Detected, config: AgentConfig, provider_id: str
) -> list[str]:
    """The reasons run-once did not reach the final state (empty = exit 0); ``provider_id``
    is the configured template or the fetched value ("" = none)."""
    unmet = []
    if not addresses_match(node, plan):
        unmet.append("status.addresses differ from the desired list")
    for (kind, family), d in sorted(detected.items()):
        if not isinstance(d, Found | Disabled):
            unmet.append(f"{kind} {family_name(family)} detection failed: {d.reason} {d.detail}")
    if config.remove_taint and is_tainted(node):
        unmet.append(f"taint {names.UNINITIALIZED_TAINT} is still present")
    if provider_id and not (node.get("spec") or {}).get("providerID"):
        unmet.append("spec.providerID is not set")
    return unmet
