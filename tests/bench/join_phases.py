"""A join of a real node, as the join benchmark sees it: pure, no I/O.

tests/bench/compare_join.py records every event of a join with the wall-clock time it saw it:
the test's watches on the Node and on the agents' Pods, containerd's task events (``ctr
events``) and the agent's first log line (the CRI log the kubelet keeps). This module turns
those records into the join's timeline and its phases, and builds the objects the benchmark
writes (the DaemonSets' node selectors, both charts' values).

A join: the kubelet registers its Node (with ``--cloud-provider=external``: the
``node.cloudprovider.kubernetes.io/uninitialized`` taint) → the DaemonSet controller creates
the agent's Pod → the scheduler binds it → the kubelet starts the sandbox, then the agent's
container → the agent writes the Node's addresses and removes the taint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from local_ccm.names import UNINITIALIZED_TAINT

Obj = Mapping[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
# A hostname no Node has: the DaemonSet that selects it has no Pod anywhere.
NOWHERE = "join-bench-no-node"


@dataclass(frozen=True)
class Seen:
    """One watch event and the wall-clock time (s since the epoch) the test received it."""

    at: float
    kind: str  # ADDED, MODIFIED, DELETED
    obj: Obj


@dataclass(frozen=True)
class TaskEvent:
    """One line of ``ctr events``: containerd's own time stamp, topic and payload."""

    at: float
    topic: str
    payload: Obj


# ------------------------------------------------------------------ parsing
_CTR_EVENT = re.compile(
    r"^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(\.\d+)? ([+-]\d{4}) \S+ (\S+) (/\S+) (\{.*\})\s*$"
)
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _epoch(date_time: str, fraction: str | None, offset: timedelta) -> float:
    """Seconds since the epoch; the fraction is kept whole (Go prints nanoseconds)."""
    whole = datetime.fromisoformat(date_time).replace(tzinfo=timezone(offset))
    return whole.timestamp() + (float(fraction) if fraction else 0.0)


def parse_rfc3339(text: str) -> float:
    """An RFC 3339 time (``creationTimestamp``, a CRI log line's nanosecond time) as seconds
    since the epoch; ValueError for anything else."""
    found = _RFC3339.match(text)
    if not found:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    zone = found.group(3)
    sign = -1 if zone.startswith("-") else 1
    hours, minutes = (0, 0) if zone == "Z" else (int(zone[1:3]), int(zone[4:6]))
    offset = sign * timedelta(hours=hours, minutes=minutes)
    return _epoch(found.group(1), found.group(2), offset)


def parse_ctr_event(line: str, parse_json: Callable[[str], Any]) -> TaskEvent | None:
    """A ``ctr events`` line (``2026-12-02 14:00:00.123456789 +0000 UTC k8s.io /tasks/start
    {...}``: Go's time.Time, namespace, topic, JSON payload); None for any other line."""
    found = _CTR_EVENT.match(line)
    if not found:
        return None
    date, clock, fraction, zone, _namespace, topic, payload = found.groups()
    sign = -1 if zone.startswith("-") else 1
    offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5]))
    return TaskEvent(_epoch(f"{date}T{clock}", fraction, offset), topic, parse_json(payload))


_KLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d)(\.\d+) ")


def kubelet_saw_pod(log: str, pod: str, *, year: int, utc_offset: float) -> float | None:
    """When the kubelet's log first says ``"SyncLoop ADD" source="api"`` for ``pod`` (of the
    agents' namespace): the kubelet has the Pod from its own watch. klog's time stamps carry
    neither the year nor the zone: the caller gives both (the kubelet's local time is the test
    process's)."""
    wanted = f'"SyncLoop ADD" source="api" pods=["kube-system/{pod}"]'
    for line in log.splitlines():
        if wanted in line and (found := _KLOG.match(line)):
            month, day, clock, fraction = found.groups()
            stamp = f"{year:04d}-{month}-{day}T{clock}"
            return _epoch(stamp, fraction, timedelta(seconds=utc_offset))
    return None


def parse_cri_log_time(line: str) -> float | None:
    """The time stamp of a CRI log line (``<RFC 3339 nano> stderr F <text>``)."""
    stamp = line.split(" ", 1)[0]
    try:
        return parse_rfc3339(stamp)
    except ValueError:
        return None


