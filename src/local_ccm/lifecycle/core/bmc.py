"""What the lifecycle controller reads of a Node's NodeBMC (node-bmc's resource, docs/bmc.md),
and the power-off request (fencing) it writes on one for node-bmc to execute.

Pure, no I/O, no clock: `now` is a parameter. The controller learns what a BMC knows only from
NodeBMC objects, never from the BMC itself, and a reading counts only when it is fresh:

- `status.lastContact` no older than `--bmc-max-age` (node-bmc writes it on an answer; while
  the Node is not Ready at least every 30 s, so a fresh reading needs node-bmc running),
- `status.observedGeneration` the NodeBMC's generation (a reading of the spec as it is),
- the `Reachable` condition True (the System was read), or False with reason
  `SystemNotFound` and `powerState: Absent` (the BMC answered 404 for the System).

Anything else, or a NodeBMC that says `PoweringOff`, `Paused` or `Unknown`, is `unknown`:
unknown is never off, and never absent.

A power-off request is the annotation `bmc.local-ccm.io/power-off: "<Node uid>@<time>"` on the
NodeBMC: the uid names the Node it is for (node-bmc refuses one for another Node), the time
makes each request distinct, so a later NotReady episode of the same Node can ask again while a
request node-bmc has recorded (`status.powerOff.request`) is never executed twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from local_ccm import names
from local_ccm.kube.request import pointer
from local_ccm.lifecycle.core.model import parse_time
from local_ccm.records import dataclass
from local_ccm.runtime.events import rfc3339

POWER_OFF_ANNOTATION: Final = names.POWER_OFF_ANNOTATION
REACHABLE: Final = "Reachable"
ABSENT_REASON: Final = "SystemNotFound"
# The oldest `lastContact` node-bmc leaves on the NodeBMC of a Node that is not Ready, beyond
# one poll interval (its own `contact_refresh_not_ready`): `--bmc-max-age` must allow for both.
CONTACT_REFRESH_NOT_READY: Final = 30.0

BmcState = Literal["on", "off", "absent", "unknown"]
FenceStatus = Literal["none", "requested", "sent", "confirmed", "failed"]


@dataclass(frozen=True)
class PowerOffRecord:
    """`status.powerOff`, node-bmc's record of the request it executes: written before the
    ForceOff is sent, so a request it holds is never sent again."""

    request: str
    sent_at: datetime | None = None
    confirmed_at: datetime | None = None
    failed_at: datetime | None = None
    message: str = ""


@dataclass(frozen=True)
class BmcView:
    """The slim projection of one NodeBMC (named after its Node)."""

    name: str
    uid: str
    resource_version: str
    generation: int = 0
    observed_generation: int | None = None
    power: str = ""
    reachable: str = ""  # the Reachable condition's status; "" without one
    reason: str = ""
    last_contact: datetime | None = None
    request: str | None = None  # the power-off annotation
    record: PowerOffRecord | None = None


@dataclass(frozen=True)
class BmcReading:
    """What a NodeBMC tells now: `state` counts, `detail` says why (Events, logs)."""

    state: BmcState
    detail: str


@dataclass(frozen=True)
class PowerOffRequest:
    uid: str
    at: datetime | None  # None: a request without a time (written by hand)


def project_bmc(obj: Mapping[str, Any]) -> BmcView:
    """The `BmcView` of a raw NodeBMC; the spec (its address, CA bundle) is not kept."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    condition = next((c for c in status.get("conditions") or ()
                      if isinstance(c, Mapping) and c.get("type") == REACHABLE), {})  # fmt: skip
    observed = status.get("observedGeneration")
    request = (meta.get("annotations") or {}).get(POWER_OFF_ANNOTATION)
    return BmcView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        generation=int(meta.get("generation") or 0),
        observed_generation=observed if isinstance(observed, int) else None,
        power=str(status.get("powerState") or ""),
        reachable=str(condition.get("status") or ""),
        reason=str(condition.get("reason") or ""),
        last_contact=parse_time(status.get("lastContact")),
        request=request if isinstance(request, str) else None,
        record=_record(status.get("powerOff")),
    )


def _record(raw: object) -> PowerOffRecord | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("request"), str):
        return None
    return PowerOffRecord(
        request=raw["request"],
        sent_at=parse_time(raw.get("sentAt")),
        confirmed_at=parse_time(raw.get("confirmedAt")),
        failed_at=parse_time(raw.get("failedAt")),
        message=str(raw.get("message") or ""),
    )


# ------------------------------------------------------------------ the reading
def read_bmc(view: BmcView, now: datetime, max_age: float) -> BmcReading:
    """`on`, `off` or `absent` when the NodeBMC says so freshly; else `unknown`."""
    shown = _shown(view, now)
    if view.observed_generation != view.generation:
        return BmcReading("unknown", f"{shown}: not yet read for the current spec")
    if view.last_contact is None or (now - view.last_contact).total_seconds() > max_age:
        return BmcReading("unknown", f"{shown}: older than {max_age:.0f}s (is node-bmc running?)")
    if view.reachable == "True" and view.power in ("On", "Off"):
        return BmcReading("on" if view.power == "On" else "off", shown)
    if view.reachable == "False" and view.reason == ABSENT_REASON and view.power == "Absent":
        return BmcReading("absent", shown)
    return BmcReading("unknown", shown)


def _shown(view: BmcView, now: datetime) -> str:
    contact = view.last_contact
    when = "never" if contact is None else (
        f"{rfc3339(contact)} ({max(0.0, (now - contact).total_seconds()):.0f}s ago)")  # fmt: skip
    reachable = f"Reachable {view.reachable or '-'}" + (f" ({view.reason})" if view.reason else "")
    return f"NodeBMC {view.name}: powerState {view.power or '-'}, {reachable}, lastContact {when}"


# ------------------------------------------------------------------ the power-off request
def request_value(uid: str, now: datetime) -> str:
    return f"{uid}@{rfc3339(now)}"


def parse_request(value: str | None) -> PowerOffRequest | None:
    """`<uid>@<time>` or a bare `<uid>`; None when there is none."""
    if not value:
        return None
    uid, at, when = value.partition("@")
    return PowerOffRequest(uid, parse_time(when) if at else None)


def fence_status(view: BmcView, uid: str, since: datetime) -> FenceStatus:
    """Where the power-off of the Node `uid` in its NotReady episode since `since` stands:
    `none` (no request for it, or one of an earlier episode), `requested` (node-bmc has not
    recorded it yet), `sent`, `confirmed` or `failed` (node-bmc's record)."""
    request = parse_request(view.request)
    if request is None or request.uid != uid or (request.at is not None and request.at < since):
        return "none"
    record = view.record
    if record is None or record.request != view.request:
        return "requested"
    if record.failed_at is not None:
        return "failed"
    return "confirmed" if record.confirmed_at is not None else "sent"


def power_off_patch(view: BmcView, value: str, *, has_annotations: bool) -> list[dict[str, Any]]:
    """The JSON Patch that writes the request, guarded by the resourceVersion it was decided
    on (a NodeBMC changed meanwhile refuses it: the request is decided again)."""
    guard = {"op": "test", "path": "/metadata/resourceVersion", "value": view.resource_version}
    if not has_annotations:
        add = {"op": "add", "path": "/metadata/annotations",
               "value": {POWER_OFF_ANNOTATION: value}}  # fmt: skip
    else:
        add = {"op": "add", "path": pointer("metadata", "annotations", POWER_OFF_ANNOTATION),
               "value": value}  # fmt: skip
    return [guard, add]
