"""Objects tests create, and their removal.

Nothing here deletes an object that does not carry the current run's label.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError, NotFound
from local_ccm.kube.resources import Resource
from tests.support import names, nodes
from tests.support import resources as r

log = logging.getLogger(__name__)
# Finalizers our controllers put on objects; teardown removes only these.
OWN_FINALIZERS = ("networking.x-k8s.io/cluster-cidr-finalizer",)
# Cluster-scoped kinds the final sweep deletes by run label, most dependent first.
SWEEP = (
    r.VALIDATING_ADMISSION_POLICY_BINDINGS,
    r.VALIDATING_ADMISSION_POLICIES,
    r.CLUSTER_ROLE_BINDINGS,
    r.CLUSTER_ROLES,
    r.CLUSTER_CIDRS,
    r.NODES,
    r.NAMESPACES,
)


def _carries_run(obj: Mapping[str, Any], run_id: str) -> bool:
    return (obj.get("metadata", {}).get("labels") or {}).get(names.RUN_LABEL) == run_id


def remove_own_finalizers(kube: Client, res: Resource, obj: Obj) -> None:
    meta = obj.get("metadata", {})
    current = meta.get("finalizers") or []
    keep = [f for f in current if f not in OWN_FINALIZERS]
    if keep != current:
        patch = {
            "metadata": {"finalizers": keep or None, "resourceVersion": meta["resourceVersion"]}
        }
        kube.patch(res, meta["name"], patch, patch_type="merge", namespace=meta.get("namespace"))


def delete_owned(
    kube: Client, res: Resource, name: str, namespace: str | None, run_id: str
) -> None:
    """Remove our finalizers, then delete, if the object carries this run's label."""
    try:
        obj = kube.get(res, name, namespace=namespace)
        if not _carries_run(obj, run_id):
            log.warning(
                "not deleting %s %s: it lacks %s=%s", res.kind, name, names.RUN_LABEL, run_id
            )
            return
        remove_own_finalizers(kube, res, obj)
        kube.delete(res, name, namespace=namespace, propagation_policy="Background")
    except NotFound:
        pass


class Tracker:
    """`track(res, name, namespace=None)` registers an object; `cleanup()` deletes in reverse."""

    def __init__(self, kube: Client, run_id: str) -> None:
        self._kube = kube
        self._run_id = run_id
        self._items: list[tuple[Resource, str, str | None]] = []

    def __call__(self, res: Resource, name: str, namespace: str | None = None) -> None:
        self._items.append((res, name, namespace))

    def cleanup(self) -> None:
        """Best effort: one failing delete never skips the rest; failures are logged."""
        for res, name, namespace in reversed(self._items):
            try:
                delete_owned(self._kube, res, name, namespace, self._run_id)
            except ApiError as exc:
                log.warning("cleanup of %s %s failed: %s", res.kind, name, exc)
        self._items.clear()


def sweep_run(kube: Client, run_id: str) -> None:
    """Delete whatever still carries this run's label (the end-of-run sweep)."""
    selector = names.run_selector(run_id)
    for res in SWEEP:
        try:
            items = kube.list(res, label_selector=selector).get("items") or []
        except NotFound:
            continue  # e.g. the ClusterCIDR CRD was never installed
        for obj in items:
            meta = obj["metadata"]
            try:
                remove_own_finalizers(kube, res, obj)
                kube.delete(res, meta["name"], propagation_policy="Background")
            except NotFound:
                pass


class NodeFactory:
    """`make_node(...)`: a Node as a kubelet with --cloud-provider=external would make it."""

    def __init__(self, kube: Client, track: Tracker, labels: Mapping[str, str], test: str) -> None:
        self._kube = kube
        self._track = track
        self._labels = dict(labels)
        self._test = test

    def __call__(
        self,
        name: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        uninitialized: bool = False,
        provided_node_ip: str | None = None,
        provider_id: str | None = None,
        ready: str | None = "True",
        ready_since: datetime | None = None,
        heartbeat: datetime | None = None,
        conditions: Sequence[Mapping[str, Any]] | None = None,
        addresses: Sequence[Mapping[str, str]] | None = None,
        node_info: Mapping[str, str] | None = None,
        lease_renew_time: datetime | None = None,
        lease_duration_seconds: int = 40,
    ) -> Obj:
        """Create the Node (step 1), then write its status with a JSON merge patch (step 2).

        `ready_since` is the Ready condition's lastTransitionTime (e.g. now - 10 min);
        `conditions` replaces the generated Ready condition entirely. `lease_renew_time`
        also creates the node's Lease in kube-node-lease.
        """
        name = name or names.unique_name(self._test, secrets.token_hex(3))
        body = nodes.node_body(
            name, {**self._labels, **(labels or {})}, annotations=annotations, taints=taints,
            uninitialized=uninitialized, provided_node_ip=provided_node_ip, provider_id=provider_id,
        )  # fmt: skip
        node = self._kube.create(r.NODES, body)
        self._track(r.NODES, name)
        now = datetime.now(UTC)
        if conditions is None and ready is not None:
            conditions = [nodes.ready_condition(ready, ready_since or now, heartbeat or now)]
        patch = nodes.status_patch(conditions=conditions, addresses=addresses, node_info=node_info)
        if patch is not None:
            node = self._kube.patch(r.NODES, name, patch, patch_type="merge", subresource="status")
        if lease_renew_time is not None:
            lease = nodes.lease_body(
                name,
                self._labels,
                renew_time=lease_renew_time,
                duration_seconds=lease_duration_seconds,
            )
            self._kube.create(r.LEASES, lease, namespace=nodes.NODE_LEASE_NAMESPACE)
            self._track(r.LEASES, name, nodes.NODE_LEASE_NAMESPACE)
        return node
