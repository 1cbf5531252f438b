"""What a `type: LoadBalancer` Service asks of the address pools, read from its dict.

Pure, no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from local_ccm.lbipam.core.pools import AddressRange, IPAddress, unusable
from local_ccm.lbpools import named_pool
from local_ccm.records import dataclass

ADDRESS_ANNOTATIONS = (
    "lb.local-ccm.io/ips",
    "metallb.io/loadBalancerIPs",
    "metallb.universe.tf/loadBalancerIPs",
    "kube-vip.io/loadbalancerIPs",
)
"""Requested-address annotations, first present wins; `spec.loadBalancerIP` comes last."""
KUBEVIP_ANNOTATION = "kube-vip.io/loadbalancerIPs"
"""kube-vip announces a Service's addresses only once this annotation (or the deprecated
`spec.loadBalancerIP`) names them: with `--lb-kubevip-annotation` the controller writes it, and
then reads it back as an echo of the allocation, not as a request."""
SHARING_ANNOTATIONS = (
    "lb.local-ccm.io/sharing-key",
    "metallb.io/allow-shared-ip",
    "metallb.universe.tf/allow-shared-ip",
)
FAMILY_VERSIONS = {"IPv4": 4, "IPv6": 6}

Port = tuple[str, int]  # (protocol, port)


@dataclass(frozen=True)
class ServiceRequest:
    """The parts of a Service the allocator reads. `key` is `namespace/name`."""

    key: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    families: tuple[int, ...] = (4,)
    family_policy: str = "SingleStack"
    requested: tuple[IPAddress, ...] = ()
    sharing_key: str | None = None
    pool: str | None = None  # POOL_ANNOTATIONS: only this pool, when it selects the Service
    ports: frozenset[Port] = frozenset()
    current: tuple[IPAddress, ...] = ()
    problems: tuple[str, ...] = ()


def _addresses(text: str, where: str, problems: list[str]) -> tuple[IPAddress, ...]:
    found = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            address = ipaddress.ip_address(part)
        except ValueError:
            problems.append(f"{where}: {part!r} is not an IP address")
            continue
        span = AddressRange(address.version, int(address), int(address))
        problem = unusable(part, span)
        if problem is not None:
            problems.append(f"{where}: {problem}")
        else:
            found.append(address)
    return tuple(dict.fromkeys(found))


def _echo(annotations: Mapping[str, str], current: tuple[IPAddress, ...]) -> bool:
    """The kube-vip annotation names exactly the addresses the Service holds, as the
    controller writes it with `--lb-kubevip-annotation`: what it has, not what it asks."""
    text = annotations.get(KUBEVIP_ANNOTATION)
    return bool(current) and text is not None and set(_addresses(text, "", [])) == set(current)


def _beside_kubevip(annotations: Mapping[str, str], value: object) -> bool:
    """`spec.loadBalancerIP` is one of the kube-vip annotation's addresses: what
    kube-vip-cloud-provider writes beside the annotation (its first address, for older
    kube-vips), so the annotation alone says what the Service asks for or holds. Read as a
    request of its own it would drop a dual-stack Service's other address."""
    text = annotations.get(KUBEVIP_ANNOTATION)
    if text is None:
        return False
    try:
        return ipaddress.ip_address(str(value).strip()) in _addresses(text, "", [])
    except ValueError:
        return False


def _requested(
    annotations: Mapping[str, str],
    spec: Mapping[str, Any],
    problems: list[str],
    current: tuple[IPAddress, ...] = (),
    *,
    kubevip_written: bool = False,
) -> tuple[IPAddress, ...]:
    echo = kubevip_written and _echo(annotations, current)
    sources = [(f"annotation {k}", annotations[k]) for k in ADDRESS_ANNOTATIONS
               if k in annotations and not (echo and k == KUBEVIP_ANNOTATION)]  # fmt: skip
    if spec.get("loadBalancerIP") and not _beside_kubevip(annotations, spec["loadBalancerIP"]):
        sources.append(("spec.loadBalancerIP", str(spec["loadBalancerIP"])))
    if not sources:
        return ()
    parsed = [(where, _addresses(text, where, problems)) for where, text in sources]
    first_where, first = parsed[0]
    for where, other in parsed[1:]:
        if set(other) != set(first):
            problems.append(f"{where} asks for other addresses than {first_where}")
    problems += (f"{first_where}: {p}" for p in _outside_families(first, spec))
    return first


