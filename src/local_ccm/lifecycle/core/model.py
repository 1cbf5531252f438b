"""The node-lifecycle controller's view of a Node (a slim projection for the cache) and of
probe results, and the constants only this component spells.

Pure, no I/O. The watch cache keeps one `NodeView` per Node instead of the whole object;
`project_node` is the only code that reads a raw Node dict.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping, Sequence
from dataclasses import field
from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any, Final, Literal, NamedTuple

from local_ccm import names
from local_ccm.records import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ReadyStatus = Literal["True", "False", "Unknown"]
Family = Literal["ipv4", "ipv6"]

# Constants of this component (names.py holds the shared ones).
MASTER_LABEL: Final = "node-role.kubernetes.io/master"
CONTROL_PLANE_LABELS: Final = (names.CONTROL_PLANE_LABEL, MASTER_LABEL)
OUT_OF_SERVICE_ANNOTATION: Final = names.ANNOTATION_PREFIX + "out-of-service-applied-at"
OUT_OF_SERVICE_VALUE: Final = "nodeshutdown"
OUT_OF_SERVICE_EFFECT: Final = "NoExecute"
AUTOSCALER_EFFECT: Final = "NoSchedule"
INTERNAL_IP: Final = "InternalIP"
EXTERNAL_IP: Final = "ExternalIP"


class Taint(NamedTuple):
    key: str
    value: str
    effect: str


class NodeAddress(NamedTuple):
    type: str
    address: str


@dataclass(frozen=True)
class NodeView:
    """The slim projection of one Node. `ready` is None when there is no Ready
    condition; `ready_since` is that condition's lastTransitionTime."""

    name: str
    uid: str
    resource_version: str
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: ReadyStatus | None = None
    ready_since: datetime | None = None
    addresses: tuple[NodeAddress, ...] = ()


def slim_node(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node that `project_node` reads, and nothing else.

    A LIST of thousands of Nodes is slimmed page by page, so the full objects (managedFields,
    images, nodeInfo: most of their bytes) never all sit in memory at once: memory stays flat
    in the number of Nodes.
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return {
        "metadata": {k: v for k, v in meta.items() if k != "managedFields"},
        "spec": {"taints": (obj.get("spec") or {}).get("taints") or []},
        "status": {
            "conditions": [c for c in status.get("conditions") or () if c.get("type") == "Ready"],
            "addresses": status.get("addresses") or [],
        },
    }


def project_node(
    obj: Mapping[str, Any], annotation_keys: Collection[str] | None = None
) -> NodeView:
    """The `NodeView` of a raw Node. With `annotation_keys`, only those annotations (and the
    out-of-service annotation, which resumes a wait after a restart) are kept, so the cache
    stays small."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready, since = _ready_condition(status.get("conditions") or ())
    return NodeView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        creation_timestamp=parse_time(meta.get("creationTimestamp")),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        labels=dict(meta.get("labels") or {}),
        annotations=_annotations(meta.get("annotations") or {}, annotation_keys),
        taints=tuple(_taint(t) for t in (obj.get("spec") or {}).get("taints") or ()),
        ready=ready,
        ready_since=since,
        addresses=tuple(
            NodeAddress(str(a.get("type", "")), str(a.get("address", "")))
            for a in status.get("addresses") or ()
        ),
    )


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime; None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _ready_condition(
    conditions: Collection[Mapping[str, Any]],
) -> tuple[ReadyStatus | None, datetime | None]:
    for condition in conditions:
        if condition.get("type") == "Ready":
            status = condition.get("status")
            # Anything but True/False is read as Unknown: NotReady either way.
            value: ReadyStatus = status if status in ("True", "False") else "Unknown"
            return value, parse_time(condition.get("lastTransitionTime"))
    return None, None


def _annotations(annotations: Mapping[str, Any], keys: Collection[str] | None) -> dict[str, str]:
    if keys is None:
        return {str(k): str(v) for k, v in annotations.items()}
    wanted = {*keys, OUT_OF_SERVICE_ANNOTATION}
    return {str(k): str(v) for k, v in annotations.items() if k in wanted}


def _taint(raw: Mapping[str, Any]) -> Taint:
    return Taint(str(raw.get("key", "")), str(raw.get("value") or ""), str(raw.get("effect", "")))


# ------------------------------------------------------------------ probes
OutcomeKind = Literal["reply", "no_reply", "no_route", "error"]
Verdict = Literal["reachable", "unreachable", "unknown"]


@dataclass(frozen=True)
class ProbeKind:
    """`icmp`, or `tcp` with its port."""

    name: Literal["icmp", "tcp"]
    port: int | None = None

    def __str__(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


ICMP: Final = ProbeKind("icmp")


def tcp(port: int) -> ProbeKind:
    return ProbeKind("tcp", port)


def family_of(address: IPAddress) -> Family:
    return "ipv4" if address.version == 4 else "ipv6"


@dataclass(frozen=True)
class ProbeOutcome:
    """The outcome of one (address, kind) probe. `detail` says why, for Events and logs:
    e.g. "echo reply", "connected", "connection refused", "timeout", "EHOSTUNREACH"."""

    address: IPAddress
    kind: ProbeKind
    outcome: OutcomeKind
    detail: str = ""
    duration: float = 0.0

    @property
    def family(self) -> Family:
        return family_of(self.address)

    def __str__(self) -> str:
        text = f"{self.kind} {self.address}: {self.outcome}"
        return f"{text} ({self.detail})" if self.detail else text


# ------------------------------------------------------------------ probe addresses, kinds, verdict
def probe_addresses(
    node: NodeView, *, all_addresses: bool = False, families: Collection[Family] = ("ipv4", "ipv6")
) -> tuple[IPAddress, ...]:
    """Every InternalIP, else every ExternalIP (both with `all_addresses`); filtered by
    family; de-duplicated in order; IPv6 link-local, hostnames and garbage skipped."""
    internal = [a.address for a in node.addresses if a.type == INTERNAL_IP]
    external = [a.address for a in node.addresses if a.type == EXTERNAL_IP]
    texts = internal + external if all_addresses or not internal else internal
    chosen: dict[IPAddress, None] = {}
    for text in texts:
        try:
            address = ip_address(text)
        except ValueError:  # a hostname is never resolved
            continue
        if family_of(address) in families and not (address.version == 6 and address.is_link_local):
            chosen.setdefault(address)
    return tuple(chosen)


def resolve_kinds(requested: Sequence[ProbeKind] | None, ping_count: int) -> tuple[ProbeKind, ...]:
    """The probe set. `requested` None means `--probe` was not given (default icmp);
    `()` is `--probe=none`. `--ping-count=0` removes icmp; an empty result is unprobed mode."""
    kinds = (ICMP,) if requested is None else tuple(requested)
    return tuple(k for k in kinds if not (k == ICMP and ping_count == 0))


def combine(outcomes: Sequence[ProbeOutcome]) -> Verdict:
    """Any reply is `reachable`; else any local error or missing route, or no probe at all, is
    `unknown` (the controller learned nothing, so it never deletes); else `unreachable`."""
    kinds = {o.outcome for o in outcomes}
    if "reply" in kinds:
        return "reachable"
    if not outcomes or kinds & {"error", "no_route"}:
        return "unknown"
    return "unreachable"


def summarize(outcomes: Sequence[ProbeOutcome]) -> str:
    """Per-address outcomes for Event messages and the dry-run log line."""
    return "; ".join(str(o) for o in outcomes) or "no probe"