# ------------------------------------------------------------------ the timeline
def is_tainted(node: Obj) -> bool:
    return any(
        t.get("key") == UNINITIALIZED_TAINT for t in node.get("spec", {}).get("taints") or []
    )


def addresses(node: Obj) -> list[tuple[str, str]]:
    return [(a["type"], a["address"]) for a in node.get("status", {}).get("addresses") or []]


def owner_name(pod: Obj) -> str | None:
    owners = pod.get("metadata", {}).get("ownerReferences") or []
    return next((o.get("name") for o in owners if o.get("kind") == "DaemonSet"), None)


def container_id(pod: Obj) -> str | None:
    """The runtime's id of the Pod's (only) container, once the kubelet reports it."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if found := status.get("containerID"):
            return str(found).partition("://")[2]
    return None


def is_running(pod: Obj) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any("running" in (s.get("state") or {}) for s in statuses)


def _first(events: Iterable[Seen], match: Callable[[Seen], bool]) -> Seen | None:
    return next((e for e in events if match(e)), None)


@dataclass(frozen=True)
class Timeline:
    """The moments of one join, in seconds since the epoch; None: not seen."""

    kubelet_started: float
    registered: float | None = None  # the Node's ADDED event
    creation_timestamp: float | None = None  # the Node's creationTimestamp (whole seconds)
    pod_created: float | None = None  # the agent Pod's ADDED event
    pod_bound: float | None = None  # the first version with spec.nodeName
    kubelet_saw_pod: float | None = None  # the kubelet's "SyncLoop ADD" of the Pod (its log)
    sandbox_started: float | None = None  # containerd: /tasks/start of the Pod's sandbox
    container_started: float | None = None  # containerd: /tasks/start of the agent container
    first_log: float | None = None  # the agent's first log line (CRI time stamp)
    pod_running: float | None = None  # the kubelet reports the container running
    untainted: float | None = None  # the first Node version without the taint
    pod: str | None = None
    container: str | None = None


def timeline(
    *,
    kubelet_started: float,
    nodes: Sequence[Seen],
    pods: Sequence[Seen],
    daemonset: str,
    tasks: Sequence[TaskEvent] = (),
    first_log: float | None = None,
) -> Timeline:
    """The join's moments from what was recorded: the Node's events, the Pods' events (only
    the Pod of ``daemonset`` counts) and containerd's task events. The sandbox is the task
    started last before the agent's container (the Pod has one sandbox and one container)."""
    added = _first(nodes, lambda e: e.kind == "ADDED")
    untainted = _first(nodes, lambda e: e.kind != "DELETED" and not is_tainted(e.obj))
    mine = [e for e in pods if owner_name(e.obj) == daemonset]
    created = _first(mine, lambda e: e.kind == "ADDED")
    bound = _first(mine, lambda e: bool(e.obj.get("spec", {}).get("nodeName")))
    running = _first(mine, lambda e: is_running(e.obj))
    cid = next((c for e in mine if (c := container_id(e.obj))), None)
    starts = [t for t in tasks if t.topic == "/tasks/start"]
    container = next((t for t in starts if t.payload.get("container_id") == cid), None)
    before = [t for t in starts if container and t.at <= container.at and t is not container]
    created_ts = added.obj.get("metadata", {}).get("creationTimestamp") if added else None
    return Timeline(
        kubelet_started=kubelet_started,
        registered=added.at if added else None,
        creation_timestamp=parse_rfc3339(created_ts) if created_ts else None,
        pod_created=created.at if created else None,
        pod_bound=bound.at if bound else None,
        sandbox_started=before[-1].at if before else None,
        container_started=container.at if container else None,
        first_log=first_log,
        pod_running=running.at if running else None,
        untainted=untainted.at if untainted else None,
        pod=created.obj["metadata"]["name"] if created else None,
        container=cid,
    )


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


