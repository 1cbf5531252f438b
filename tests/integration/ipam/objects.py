"""ClusterCIDR and Node bodies and small readers for the IPAM integration tests. Pure, no I/O
except the readers, which take a client."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.kube.client import Client, Obj
from tests.support import resources as r

FINALIZER = "networking.x-k8s.io/cluster-cidr-finalizer"
Selector = Mapping[str, str] | Sequence[Mapping[str, str]] | None


def term(labels: Mapping[str, str]) -> dict[str, Any]:
    """One nodeSelectorTerm with one `In` expression per label."""
    exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]
    return {"matchExpressions": exprs}


def selector(sel: Selector) -> dict[str, Any] | None:
    """`{a: 1}` is one term; a list of mappings is one term per mapping (`[a=1] | [b=2]`)."""
    if sel is None:
        return None
    terms = [term(sel)] if isinstance(sel, Mapping) else [term(t) for t in sel]
    return {"nodeSelectorTerms": terms}


def cluster_cidr(
    name: str,
    labels: Mapping[str, str],
    *,
    bits: int,
    ipv4: str | None = None,
    ipv6: str | None = None,
    sel: Selector = None,
    node_selector: Mapping[str, Any] | None = None,
) -> Obj:
    spec: dict[str, Any] = {"perNodeHostBits": bits}
    if ipv4 is not None:
        spec["ipv4"] = ipv4
    if ipv6 is not None:
        spec["ipv6"] = ipv6
    chosen = node_selector if node_selector is not None else selector(sel)
    if chosen is not None:
        spec["nodeSelector"] = chosen
    return {
        "apiVersion": "networking.x-k8s.io/v1",
        "kind": "ClusterCIDR",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": spec,
    }


def pod_cidrs(kube: Client, name: str) -> list[str]:
    return list((kube.get(r.NODES, name).get("spec") or {}).get("podCIDRs") or [])


def condition(obj: Mapping[str, Any], kind: str) -> tuple[str, str] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status")), str(cond.get("reason"))
    return None


def events_for(kube: Client, namespace: str, kind: str, name: str) -> list[Obj]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(kube.list(r.EVENTS, namespace=namespace, field_selector=selector)["items"])


def event_reasons(kube: Client, namespace: str, kind: str, name: str) -> list[str]:
    return [str(e.get("reason")) for e in events_for(kube, namespace, kind, name)]
