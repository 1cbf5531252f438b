"""The Events of the node-bmc controller: their reasons and texts. Pure, no I/O.

On the NodeBMC: a power state read that differs from the last one read (`PowerStateChanged`),
a poll failing for a reason other than the last poll's (the Reachable condition's reason,
Warning), and the first read after failures (`Contacted`). On the Node: the shutdown taint
added or removed, the System Off while the Node is Ready, and the System gone. On both: each
step of a power-off request (`PowerOffSent`, `PowerOffConfirmed`, `PowerOffFailed`,
`PowerOffRefused`).
"""

from __future__ import annotations

from local_ccm.bmc.core.decide import TaintPlan
from local_ccm.bmc.core.observation import Observation
from local_ccm.names import SHUTDOWN_TAINT
from local_ccm.runtime.events import EventSpec, EventType

TAINT_ADDED = "ShutdownTaintAdded"
TAINT_REMOVED = "ShutdownTaintRemoved"
READY_BUT_OFF = "BMCReportsOffNodeReady"
SYSTEM_ABSENT = "BMCSystemNotFound"
POWER_CHANGED = "PowerStateChanged"


def poll_events(before: Observation | None, last_reason: str | None,
                observation: Observation) -> list[EventSpec]:  # fmt: skip
    """The NodeBMC's Events for `observation`: `before` is the last poll's (None: the first
    of this process), `last_reason` the Reachable reason the status showed before it."""
    found: list[EventSpec] = []
    previous = before.reason if before is not None else last_reason
    if observation.reason not in ("Contacted", previous):
        found.append(EventSpec("Warning", observation.reason, observation.message))
    elif observation.reason == "Contacted" and previous not in (None, "Contacted"):
        found.append(EventSpec("Normal", "Contacted", f"reachable again: {observation.message}"))
    return found


def power_changed(before: str, observation: Observation) -> EventSpec:
    return EventSpec("Normal", POWER_CHANGED, f"power state {before} -> {observation.power}: "
                     f"{observation.message}")  # fmt: skip


def taint_event(plan: TaintPlan) -> EventSpec:
    verb, reason = ("added", TAINT_ADDED) if plan.action == "add" else ("removed", TAINT_REMOVED)
    return EventSpec("Normal", reason, f"{SHUTDOWN_TAINT}:NoSchedule {verb}: {plan.why}")


def ready_but_off(bmc: str, observation: Observation) -> EventSpec:
    return EventSpec("Warning", READY_BUT_OFF, (
        f"NodeBMC {bmc} reports the System Off ({observation.message}) but the Node is Ready: "
        "no shutdown taint. Does the NodeBMC's address name this Node's machine, and does the "
        "BMC tell the truth?"))  # fmt: skip


def system_absent(bmc: str, observation: Observation) -> EventSpec:
    return EventSpec("Warning", SYSTEM_ABSENT, f"NodeBMC {bmc}: {observation.message}; the Node "
                     "is left as it is")  # fmt: skip


# Power-off requests (`core.poweroff`): on the NodeBMC and on its Node.
POWER_OFF_EVENTS: dict[str, tuple[EventType, str]] = {
    "send": ("Normal", "PowerOffSent"),
    "already_off": ("Normal", "PowerOffConfirmed"),
    "confirm": ("Normal", "PowerOffConfirmed"),
    "fail": ("Warning", "PowerOffFailed"),
    "refuse": ("Warning", "PowerOffRefused"),
}


def power_off_event(step: str, message: str) -> EventSpec | None:
    """The Event of a power-off step (None: a step that reports nothing)."""
    found = POWER_OFF_EVENTS.get(step)
    return None if found is None else EventSpec(found[0], found[1], message)