# The phases of a join: (name, from, to). The first six follow one another from the Node's
# registration to the taint's removal (their sum is the total, registered → untainted); the
# rest are beside them.
PHASES = (
    ("registered_to_pod_created_s", "registered", "pod_created"),
    ("pod_created_to_bound_s", "pod_created", "pod_bound"),
    ("bound_to_kubelet_saw_pod_s", "pod_bound", "kubelet_saw_pod"),
    ("kubelet_saw_pod_to_sandbox_started_s", "kubelet_saw_pod", "sandbox_started"),
    ("sandbox_to_container_started_s", "sandbox_started", "container_started"),
    ("container_started_to_untainted_s", "container_started", "untainted"),
    ("registered_to_untainted_s", "registered", "untainted"),
    ("kubelet_start_to_registered_s", "kubelet_started", "registered"),
    ("container_started_to_first_log_s", "container_started", "first_log"),
    ("creation_timestamp_to_untainted_s", "creation_timestamp", "untainted"),
    ("registered_to_pod_running_reported_s", "registered", "pod_running"),
)


def phases(t: Timeline) -> dict[str, float | None]:
    """Each phase's seconds (None where either end was not seen)."""
    return {name: _since(getattr(t, start), getattr(t, end)) for name, start, end in PHASES}


def metric_values(join: Mapping[str, Any]) -> dict[str, float | None]:
    """The compare metrics of one join (tests/bench/compare_stats.py)."""
    p = join["phases"]
    return {
        "join_register_to_untaint_s": p["registered_to_untainted_s"],
        "join_container_to_untaint_s": p["container_started_to_untainted_s"],
    }


# ------------------------------------------------------------------ what the bench writes
def selector_patch(hostname: str | None) -> dict[str, Any]:
    """A merge patch that points a DaemonSet's Pods at the Node ``hostname`` (None: at no Node;
    its Pod, if any, is deleted gracefully by the DaemonSet controller)."""
    selector = {HOSTNAME_LABEL: hostname or NOWHERE}
    return {"spec": {"template": {"spec": {"nodeSelector": selector}}}}


def selects(daemonset: Obj, hostname: str) -> bool:
    selector = daemonset["spec"]["template"]["spec"].get("nodeSelector") or {}
    return bool(selector.get(HOSTNAME_LABEL) == hostname)


def observed(daemonset: Obj) -> bool:
    """The DaemonSet controller has acted on the DaemonSet's current spec."""
    status = daemonset.get("status") or {}
    return int(status.get("observedGeneration") or 0) >= int(daemonset["metadata"]["generation"])


# The agents' resources, the same for both: the project chart's (no CPU limit). The Go chart
# v0.2.1 ships `limits.cpu: 100m`, under which its start would be throttled by the CFS quota;
# null deletes that key from its defaults (helm's rule for null values).
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}


def our_values(image: tuple[str, str], gateway: str) -> dict[str, Any]:
    """The project chart: the imported image, in-cluster API access (the ``kubernetes``
    Service, as the Go agent has it), the InternalIP by route lookup toward the node's gateway
    and no ExternalIP; the lifecycle controller off. Everything else at the chart's defaults
    (admission policy, metadata labels, Events, probes, ``system-node-critical``)."""
    repository, tag = image
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "ipDetection": {"internalIPTarget": gateway, "externalIPTarget": ""},
        "nodeLifecycleController": {"enabled": False},
        "resources": RESOURCES,
    }


def go_values(image: tuple[str, str], gateway: str) -> dict[str, Any]:
    """The Go original's chart v0.2.1: the imported image, both targets the gateway (so, as
    ours, it writes the InternalIP and no ExternalIP: the same two writes), a ServiceAccount
    name of its own (both charts call theirs ``local-ccm`` in the same namespace), the same
    resources as ours."""
    repository, tag = image
    limits = {"cpu": None, **RESOURCES["limits"]}
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "ipDetection": {"internalIPTarget": gateway, "externalIPTarget": gateway},
        "serviceAccount": {"create": True, "name": "go-local-ccm"},
        "resources": {"requests": RESOURCES["requests"], "limits": limits},
    }


def join_order(joins: int, impls: Sequence[str] = ("ours", "go")) -> list[str]:
    """``joins`` joins of each, interleaved: every join switches the agent, so each one starts
    from the other's DaemonSet being drained (the same state for both)."""
    return [impl for _ in range(joins) for impl in impls]
