"""A NodeBMC's status after a poll. Pure, no I/O.

```yaml
status:
  observedGeneration: 3
  powerState: On | Off | PoweringOn | PoweringOff | Paused | Unknown | Absent
  lastContact: "..."        # the last answer that said something (the System, or its 404)
  lastPowerChange: "..."    # when powerState last changed
  readGeneration: 3         # the generation a System was last read at (a 404 is Absent only then)
  conditions: [{type: Reachable, status, reason, message, lastTransitionTime, observedGeneration}]
```

A status is written only when it changes, and `lastContact` alone is refreshed at most every
`refresh` seconds: writing it on every poll would be one write per BMC per poll interval
(500 BMCs at 30 s: 17 writes a second, each a watch event for every NodeBMC watcher), the
cost Kubernetes moved Node heartbeats to Leases for (KEP-589). So `lastContact` is exact to
`refresh` plus one poll interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from local_ccm.bmc.core.model import REACHABLE
from local_ccm.bmc.core.observation import Observation
from local_ccm.runtime.events import rfc3339

Obj = dict[str, Any]


def desired_status(
    current: Mapping[str, Any], observation: Observation, generation: int, *, refresh: float
) -> Obj | None:
    """The status to write after `observation`, or None when `current` already says it."""
    stamp = rfc3339(observation.at)
    power = observation.power
    changed = current.get("powerState") != power
    wanted: Obj = {
        "observedGeneration": generation,
        "powerState": power,
        "lastPowerChange": stamp if changed or not current.get("lastPowerChange")
        else current["lastPowerChange"],
        "conditions": [_condition(current, observation, generation, stamp)],
    }  # fmt: skip
    read = generation if observation.reachable else current.get("readGeneration")
    if isinstance(read, int) and not isinstance(read, bool):
        wanted["readGeneration"] = read
    contact = current.get("lastContact")
    if contact:
        wanted["lastContact"] = contact
    same = {k: current.get(k) for k in wanted} == wanted
    if observation.answered and (not same or _older(contact, observation.at, refresh)):
        wanted["lastContact"] = stamp
    elif same:
        return None
    return wanted


def read_before(status: Mapping[str, Any], generation: int) -> bool:
    """A System was read at this generation of the spec, as `status` records."""
    return status.get("readGeneration") == generation


def _condition(current: Mapping[str, Any], observation: Observation, generation: int,
               stamp: str) -> Obj:  # fmt: skip
    status = "True" if observation.reachable else "False"
    before = next((c for c in current.get("conditions") or ()
                   if isinstance(c, Mapping) and c.get("type") == REACHABLE), {})  # fmt: skip
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": REACHABLE,
        "status": status,
        "reason": observation.reason,
        "message": observation.message,
        "lastTransitionTime": since or stamp,
        "observedGeneration": generation,
    }


def _older(stamp: Any, now: datetime, seconds: float) -> bool:
    """`stamp` (metav1.Time) is missing, unreadable or more than `seconds` before `now`."""
    if not isinstance(stamp, str):
        return True
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return True
    return (now - then).total_seconds() > seconds
