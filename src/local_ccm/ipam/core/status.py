"""What node-ipam-controller writes: the Node patch, a pool's readiness and finalizer, and
ClusterCIDR status.

Pure, no I/O: objects and times are parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from local_ccm import names
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.ledger import PoolUsage
from local_ccm.ipam.core.model import FINALIZER, ClusterCIDR, InvalidClusterCIDR, NodeView

Obj = dict[str, Any]
CC = ClusterCIDR | InvalidClusterCIDR
ReadyReason = Literal["Ready", "Invalid", "Terminating", "SpecChanged", "FinalizerPending"]
FinalizerAction = Literal["add", "remove"]


def pool_readiness(cc: CC) -> tuple[ReadyReason, str]:
    """The `Ready` condition's reason and message; only "Ready" allocates."""
    if isinstance(cc, InvalidClusterCIDR):
        return "Invalid", cc.reason
    if cc.deleting:
        return "Terminating", "the ClusterCIDR is being deleted"
    if cc.frozen:
        return "SpecChanged", "the spec was changed after creation; create a new ClusterCIDR"
    if not cc.has_finalizer:
        return "FinalizerPending", "waiting for the finalizer to be persisted"
    return "Ready", "used for new allocations"


def plan_finalizer(cc: CC, owned: int) -> FinalizerAction | None:
    """Add ours to a valid live pool; remove it once a terminating pool owns no CIDR.

    Invalid pools never get it, and lose ours on deletion.
    """
    invalid = isinstance(cc, InvalidClusterCIDR)
    if cc.deleting:
        return "remove" if cc.has_finalizer and (owned == 0 or invalid) else None
    return None if invalid or cc.has_finalizer else "add"


def node_patch(uid: str, cidrs: tuple[IPNetwork, ...]) -> list[Obj]:
    """Guarded by the uid seen; IPv4 first (the Allocator orders families)."""
    texts = [str(c) for c in cidrs]
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "add", "path": "/spec/podCIDR", "value": texts[0]},
        {"op": "add", "path": "/spec/podCIDRs", "value": texts},
    ]


def add_finalizer_patch(cc: CC) -> list[Obj]:
    """Guarded by the resourceVersion the decision was made on."""
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": cc.resource_version}
    if not cc.finalizers:
        return [test, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    return [test, {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]


def remove_finalizer_patch(cc: CC) -> list[Obj]:
    """`test` on the entry, then `remove`."""
    path = f"/metadata/finalizers/{cc.finalizers.index(FINALIZER)}"
    return [{"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]


def _condition(kind: str, status: bool, reason: str, message: str, generation: int) -> Obj:
    value = "True" if status else "False"
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def desired_status(cc: CC, usage: PoolUsage | None) -> Obj:
    """The pool's status without `lastTransitionTime` (kept or stamped by
    `with_transition_times`)."""
    reason, message = pool_readiness(cc)
    conditions = [_condition("Ready", reason == "Ready", reason, message, cc.generation)]
    status: Obj = {"observedGeneration": cc.generation, "nodes": usage.nodes if usage else 0}
    if usage is not None:
        for fam in usage.families:
            status[f"ipv{fam.network.version}"] = {
                "blockPrefixLength": fam.block_prefix,
                "capacity": fam.capacity,
                "allocated": fam.allocated,
                "unavailable": fam.unavailable,
                "free": fam.free,
            }
        full = usage.exhausted_versions
        text = "no free block in " + ", ".join(f"IPv{v}" for v in full) if full else "free blocks"
        why = "NoFreeBlocks" if full else "FreeBlocksAvailable"
        conditions.append(_condition("Exhausted", bool(full), why, text, cc.generation))
    status["conditions"] = conditions
    return status


def with_transition_times(desired: Obj, current: Mapping[str, Any] | None, now: str) -> Obj:
    """Keep `lastTransitionTime` of conditions whose status did not change."""
    before = {c.get("type"): c for c in (current or {}).get("conditions") or []}
    conditions = []
    for cond in desired["conditions"]:
        old = before.get(cond["type"])
        same = old is not None and old.get("status") == cond["status"]
        stamp = old.get("lastTransitionTime") if same and old else now
        conditions.append({**cond, "lastTransitionTime": stamp or now})
    return {**desired, "conditions": conditions}


def status_differs(desired: Obj, current: Mapping[str, Any] | None) -> bool:
    """Compare ignoring `lastTransitionTime`, so an unchanged status is not written."""

    def strip(status: Mapping[str, Any] | None) -> Obj:
        status = dict(status or {})
        conds = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or []
        ]
        return {**status, "conditions": conds}

    return strip(desired) != strip(current)


def foreign_managers(view: NodeView) -> tuple[str, ...]:
    """Field managers other than ours that own the Node's `spec.podCIDRs`."""
    return tuple(m for m in view.pod_cidrs_managers if m != names.IPAM)
