"""Power state -> Node: whether a Node gets or loses the shutdown taint. Pure, no I/O.

The rule of the cloud node lifecycle controller (k8s.io/cloud-provider,
controllers/nodelifecycle, `MonitorNodes`), with the BMC in the cloud's place:

- a Ready Node never gets `node.cloudprovider.kubernetes.io/shutdown:NoSchedule`, and loses it
  whatever the BMC says (Ready wins: the kubelet answering is stronger evidence than a BMC,
  which may be mapped to the wrong Node or wrong itself);
- a Node that is not Ready gets it when the BMC *read* the System Off, and loses it when the
  BMC read it On;
- anything else (PoweringOn, PoweringOff, Paused, a null PowerState, the System gone, any
  failure to read it) changes nothing: unknown is never off.

Off while the Node is Ready is reported (`ready_but_off`), never acted on.
"""

from __future__ import annotations

from typing import Literal

from local_ccm.bmc.core.model import NodeView
from local_ccm.bmc.core.observation import Observation
from local_ccm.records import dataclass

TaintAction = Literal["add", "remove"]


@dataclass(frozen=True)
class TaintPlan:
    action: TaintAction | None
    why: str  # for the log line and the Event
    ready_but_off: bool = False


NOTHING = TaintPlan(None, "")


def plan_taint(observation: Observation | None, node: NodeView | None) -> TaintPlan:
    """What to do with `node`'s shutdown taint after `observation` (None: the Node has no
    NodeBMC, so only the Ready rule applies)."""
    if node is None:
        return NOTHING
    read = observation.power if observation is not None and observation.reachable else None
    if node.is_ready:
        action: TaintAction | None = "remove" if node.is_shut_down else None
        return TaintPlan(action, "the Node is Ready", ready_but_off=read == "Off")
    if read == "Off" and not node.is_shut_down:
        return TaintPlan("add", "the BMC reports the System Off and the Node is not Ready")
    if read == "On" and node.is_shut_down:
        return TaintPlan("remove", "the BMC reports the System On")
    return NOTHING
