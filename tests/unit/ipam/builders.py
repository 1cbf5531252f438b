"""Compact builders for the IPAM unit tests: ClusterCIDR and Node dicts and views."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.ipam.core.allocator import Allocation, Allocator
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import FINALIZER, ClusterCIDR, NodeView, project_cluster_cidr


def one_term(**labels: str) -> dict[str, Any]:
    """`{a=1, b=2}` of the scenarios' notation: ONE term, one `In` expression per key."""
    return {"nodeSelectorTerms": [{"matchExpressions": [_in(k, v) for k, v in labels.items()]}]}


def terms(*labels: Mapping[str, str]) -> dict[str, Any]:
    """`[a=1] | [b=2]`: one term per mapping."""
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [_in(k, v) for k, v in term.items()]} for term in labels
        ]
    }


def _in(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": [value]}


def cc_obj(
    name: str,
    ipv4: str = "",
    ipv6: str = "",
    bits: int = 8,
    selector: Mapping[str, Any] | None = None,
    *,
    finalizer: bool = True,
    deleting: bool = False,
    generation: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"perNodeHostBits": bits}
    if ipv4:
        spec["ipv4"] = ipv4
    if ipv6:
        spec["ipv6"] = ipv6
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "generation": generation}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "apiVersion": "networking.x-k8s.io/v1",
        "kind": "ClusterCIDR",
        "metadata": meta,
        "spec": spec,
    }


def cc(
    name: str,
    ipv4: str = "",
    ipv6: str = "",
    bits: int = 8,
    selector: Mapping[str, Any] | None = None,
    **kw: Any,
) -> ClusterCIDR:
    view = project_cluster_cidr(cc_obj(name, ipv4, ipv6, bits, selector, **kw))
    assert isinstance(view, ClusterCIDR), view
    return view


def node(
    name: str,
    labels: Mapping[str, str] | None = None,
    cidrs: Sequence[str] = (),
    *,
    uid: str = "",
    deleting: bool = False,
    created: str = "",
) -> NodeView:
    return NodeView(
        name=name,
        uid=uid or f"uid-{name}",
        labels=dict(labels or {}),
        pod_cidrs=tuple(ipaddress.ip_network(c) for c in cidrs),
        deleting=deleting,
        creation_timestamp=created,
    )


def nets(*texts: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)


def allocator(*pools: ClusterCIDR, **kw: Any) -> Allocator:
    """An allocator with these pools, each Ready unless terminating or frozen."""
    alloc = Allocator(**kw)
    for pool in pools:
        alloc.set_pool(pool.pool(), ready=not pool.deleting and not pool.frozen, uid=pool.uid)
    return alloc


def give(alloc: Allocator, n: NodeView) -> tuple[str, ...]:
    """Allocate and commit (the write succeeded); the CIDRs as text."""
    result = alloc.allocate(n)
    assert isinstance(result, Allocation), result
    alloc.commit(n.uid)
    return tuple(str(c) for c in result.cidrs)
