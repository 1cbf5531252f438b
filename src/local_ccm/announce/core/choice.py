"""Which Nodes may announce an address, and in which order they try to take it. Pure, no I/O.

The order is rendezvous (highest-random-weight) hashing: each Node's weight for an address is
the SHA-256 of ``"<address>/<node>"``, highest first. Every agent computes the same order from
the same Node names, addresses spread evenly over the Nodes, and a Node that comes or goes moves
only the addresses it wins or won (Thaler and Ravishankar, "Using name-based mappings to
increase hit rates", IEEE/ACM ToN 1998). The order only says who *tries* first; who answers is
decided by the address's Lease (`hold`), so two agents with different views of the Nodes at
worst race for the Lease, and the API server lets one of them win.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Set
from typing import Any, Final

from local_ccm.records import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# The cloud-provider service controller's label: a Node carrying it (any value) takes no
# load-balancer traffic (KEP-1143).
EXCLUDE_LABEL: Final = "node.kubernetes.io/exclude-from-external-load-balancers"


@dataclass(frozen=True)
class NodeView:
    """What eligibility reads from a Node."""

    name: str
    ready: bool  # the Ready condition is True
    excluded: bool  # labelled EXCLUDE_LABEL
    network_unavailable: bool = False  # the NetworkUnavailable condition is True


@dataclass(frozen=True)
class Traffic:
    """The Services behind one address: with ``externalTrafficPolicy: Local`` only a Node with a
    ready endpoint may take the traffic (kube-proxy drops it elsewhere)."""

    local: bool = False
    endpoint_nodes: frozenset[str] = frozenset()  # Nodes with a ready endpoint


def project_node(node: Mapping[str, Any]) -> NodeView:
    """The `NodeView` of a Node object."""
    metadata = node.get("metadata") or {}
    conditions = (node.get("status") or {}).get("conditions") or ()

    def true(kind: str) -> bool:
        return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
                   for c in conditions)  # fmt: skip

    return NodeView(
        name=str(metadata.get("name") or ""),
        ready=true("Ready"),
        excluded=EXCLUDE_LABEL in (metadata.get("labels") or {}),
        network_unavailable=true("NetworkUnavailable"),
    )


def endpoint_nodes(slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The Nodes with a ready endpoint in a Service's EndpointSlices. A missing ``ready`` counts
    as ready, as the EndpointSlice API asks of consumers; a terminating endpoint is not ready."""
    nodes = set()
    for slice_ in slices:
        for endpoint in slice_.get("endpoints") or ():
            ready = (endpoint.get("conditions") or {}).get("ready")
            node = endpoint.get("nodeName")
            if ready is not False and isinstance(node, str) and node:
                nodes.add(node)
    return frozenset(nodes)


def shared(traffics: Iterable[Traffic]) -> Traffic:
    """One `Traffic` for an address several Services share: a Node must suit every Local one
    (the same Node answers for all of them), so Local wins and the endpoint Nodes intersect."""
    local = [t.endpoint_nodes for t in traffics if t.local]
    if not local:
        return Traffic()
    return Traffic(local=True, endpoint_nodes=frozenset.intersection(*local))


def ineligible_reason(
    node: NodeView, selected: Set[str] | None, announcing: Set[str], traffic: Traffic
) -> str:
    """Why `node` may not announce the address, or "" when it may.

    `selected`: the Nodes the pool's node selector matches (None: the pool has none);
    `announcing`: the Nodes whose agent runs its announcing loop.
    """
    if not node.ready or node.network_unavailable:  # no pod network yet: MetalLB's rule too
        return "not Ready" if not node.ready else "NetworkUnavailable"
    if node.excluded:
        return f"labelled {EXCLUDE_LABEL}"
    if selected is not None and node.name not in selected:
        return "not matched by the pool's node selector"
    if node.name not in announcing:
        return "its agent is not announcing"
    if traffic.local and node.name not in traffic.endpoint_nodes:
        return "no ready endpoint (externalTrafficPolicy: Local)"
    return ""


def eligible(
    nodes: Iterable[NodeView], selected: Set[str] | None, announcing: Set[str], traffic: Traffic
) -> frozenset[str]:
    """The names of the Nodes that may announce the address."""
    return frozenset(
        node.name for node in nodes if not ineligible_reason(node, selected, announcing, traffic)
    )


def weight(address: IPAddress, node: str) -> bytes:
    """A Node's rendezvous weight for an address. The address in its canonical text form
    (RFC 5952 for IPv6), so every agent hashes the same string."""
    return hashlib.sha256(f"{address}/{node}".encode()).digest()


def rank(address: IPAddress, nodes: Iterable[str]) -> list[str]:
    """`nodes` in the order they try to take `address`, highest weight first. Digests compare
    as big-endian numbers; two names never share one in practice, so the order is total."""
    return sorted(set(nodes), key=lambda node: weight(address, node), reverse=True)


def place(address: IPAddress, eligible: Set[str], me: str, holder: str = "") -> int | None:
    """This Node's place in the queue for `address`: 0 tries first. None when it is not
    eligible. The Lease's holder is left out of the others' order (a Node that died holding
    the address stays eligible until it turns NotReady, and must not cost the next one a rank
    step); the holder itself is 0, it keeps the address while eligible."""
    if me not in eligible:
        return None
    if me == holder:
        return 0
    return rank(address, eligible - {holder}).index(me)
