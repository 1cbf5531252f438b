"""Compact builders for the agent's unit tests: address lists, detections and Node objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import ip_address
from typing import Any

from local_ccm import names
from local_ccm.agent.core.addresses import (
    NodeAddress,
)
from local_ccm.agent.core.candidates import (
    Detection,
    DetectorKey,
    Failed,
    Found,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL

SHORT = {"Int": "InternalIP", "Ext": "ExternalIP"}
INT4: DetectorKey = (INTERNAL, 4)
INT6: DetectorKey = (INTERNAL, 6)
EXT4: DetectorKey = (EXTERNAL, 4)
EXT6: DetectorKey = (EXTERNAL, 6)


def addrs(spec: str) -> tuple[NodeAddress, ...]:
    """``"Int 192.0.2.10, Ext 203.0.113.10, Hostname n1"`` -> NodeAddress tuple."""
    result = []
    for item in filter(None, (i.strip() for i in spec.split(","))):
        kind, value = item.split()
        result.append(NodeAddress(SHORT.get(kind, kind), value))
    return tuple(result)


def found(address: str) -> Found:
    return Found(ip_address(address))


def no_route(detail: str = "no route to 8.8.8.8: Network is unreachable (ENETUNREACH)") -> Failed:
    return Failed("no_route", detail)


def detections(**by_key: Detection) -> dict[DetectorKey, Detection]:
    """``detections(ext4=found("203.0.113.10"))``; missing detectors are Disabled."""
    keys: dict[str, DetectorKey] = {
        "int4": INT4, "int6": INT6, "ext4": EXT4, "ext6": EXT6,
    }  # fmt: skip
    return {keys[k]: v for k, v in by_key.items()}


def node(
    addresses: str = "",
    *,
    rv: str = "100",
    owned: str | None = None,
    provided: str | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    conditions: Sequence[Mapping[str, Any]] | None = None,
    provider_id: str | None = None,
    node_info: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API returns it (no ``annotations`` key when there are none)."""
    metadata: dict[str, Any] = {"name": "n1", "uid": "u-1", "resourceVersion": rv}
    notes = dict(annotations or {})
    if owned is not None:
        notes[names.OWNED_ADDRESSES_ANNOTATION] = owned
    if provided is not None:
        notes[names.PROVIDED_NODE_IP_ANNOTATION] = provided
    if notes:
        metadata["annotations"] = notes
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if provider_id is not None:
        spec["providerID"] = provider_id
    status: dict[str, Any] = {"addresses": [a.to_api() for a in addrs(addresses)]}
    if conditions is not None:
        status["conditions"] = [dict(c) for c in conditions]
    if node_info is not None:
        status["nodeInfo"] = dict(node_info)
    return {"metadata": metadata, "spec": spec, "status": status}


UNINITIALIZED = {"key": names.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
