"""A Redfish ComputerSystem as the controller needs it: its power state, what names it, and how
to reset it. Pure, no I/O.

DMTF Redfish schema ComputerSystem (DSP8010): ``PowerState`` is one of On, Off, PoweringOn,
PoweringOff and Paused, or null when the service cannot tell; the reset action is
``Actions["#ComputerSystem.Reset"]``, its ``target`` the URI to POST ``{"ResetType": ...}`` to
and ``ResetType@Redfish.AllowableValues`` the types it accepts, when listed.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, get_args

from local_ccm.bmc.core.address import path_of
from local_ccm.bmc.core.errors import BmcError, shorten
from local_ccm.records import dataclass

PowerState = Literal["On", "Off", "PoweringOn", "PoweringOff", "Paused", "unknown"]
POWER_STATES: Final[tuple[PowerState, ...]] = get_args(PowerState)
RESET_ACTION: Final = "#ComputerSystem.Reset"
ALLOWABLE: Final = "ResetType@Redfish.AllowableValues"
_KNOWN: Final[dict[str, PowerState]] = {s: s for s in POWER_STATES if s != "unknown"}


@dataclass(frozen=True)
class ResetAction:
    target: str  # a path on the BMC
    allowed: tuple[str, ...] | None  # None: the BMC does not list them


@dataclass(frozen=True)
class System:
    path: str
    power_state: PowerState
    reported_power_state: str | None  # the text the BMC sent, when it is not one of ours
    id: str | None
    uuid: str | None  # the System's UUID: SMBIOS's, which the kubelet reports as systemUUID
    name: str | None
    manufacturer: str | None
    model: str | None
    health: str | None  # Status.Health: OK, Warning, Critical
    reset: ResetAction


@dataclass(frozen=True)
class ResetRequest:
    path: str
    body: bytes


def parse_system(body: bytes | str, path: str) -> System | BmcError:
    """The System read from ``path``, or an ``invalid-response`` error saying what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _invalid(path, f"not JSON ({exc})")
    if not isinstance(doc, dict):
        return _invalid(path, f"a JSON {type(doc).__name__}, not an object")
    raw = doc.get("PowerState")
    if raw is not None and not isinstance(raw, str):
        return _invalid(path, f"PowerState is a JSON {type(raw).__name__}, not a string")
    power = _KNOWN.get(raw, "unknown") if raw is not None else "unknown"
    status = doc.get("Status")
    return System(
        path=path,
        power_state=power,
        reported_power_state=raw if raw is not None and power == "unknown" else None,
        id=_text(doc.get("Id")),
        uuid=_text(doc.get("UUID")),
        name=_text(doc.get("Name")),
        manufacturer=_text(doc.get("Manufacturer")),
        model=_text(doc.get("Model")),
        health=_text(status.get("Health")) if isinstance(status, dict) else None,
        reset=_reset_action(doc.get("Actions"), path),
    )


def plan_reset(system: System, reset_type: str) -> ResetRequest | BmcError:
    """The POST that asks ``system`` for ``reset_type``, or a ``rejected`` error when the BMC
    lists its reset types and this is not one of them."""
    allowed = system.reset.allowed
    if allowed is not None and reset_type not in allowed:
        offered = ", ".join(allowed) or "none"
        return BmcError(
            "rejected", f"{system.path} does not offer ResetType {reset_type} (offers: {offered})"
        )
    return ResetRequest(system.reset.target, json.dumps({"ResetType": reset_type}).encode())


def _reset_action(actions: Any, system_path: str) -> ResetAction:
    fallback = f"{system_path}/Actions/ComputerSystem.Reset"
    action = actions.get(RESET_ACTION) if isinstance(actions, dict) else None
    if not isinstance(action, dict):
        return ResetAction(fallback, None)
    target = path_of(action.get("target")) or fallback
    values = action.get(ALLOWABLE)
    if isinstance(values, list) and all(isinstance(v, str) for v in values):
        return ResetAction(target, tuple(values))
    return ResetAction(target, None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _invalid(path: str, what: str) -> BmcError:
    return BmcError("invalid-response", shorten(f"GET {path}: the answer is {what}"))
