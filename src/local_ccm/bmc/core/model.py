"""The slim views the node-bmc controller keeps of NodeBMCs and Nodes, and Event subjects.
Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from local_ccm import names
from local_ccm.bmc.core.spec import BmcSpec, InvalidSpec, parse_spec
from local_ccm.names import SHUTDOWN_TAINT
from local_ccm.records import dataclass
from local_ccm.runtime import events as ev

Obj = dict[str, Any]
GROUP: Final = names.BMC_GROUP
VERSION: Final = names.BMC_VERSION
KIND: Final = names.NODEBMC_KIND
PLURAL: Final = names.NODEBMC_PLURAL
POWER_OFF_ANNOTATION: Final = names.POWER_OFF_ANNOTATION  # the lifecycle controller's request
API_VERSION: Final = f"{GROUP}/{VERSION}"
REACHABLE: Final = "Reachable"  # the condition type
SHUTDOWN_EFFECT: Final = "NoSchedule"


@dataclass(frozen=True)
class NodeBmc:
    """A NodeBMC as the controller keeps it: its spec parsed once per change."""

    name: str  # the Node's name
    uid: str
    generation: int
    resource_version: str
    spec: BmcSpec | InvalidSpec
    status: Mapping[str, Any]
    power_off: str | None = None  # the power-off request (`core.poweroff`), if any


@dataclass(frozen=True)
class NodeView:
    """What the controller reads of a Node: its Ready condition and its taints."""

    name: str
    uid: str
    resource_version: str
    ready: str  # the Ready condition's status; "Unknown" without one, as upstream defaults it
    taints: tuple[tuple[str, str], ...]  # (key, effect), in the Node's order
    system_uuid: str = ""  # status.nodeInfo.systemUUID: its machine's SMBIOS UUID, "" unknown

    @property
    def is_ready(self) -> bool:
        return self.ready == "True"

    @property
    def is_shut_down(self) -> bool:
        """It carries the shutdown taint (the key with effect NoSchedule, nothing else)."""
        return (SHUTDOWN_TAINT, SHUTDOWN_EFFECT) in self.taints

    def decides_alike(self, other: NodeView | None) -> bool:
        """What the controller decides on is the same in `other` (a heartbeat is not news)."""
        return other is not None and (self.ready, self.is_shut_down, self.system_uuid) == (
            other.ready,
            other.is_shut_down,
            other.system_uuid,
        )


def project_bmc(obj: Obj) -> NodeBmc:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    return NodeBmc(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion", "")),
        spec=parse_spec(spec if isinstance(spec, Mapping) else {}),
        status=obj.get("status") or {},
        power_off=_request((meta.get("annotations") or {}).get(POWER_OFF_ANNOTATION)),
    )


def _request(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def project_node(obj: Obj) -> NodeView:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conditions = status.get("conditions") or ()
    info = status.get("nodeInfo") or {}
    ready = next((str(c.get("status")) for c in conditions if c.get("type") == "Ready"),
                 "Unknown")  # fmt: skip
    taints = tuple((str(t.get("key", "")), str(t.get("effect", "")))
                   for t in spec.get("taints") or ())  # fmt: skip
    return NodeView(str(meta.get("name", "")), str(meta.get("uid", "")),
                    str(meta.get("resourceVersion", "")), ready, taints,
                    str(info.get("systemUUID") or ""))  # fmt: skip


def stored_reason(status: Mapping[str, Any]) -> str | None:
    """The Reachable condition's reason as the status shows it."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == REACHABLE:
            return str(condition.get("reason", ""))
    return None


def bmc_subject(bmc: NodeBmc) -> ev.Subject:
    return ev.Subject(KIND, bmc.name, bmc.uid, API_VERSION)


def node_subject(node: NodeView) -> ev.Subject:
    return ev.Subject("Node", node.name, node.uid, "v1")
