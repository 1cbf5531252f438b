"""Events of node-ipam-controller: reasons, messages and bodies.

Pure, no I/O, no clock: times are parameters. The loop queues what these return and a
sender task posts them, so an Event never delays an allocation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from local_ccm import names
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.plan import Waiting

EventType = Literal["Normal", "Warning"]
Kind = Literal["Node", "ClusterCIDR"]

# Node
CIDR_NOT_AVAILABLE = "CIDRNotAvailable"
CIDR_ASSIGNMENT_FAILED = "CIDRAssignmentFailed"
CIDR_ASSIGNED = "CIDRAssigned"
CIDR_BY_OTHER_ALLOCATOR = "CIDRAssignedByOtherAllocator"
CIDR_CONFLICT = "CIDRConflict"
CIDR_NOT_IN_ANY_POOL = "CIDRNotInAnyPool"
INVALID_POD_CIDR = "InvalidPodCIDR"
CLUSTER_CIDR_REMOVED = "ClusterCIDRRemoved"
# ClusterCIDR
INVALID_CLUSTER_CIDR = "InvalidClusterCIDR"
SPEC_CHANGED = "SpecChanged"
SELECTOR_SEMANTICS_DIFFER = "SelectorSemanticsDiffer"
CLUSTER_CIDR_EXHAUSTED = "ClusterCIDRExhausted"
WAITING_FOR_NODES = "WaitingForNodes"

SAME_EVENT_EVERY = 600.0  # CIDRNotAvailable: once per Node and reason per 10 minutes
MAX_MESSAGE = 1024
CLUSTER_CIDR_API_VERSION = "networking.x-k8s.io/v1"


@dataclass(frozen=True)
class Subject:
    """The object an Event is about."""

    kind: Kind
    name: str
    uid: str


@dataclass(frozen=True)
class EventSpec:
    subject: Subject
    type: EventType
    reason: str
    message: str


def node(name: str, uid: str) -> Subject:
    return Subject("Node", name, uid)


def pool(name: str, uid: str) -> Subject:
    return Subject("ClusterCIDR", name, uid)


def _cidrs(cidrs: Iterable[IPNetwork]) -> str:
    return ",".join(str(c) for c in cidrs)


def assigned(subject: Subject, pool_name: str, cidrs: Sequence[IPNetwork]) -> EventSpec:
    text = f"assigned {_cidrs(cidrs)} from ClusterCIDR {pool_name}"
    return EventSpec(subject, "Normal", CIDR_ASSIGNED, text)


def not_available(subject: Subject, waiting: Waiting) -> EventSpec:
    """The reason and the pools considered."""
    if waiting.reason == "NoMatchingClusterCIDR":
        text = "no ClusterCIDR matches the Node and no default pool is configured"
    else:
        full = ", ".join(f"{name} (IPv{version})" for name, version in waiting.exhausted)
        text = f"every matching ClusterCIDR is exhausted: {full}"
    return EventSpec(subject, "Normal", CIDR_NOT_AVAILABLE, _clip(f"{waiting.reason}: {text}"))


def assignment_failed(subject: Subject, attempts: int, error: str) -> EventSpec:
    text = f"writing podCIDRs failed {attempts} times in a row: {error}"
    return EventSpec(subject, "Normal", CIDR_ASSIGNMENT_FAILED, _clip(text))


def other_allocator(
    subject: Subject, managers: Sequence[str], cidrs: Sequence[IPNetwork]
) -> EventSpec:
    who = ", ".join(managers) or "an unknown writer"
    text = (
        f"spec.podCIDRs {_cidrs(cidrs)} were set by {who}, not by {names.IPAM}; run "
        "kube-controller-manager with --allocate-node-cidrs=false"
    )
    return EventSpec(subject, "Warning", CIDR_BY_OTHER_ALLOCATOR, _clip(text))


def conflict(subject: Subject, others: Sequence[str]) -> EventSpec:
    text = f"podCIDRs overlap those of Node(s) {', '.join(others)}; no Node is changed"
    return EventSpec(subject, "Warning", CIDR_CONFLICT, _clip(text))


def not_in_any_pool(subject: Subject, cidrs: Sequence[IPNetwork]) -> EventSpec:
    text = f"{_cidrs(cidrs)} is in no ClusterCIDR; kept reserved"
    return EventSpec(subject, "Normal", CIDR_NOT_IN_ANY_POOL, text)


def invalid_pod_cidr(subject: Subject, texts: Sequence[str]) -> EventSpec:
    text = f"spec.podCIDRs has unparsable entries {', '.join(texts)}; the Node is left alone"
    return EventSpec(subject, "Warning", INVALID_POD_CIDR, _clip(text))


def pool_removed(subject: Subject, pool_name: str) -> EventSpec:
    text = f"ClusterCIDR {pool_name} vanished; the Node's CIDRs stay reserved as unowned"
    return EventSpec(subject, "Warning", CLUSTER_CIDR_REMOVED, text)


def invalid_pool(subject: Subject, reason: str) -> EventSpec:
    return EventSpec(subject, "Warning", INVALID_CLUSTER_CIDR, _clip(reason))


def spec_changed(subject: Subject) -> EventSpec:
    text = "the spec was changed after creation; the pool keeps its CIDRs but allocates no more"
    return EventSpec(subject, "Warning", SPEC_CHANGED, text)


def semantics_differ(subject: Subject) -> EventSpec:
    text = (
        "nodeSelectorTerms are OR-ed (core NodeSelector semantics); upstream AND-ed them, so "
        "this pool selects different Nodes than it did there"
    )
    return EventSpec(subject, "Warning", SELECTOR_SEMANTICS_DIFFER, text)


def exhausted(subject: Subject, versions: Sequence[int]) -> EventSpec:
    families = ", ".join(f"IPv{v}" for v in versions)
    return EventSpec(subject, "Warning", CLUSTER_CIDR_EXHAUSTED, f"no free block in {families}")


def waiting_for_nodes(subject: Subject, nodes: int) -> EventSpec:
    text = f"terminating: waiting for {nodes} Node(s) holding its CIDRs to be deleted"
    return EventSpec(subject, "Normal", WAITING_FOR_NODES, text)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def event_body(spec: EventSpec, *, namespace: str, now: datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event in `namespace` about a cluster-scoped object."""
    subject = spec.subject
    api_version = "v1" if subject.kind == "Node" else CLUSTER_CIDR_API_VERSION
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{subject.name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": subject.kind,
            "name": subject.name,
            "uid": subject.uid,
        },
        "type": spec.type,
        "reason": spec.reason,
        "message": spec.message,
        "source": {"component": names.IPAM},
        "reportingComponent": names.IPAM,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
