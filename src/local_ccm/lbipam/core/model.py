"""The slim views the controller keeps of what it watches, and Event subjects. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from local_ccm.lbipam.core.kubevip import KubeVipPools, parse_kubevip
from local_ccm.lbipam.core.pools import InvalidPool, Pool, parse_pool
from local_ccm.lbipam.core.status import NodeNetworks
from local_ccm.lbipam.core.writes import CONDITION
from local_ccm.records import dataclass
from local_ccm.runtime import events as ev

Obj = dict[str, Any]


@dataclass(frozen=True)
class PoolEntry:
    """A pool object as the controller keeps it."""

    parsed: Pool | InvalidPool
    status: Mapping[str, Any]
    uid: str


def project_pool(obj: Obj) -> PoolEntry:
    meta = obj.get("metadata") or {}
    return PoolEntry(parse_pool(obj), obj.get("status") or {}, str(meta.get("uid", "")))


def project_node(obj: Obj) -> NodeNetworks:
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    return NodeNetworks(
        str((obj.get("metadata") or {}).get("name", "")),
        tuple(str(a.get("address")) for a in status.get("addresses") or () if a.get("address")),
        tuple(str(c) for c in spec.get("podCIDRs") or ()),
    )


def project_service(obj: Obj) -> Obj:
    """The Service as written back: all of it but `metadata.managedFields`, which the
    controller never reads and which is most of a Service's size (5 000 Services: ~107 MiB
    kept whole)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def project_labels(obj: Obj) -> Mapping[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def project_kubevip(obj: Obj) -> KubeVipPools:
    """The kube-vip ConfigMap as pools, parsed once per change of the ConfigMap."""
    return parse_kubevip({str(k): str(v) for k, v in (obj.get("data") or {}).items()})


def service_subject(obj: Mapping[str, Any]) -> ev.Subject:
    meta = obj.get("metadata") or {}
    return ev.Subject("Service", str(meta.get("name", "")), str(meta.get("uid", "")), "v1",
                      str(meta.get("namespace", "default")))  # fmt: skip


def created(obj: Mapping[str, Any]) -> tuple[str, int, str, str]:
    """The order in which Services keep a contested address at start: the oldest first;
    within the same second (creation times have whole seconds), the one whose allocation this
    controller recorded first (its condition's transition time); a status written by hand
    has no such condition and comes last; then by uid."""
    meta = obj.get("metadata") or {}
    conditions = (obj.get("status") or {}).get("conditions") or ()
    ours = next(
        (c for c in conditions if c.get("type") == CONDITION and c.get("status") == "True"), None
    )
    since = str(ours.get("lastTransitionTime", "")) if ours else ""
    uid = str(meta.get("uid", ""))
    return str(meta.get("creationTimestamp", "")), 0 if ours else 1, since, uid
