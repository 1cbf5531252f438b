"""The optional out-of-service step before a deletion: taint `node.kubernetes.io/out-of-service`,
wait for VolumeAttachments to go, then delete, or remove the taint again if the Node recovered.
A Node with a NodeBMC is tainted only while the BMC reads its System Off (or absent): the taint
lets its Pods' volumes be detached and attached elsewhere, safe only when the machine is off.

Pure, no I/O: the loop counts attachments and sends the JSON Patches returned here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from local_ccm.kube.request import pointer
from local_ccm.lifecycle.core.bmc import BmcState
from local_ccm.lifecycle.core.model import (
    OUT_OF_SERVICE_ANNOTATION,
    OUT_OF_SERVICE_EFFECT,
    OUT_OF_SERVICE_VALUE,
    parse_time,
)
from local_ccm.names import OUT_OF_SERVICE_TAINT
from local_ccm.records import dataclass
from local_ccm.runtime.events import rfc3339

Obj = Mapping[str, Any]
OosStep = Literal["taint", "wait", "delete", "remove", "end", "bmc_not_off"]


@dataclass(frozen=True)
class OutOfService:
    """The next out-of-service step; `patch` is the JSON Patch for `taint` and `remove`."""

    step: OosStep
    patch: tuple[dict[str, Any], ...] = ()
    would_taint: bool = False  # dry-run: the log says the taint would have been applied


def plan_out_of_service(
    fresh: Obj, *, now: datetime, attachments: int, timeout: float, recovered: bool,
    dry_run: bool, bmc: BmcState | None = None,
) -> OutOfService:  # fmt: skip
    """Decide the out-of-service step for the fresh, unfiltered Node object. `attachments`
    counts VolumeAttachments naming it; `recovered` is Ready, a `reachable` verdict or the BMC
    reading On; `bmc` what the Node's NodeBMC reads now (None: it has none)."""
    annotations = (fresh.get("metadata") or {}).get("annotations") or {}
    applied = parse_time(annotations.get(OUT_OF_SERVICE_ANNOTATION))
    if recovered:  # never remove an administrator's taint: only one with our annotation
        ours = OUT_OF_SERVICE_ANNOTATION in annotations
        return OutOfService("remove", remove_out_of_service_patch(fresh)) if ours else \
            OutOfService("end")  # fmt: skip
    if applied is None and bmc is not None and bmc not in ("off", "absent"):
        return OutOfService("bmc_not_off")  # never on the probes alone
    if dry_run:
        return OutOfService("delete", would_taint=applied is None)
    if applied is None:
        return OutOfService("taint", add_out_of_service_patch(fresh, now))
    if attachments == 0 or (now - applied).total_seconds() >= timeout:
        return OutOfService("delete")
    return OutOfService("wait")


def _oos_taint() -> dict[str, str]:
    return {"key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE,
            "effect": OUT_OF_SERVICE_EFFECT}  # fmt: skip


def add_out_of_service_patch(fresh: Obj, now: datetime) -> tuple[dict[str, Any], ...]:
    """Taint and annotation in one JSON Patch guarded by the resourceVersion."""
    meta, spec = fresh.get("metadata") or {}, fresh.get("spec") or {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
    ]
    taints = spec.get("taints")
    if not taints:
        ops.append({"op": "add", "path": "/spec/taints", "value": [_oos_taint()]})
    elif _oos_taint() not in taints:
        ops.append({"op": "add", "path": "/spec/taints/-", "value": _oos_taint()})
    stamp = rfc3339(now)
    if "annotations" not in meta or meta["annotations"] is None:
        ops.append(
            {"op": "add", "path": "/metadata/annotations",
             "value": {OUT_OF_SERVICE_ANNOTATION: stamp}}
        )  # fmt: skip
    else:
        path = pointer("metadata", "annotations", OUT_OF_SERVICE_ANNOTATION)
        ops.append({"op": "add", "path": path, "value": stamp})
    return tuple(ops)


def remove_out_of_service_patch(fresh: Obj) -> tuple[dict[str, Any], ...]:
    """Remove our taint (each index guarded by a `test`) and the annotation."""
    meta, spec = fresh.get("metadata") or {}, fresh.get("spec") or {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
    ]
    taints = list(spec.get("taints") or ())
    # Highest index first, so earlier removals do not shift later ones.
    for index in reversed([i for i, t in enumerate(taints) if t == _oos_taint()]):
        path = pointer("spec", "taints", index)
        ops.append({"op": "test", "path": path, "value": taints[index]})
        ops.append({"op": "remove", "path": path})
    if OUT_OF_SERVICE_ANNOTATION in (meta.get("annotations") or {}):
        ops.append({"op": "remove", "path": pointer("metadata", "annotations",
                                                     OUT_OF_SERVICE_ANNOTATION)})  # fmt: skip
    return tuple(ops)
