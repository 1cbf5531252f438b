"""What the agents announce: each LoadBalancer address of a pool with ``spec.l2Announcement``,
with the pool's Node selector and interface globs, and the traffic of the Services behind it.
Pure, no I/O.

The pools are `LoadBalancerIPPool` objects as `local_ccm.lbpools.parse_pool` reads them (the
allocator's own parser: parse once per change of a pool, as an informer projection); the
Services are the objects as read. An address belongs to the pool the allocator places it in
(`service-lb-ipam`'s `decide` keeps a held address in the first pool, in `lbpools.ordered`
order, that contains it and selects the Service, else in the first that contains it), so both
sides read the same pool when pools overlap. A disabled pool still announces: its Services keep
their addresses. An invalid pool is no pool, as for the allocator.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

from local_ccm.announce.core.choice import IPAddress, Traffic, shared
from local_ccm.labels import LabelSelector
from local_ccm.lbpools import (
    InvalidPool,
    L2Announcement,
    Pool,
    home_pool,
    named_pool,
    ordered,
    selecting_pools,
)
from local_ccm.records import dataclass


@dataclass(frozen=True)
class Target:
    """One address to announce: its pool's L2 settings and the Services that hold it.

    `node_selector` None: every Node; `interfaces` empty: on each Node, the interfaces on the
    address's prefix (`interfaces.desired_interfaces`). `traffic` is `choice.shared` of the
    Services' own, the input of `choice.eligible`.
    """

    address: IPAddress
    pool: str
    node_selector: LabelSelector | None
    interfaces: tuple[str, ...]
    services: tuple[str, ...]  # "namespace/name", sorted
    traffic: Traffic


@dataclass(frozen=True)
class _Holding:
    """One Service's hold on one address, placed in a pool that announces it."""

    pool: Pool
    settings: L2Announcement
    service: str
    traffic: Traffic


def desired_targets(
    pools: Iterable[Pool | InvalidPool],
    services: Iterable[Mapping[str, Any]],
    endpoints: Mapping[str, Set[str]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    *,
    lb_class: str,
    classless: bool,
) -> dict[IPAddress, Target]:
    """Every address to announce, with what decides who may announce it.

    `endpoints`: per Service key ("namespace/name"), the Nodes with a ready endpoint
    (`choice.endpoint_nodes` of its EndpointSlices); read only for `externalTrafficPolicy:
    Local`. `namespace_labels`: per namespace, its labels, for the pools' namespace selectors
    (they only matter where pools overlap). `lb_class`, `classless`: the Services the
    allocator serves (its `--lb-class`, `--lb-classless`).
    """
    every = ordered(p for p in pools if isinstance(p, Pool))
    if not any(p.l2_announcement is not None for p in every):
        return {}
    found: dict[IPAddress, list[_Holding]] = {}
    for obj in services:
        if not _served(obj, lb_class, classless=classless):
            continue
        key, namespace, labels = _identity(obj)
        space = namespace_labels.get(namespace) or {}
        named, _ = named_pool((obj.get("metadata") or {}).get("annotations") or {})
        selecting = selecting_pools(every, labels, namespace, space, named)  # as the allocator
        traffic = _traffic(obj, endpoints.get(key, frozenset()))
        for address in ingress_addresses(obj):
            pool = home_pool(address, selecting, every)
            if pool is not None and pool.l2_announcement is not None:
                holding = _Holding(pool, pool.l2_announcement, key, traffic)
                found.setdefault(address, []).append(holding)
    return {address: _target(address, held, every) for address, held in found.items()}


def _target(address: IPAddress, held: Sequence[_Holding], every: Sequence[Pool]) -> Target:
    """Services sharing an address are placed alike unless their selectors differ where pools
    overlap: then the pool first in order speaks for the address."""
    first = min(held, key=lambda h: every.index(h.pool))
    return Target(
        address=address,
        pool=first.pool.name,
        node_selector=first.settings.node_selector,
        interfaces=first.settings.interfaces,
        services=tuple(sorted({h.service for h in held})),
        traffic=shared(h.traffic for h in held),
    )


def _served(obj: Mapping[str, Any], lb_class: str, *, classless: bool) -> bool:
    """A LoadBalancer Service of the allocator's class (the API server clears the class of a
    Service that stops being a LoadBalancer)."""
    spec = obj.get("spec") or {}
    given = spec.get("loadBalancerClass")
    return spec.get("type") == "LoadBalancer" and (
        given == lb_class or (given is None and classless)
    )


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, Mapping[str, str]]:
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    return f"{namespace}/{meta.get('name', '')}", namespace, meta.get("labels") or {}


def _traffic(obj: Mapping[str, Any], endpoint_nodes: Set[str]) -> Traffic:
    if (obj.get("spec") or {}).get("externalTrafficPolicy") != "Local":
        return Traffic()
    return Traffic(local=True, endpoint_nodes=frozenset(endpoint_nodes))


def ingress_addresses(obj: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    """The addresses of `status.loadBalancer.ingress[].ip`, in order, each once; an entry that
    is not an IP address (a hostname, a typo written by hand) is left out."""
    balancer = (obj.get("status") or {}).get("loadBalancer") or {}
    found: dict[IPAddress, None] = {}
    for entry in balancer.get("ingress") or ():
        try:
            found[ipaddress.ip_address(str(entry.get("ip")))] = None
        except (AttributeError, ValueError):  # not an object, or no IP address in it
            continue
    return tuple(found)


def selected_nodes(
    selector: LabelSelector | None, node_labels: Mapping[str, Mapping[str, str]]
) -> frozenset[str] | None:
    """The Nodes a target's selector matches, from each Node's labels by name: the `selected`
    argument of `choice.eligible` (None: no selector, every Node)."""
    if selector is None:
        return None
    return frozenset(name for name, labels in node_labels.items() if selector.matches(labels))