def _outside_families(requested: tuple[IPAddress, ...], spec: Mapping[str, Any]) -> list[str]:
    """A requested address of a family `spec.ipFamilies` does not list is dead: kube-proxy
    ignores a Service's load-balancer ingress IPs of another family than its own (its service
    change tracker drops them), so the address would show and never carry traffic. With
    `RequireDualStack` a request must name both families, as MetalLB requires. Without
    `spec.ipFamilies` (the API server always fills it) nothing is checked."""
    listed = [FAMILY_VERSIONS[f] for f in spec.get("ipFamilies") or () if f in FAMILY_VERSIONS]
    if not requested or not listed:
        return []
    names = ", ".join(f"IPv{v}" for v in listed)
    found = [f"{a} is IPv{a.version}, a family spec.ipFamilies ({names}) does not list"
             for a in requested if a.version not in listed]  # fmt: skip
    missing = [v for v in listed if v not in {a.version for a in requested}]
    if not found and spec.get("ipFamilyPolicy") == "RequireDualStack" and missing:
        found.append(f"RequireDualStack needs an address of each family and the request names"
                     f" no IPv{missing[0]} address")  # fmt: skip
    return found


def _sharing_key(annotations: Mapping[str, str], problems: list[str]) -> str | None:
    keys = {k: annotations[k].strip() for k in SHARING_ANNOTATIONS if annotations.get(k)}
    if len(set(keys.values())) > 1:
        problems.append("the sharing-key annotations disagree: " + ", ".join(sorted(keys)))
    return next(iter(keys.values()), None)


def _pool(annotations: Mapping[str, str], problems: list[str]) -> str | None:
    name, disagree = named_pool(annotations)
    problems += disagree
    return name


def _ports(spec: Mapping[str, Any]) -> frozenset[Port]:
    return frozenset(
        (str(p.get("protocol") or "TCP"), int(p["port"]))
        for p in spec.get("ports") or []
        if isinstance(p, Mapping) and isinstance(p.get("port"), int)
    )


def current_addresses(obj: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    """The IP addresses `status.loadBalancer.ingress` shows (`ServiceRequest.current`)."""
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    found: list[IPAddress] = []
    for entry in ingress:
        try:
            found.append(ipaddress.ip_address(str((entry or {}).get("ip", ""))))
        except ValueError:
            continue  # hostname entries and garbage are not ours to keep
    return tuple(found)


def parse_service(obj: Mapping[str, Any], *, kubevip_written: bool = False) -> ServiceRequest:
    """Everything the allocator needs of one Service; problems collected, never raised.

    `kubevip_written`: the controller writes the kube-vip annotation (`--lb-kubevip-annotation`),
    so one naming exactly what the Service holds is its own echo, not a request. Otherwise the
    annotation is always a request (the user's, or kube-vip-cloud-provider's record of what
    it gave, which asks for what the Service holds): read as an echo, a decision that keeps
    fewer addresses than it names (a SingleStack Service, two addresses named) turned it back
    into a request for all of them at the next sync, and the status flipped between the two
    for ever."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    problems: list[str] = []
    namespace = str(metadata.get("namespace") or "default")
    families = tuple(
        FAMILY_VERSIONS[f] for f in spec.get("ipFamilies") or ["IPv4"] if f in FAMILY_VERSIONS
    )
    current = current_addresses(obj)
    requested = _requested(annotations, spec, problems, current, kubevip_written=kubevip_written)
    return ServiceRequest(
        key=f"{namespace}/{metadata.get('name', '')}",
        namespace=namespace,
        labels=dict(metadata.get("labels") or {}),
        families=families or (4,),
        family_policy=str(spec.get("ipFamilyPolicy") or "SingleStack"),
        requested=requested,
        sharing_key=_sharing_key(annotations, problems),
        pool=_pool(annotations, problems),
        ports=_ports(spec),
        current=current,
        problems=tuple(problems),
    )


def wanted_families(request: ServiceRequest, servable: Sequence[int]) -> tuple[int, ...] | str:
    """The families to give an address of, or the problem. `servable`: the families some
    selecting pool has. Requested addresses decide the families themselves (see allocator)."""
    listed = request.families
    if request.family_policy == "RequireDualStack":
        missing = [v for v in (4, 6) if v not in servable]
        if missing:
            return f"RequireDualStack needs IPv{missing[0]} and no selecting pool has it"
        return tuple(dict.fromkeys((*listed, 4, 6)))
    if request.family_policy == "PreferDualStack":
        usable = tuple(v for v in listed if v in servable)
        return usable or f"no selecting pool serves {_names(listed)}"
    first = listed[0]
    return (first,) if first in servable else f"no selecting pool serves IPv{first}"


def _names(versions: Sequence[int]) -> str:
    return " or ".join(f"IPv{v}" for v in versions)
