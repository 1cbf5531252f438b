"""Power-off requests (fencing): what node-bmc does about the annotation
`bmc.local-ccm.io/power-off: "<Node uid>@<time>"` the lifecycle controller writes on a NodeBMC
(docs/bmc.md, "Fencing"). Pure, no I/O.

node-bmc records a request in the NodeBMC's status *before* it acts on it:

```yaml
status:
  powerOff:
    request: "<the annotation's value>"
    sentAt: "..."        # the ForceOff was about to be sent: never sent again for this request
    confirmedAt: "..."   # a poll read Off after it
    failedAt: "..."      # no Off within --bmc-power-off-timeout: reported, not sent again
    message: "..."
```

The record is written with the resourceVersion the decision was made on, and only a request
that differs from the recorded one is acted on; so a leader that stops between the record and
the ForceOff, or after it, leaves a record the next leader reads and never sends a second
ForceOff. At most once, never twice: a request whose ForceOff was lost is reported failed
after the timeout. A request is refused (an Event, nothing sent) when it names another Node
than the one registered under the NodeBMC's name, or the Node is Ready: the kubelet answering
is stronger evidence than any request.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from local_ccm.bmc.core.model import NodeView
from local_ccm.bmc.core.observation import Observation
from local_ccm.records import dataclass
from local_ccm.runtime.events import clip, rfc3339

Obj = dict[str, Any]
PowerOffStep = Literal["none", "refuse", "send", "already_off", "wait", "confirm", "fail"]
WRITES: frozenset[PowerOffStep] = frozenset({"send", "already_off", "confirm", "fail"})


@dataclass(frozen=True)
class PowerOffPlan:
    """The step for the request; `record` the `status.powerOff` to write first (the steps
    of `WRITES`), `message` the Event's and log line's text."""

    step: PowerOffStep
    request: str | None = None
    record: Obj | None = None
    message: str = ""


IDLE = PowerOffPlan("none")


def request_uid(request: str) -> str:
    """The Node uid of a request, `<uid>@<time>` or a bare `<uid>`."""
    return request.partition("@")[0]


def plan_power_off(
    request: str | None,
    recorded: Mapping[str, Any] | None,
    node: NodeView | None,
    observation: Observation | None,
    *,
    now: datetime,
    timeout: float,
) -> PowerOffPlan:
    """What to do about `request` (the annotation) given `recorded` (`status.powerOff`), the
    Node of the NodeBMC's name and the last poll."""
    if not request:
        return IDLE
    if isinstance(recorded, Mapping) and recorded.get("request") == request:
        return _recorded(request, recorded, observation, now, timeout)
    uid = request_uid(request)
    if node is None or node.uid != uid:
        now_there = "no Node" if node is None else f"Node uid {node.uid}"
        return PowerOffPlan("refuse", request, message=f"power-off request {request!r} names "
                            f"Node uid {uid}, but there is {now_there}: nothing sent")  # fmt: skip
    if node.is_ready:
        return PowerOffPlan("refuse", request, message=f"power-off request {request!r} refused: "
                            "the Node is Ready")  # fmt: skip
    return _new(request, observation, now)


def _new(request: str, observation: Observation | None, now: datetime) -> PowerOffPlan:
    """A request for this Node, not recorded yet: the ForceOff when the last poll read On."""
    read = observation.power if observation is not None and observation.reachable else None
    stamp = rfc3339(now)
    if read == "On":
        return PowerOffPlan("send", request, {"request": request, "sentAt": stamp},
                            f"ForceOff sent for request {request!r}")  # fmt: skip
    if read == "Off":
        message = "the System was already Off: no ForceOff sent"
        return PowerOffPlan("already_off", request, {"request": request, "confirmedAt": stamp,
                                                     "message": message}, message)  # fmt: skip
    return PowerOffPlan("wait", request, message="waiting for a poll that reads On or Off")


def _recorded(
    request: str,
    recorded: Mapping[str, Any],
    observation: Observation | None,
    now: datetime,
    timeout: float,
) -> PowerOffPlan:
    """A request node-bmc has recorded: confirmed by a poll that read Off after it was sent,
    or failed after the timeout; never sent again."""
    if recorded.get("confirmedAt") or recorded.get("failedAt"):
        return IDLE
    sent = _time(recorded.get("sentAt"))
    stamp = rfc3339(now)
    if observation is not None and observation.reachable and observation.power == "Off" and (
            sent is None or observation.at >= sent):  # fmt: skip
        message = f"the BMC reads the System Off: {observation.message}"
        return PowerOffPlan("confirm", request, {**recorded, "confirmedAt": stamp,
                                                 "message": clip(message)}, message)  # fmt: skip
    if sent is None or (now - sent).total_seconds() >= timeout:
        last = "no poll" if observation is None else observation.message
        message = f"not Off {timeout:.0f}s after the ForceOff (last poll: {last}); not sent again"
        return PowerOffPlan("fail", request, {**recorded, "failedAt": stamp,
                                              "message": clip(message)}, message)  # fmt: skip
    return PowerOffPlan("wait", request, message="waiting for a poll that reads Off")


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
