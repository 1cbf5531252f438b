"""Events of node-ipam-controller: reasons, subjects and messages.

Pure, no I/O. Bodies and sending are ``local_ccm.runtime``'s: the loop queues what these
return and a sender task posts them, so an Event never delays an allocation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from local_ccm import names
from local_ccm.ipam.core.allocator import Waiting
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.runtime.events import EventSpec, Subject

# Node
CIDR_NOT_AVAILABLE: Final = "CIDRNotAvailable"
CIDR_ASSIGNMENT_FAILED: Final = "CIDRAssignmentFailed"
CIDR_BY_OTHER_ALLOCATOR: Final = "CIDRAssignedByOtherAllocator"
CIDR_CONFLICT: Final = "CIDRConflict"
CIDR_NOT_IN_ANY_POOL: Final = "CIDRNotInAnyPool"
INVALID_POD_CIDR: Final = "InvalidPodCIDR"
CLUSTER_CIDR_REMOVED: Final = "ClusterCIDRRemoved"
# ClusterCIDR
INVALID_CLUSTER_CIDR: Final = "InvalidClusterCIDR"
SPEC_CHANGED: Final = "SpecChanged"
SELECTOR_SEMANTICS_DIFFER: Final = "SelectorSemanticsDiffer"
CLUSTER_CIDR_EXHAUSTED: Final = "ClusterCIDRExhausted"
WAITING_FOR_NODES: Final = "WaitingForNodes"

CLUSTER_CIDR_API_VERSION: Final = "networking.x-k8s.io/v1"
EVENT_QUEUE: Final = 1000  # Events queued beyond this are dropped and counted


def pool(name: str, uid: str) -> Subject:
    return Subject("ClusterCIDR", name, uid, CLUSTER_CIDR_API_VERSION)


def _cidrs(cidrs: Iterable[IPNetwork]) -> str:
    return ",".join(str(c) for c in cidrs)


def not_available(waiting: Waiting) -> EventSpec:
    """The reason and the pools considered."""
    if waiting.reason == "NoMatchingClusterCIDR":
        text = "no ClusterCIDR matches the Node and no default pool is configured"
    else:
        full = ", ".join(f"{name} (IPv{version})" for name, version in waiting.exhausted)
        text = f"every matching ClusterCIDR is exhausted: {full}"
    return EventSpec("Normal", CIDR_NOT_AVAILABLE, f"{waiting.reason}: {text}")


def assignment_failed(attempts: int, error: str) -> EventSpec:
    text = f"writing podCIDRs failed {attempts} times in a row: {error}"
    return EventSpec("Normal", CIDR_ASSIGNMENT_FAILED, text)


def other_allocator(managers: Sequence[str], cidrs: Sequence[IPNetwork]) -> EventSpec:
    who = ", ".join(managers) or "an unknown writer"
    text = (
        f"spec.podCIDRs {_cidrs(cidrs)} were set by {who}, not by {names.IPAM}; run "
        "kube-controller-manager with --allocate-node-cidrs=false"
    )
    return EventSpec("Warning", CIDR_BY_OTHER_ALLOCATOR, text)


def conflict(others: Sequence[str]) -> EventSpec:
    text = f"podCIDRs overlap those of Node(s) {', '.join(others)}; no Node is changed"
    return EventSpec("Warning", CIDR_CONFLICT, text)


def not_in_any_pool(cidrs: Sequence[IPNetwork]) -> EventSpec:
    text = f"{_cidrs(cidrs)} is in no ClusterCIDR; kept reserved"
    return EventSpec("Normal", CIDR_NOT_IN_ANY_POOL, text)


def invalid_pod_cidr(texts: Sequence[str]) -> EventSpec:
    text = f"spec.podCIDRs has unparsable entries {', '.join(texts)}; the Node is left alone"
    return EventSpec("Warning", INVALID_POD_CIDR, text)


def pool_removed(pool_name: str) -> EventSpec:
    text = f"ClusterCIDR {pool_name} vanished; the Node's CIDRs stay reserved as unowned"
    return EventSpec("Warning", CLUSTER_CIDR_REMOVED, text)


def invalid_pool(reason: str) -> EventSpec:
    return EventSpec("Warning", INVALID_CLUSTER_CIDR, reason)


def spec_changed() -> EventSpec:
    text = "the spec was changed after creation; the pool keeps its CIDRs but allocates no more"
    return EventSpec("Warning", SPEC_CHANGED, text)


def semantics_differ() -> EventSpec:
    text = (
        "nodeSelectorTerms are OR-ed (core NodeSelector semantics); upstream AND-ed them, so "
        "this pool selects different Nodes than it did there"
    )
    return EventSpec("Warning", SELECTOR_SEMANTICS_DIFFER, text)


def exhausted(versions: Sequence[int]) -> EventSpec:
    families = ", ".join(f"IPv{v}" for v in versions)
    return EventSpec("Warning", CLUSTER_CIDR_EXHAUSTED, f"no free block in {families}")


def waiting_for_nodes(nodes: int) -> EventSpec:
    text = f"terminating: waiting for {nodes} Node(s) holding its CIDRs to be deleted"
    return EventSpec("Normal", WAITING_FOR_NODES, text)
