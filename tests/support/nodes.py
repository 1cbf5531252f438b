"""Bodies for Nodes without a kubelet. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

UNINITIALIZED_TAINT = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
PROVIDED_NODE_IP = "alpha.kubernetes.io/provided-node-ip"
NODE_LEASE_NAMESPACE = "kube-node-lease"


def rfc3339(t: datetime) -> str:
    """Kubernetes' metav1.Time form: UTC, whole seconds, Z suffix."""
    utc = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)  # naive means UTC
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: datetime) -> str:
    """metav1.MicroTime form, as Lease.spec.renewTime uses."""
    utc = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_body(
    name: str,
    labels: Mapping[str, str],
    *,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    uninitialized: bool = False,
    provided_node_ip: str | None = None,
    provider_id: str | None = None,
) -> dict[str, Any]:
    """Step 1: what a kubelet with --cloud-provider=external registers."""
    notes = dict(annotations or {})
    if provided_node_ip is not None:
        notes[PROVIDED_NODE_IP] = provided_node_ip
    all_taints = [dict(t) for t in taints]
    if uninitialized:
        all_taints.append(dict(UNINITIALIZED_TAINT))
    spec: dict[str, Any] = {}
    if all_taints:
        spec["taints"] = all_taints
    if provider_id is not None:
        spec["providerID"] = provider_id  # set-once: only when the test needs it
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if notes:
        meta["annotations"] = notes
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}


def ready_condition(
    status: str, since: datetime, heartbeat: datetime, reason: str | None = None
) -> dict[str, str]:
    reasons = {"True": "KubeletReady", "False": "KubeletNotReady", "Unknown": "NodeStatusUnknown"}
    if status not in reasons:
        raise ValueError(f"Ready must be True, False or Unknown, not {status!r}")
    return {
        "type": "Ready",
        "status": status,
        "reason": reason or reasons[status],
        "message": f"set by the local-ccm test harness ({status})",
        "lastTransitionTime": rfc3339(since),
        "lastHeartbeatTime": rfc3339(heartbeat),
    }


def status_patch(
    *,
    conditions: Sequence[Mapping[str, Any]] | None = None,
    addresses: Sequence[Mapping[str, str]] | None = None,
    node_info: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Step 2: a JSON merge patch for nodes/<name>/status, or None if there is nothing to set.

    Merge patch replaces lists whole, so `addresses` always travels as the full list: the
    strategic-merge key (type) would collapse a dual-stack node's two InternalIPs.
    """
    status: dict[str, Any] = {}
    if conditions is not None:
        status["conditions"] = [dict(c) for c in conditions]
    if addresses is not None:
        status["addresses"] = [dict(a) for a in addresses]
    if node_info is not None:
        status["nodeInfo"] = dict(node_info)
    return {"status": status} if status else None


def lease_body(
    node: str,
    labels: Mapping[str, str],
    *,
    renew_time: datetime,
    duration_seconds: int = 40,
) -> dict[str, Any]:
    """The node's heartbeat Lease in kube-node-lease, with a chosen renewTime."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE, "labels": dict(labels)},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": rfc3339_micro(renew_time),
        },
    }
