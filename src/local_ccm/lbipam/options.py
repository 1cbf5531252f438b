"""service-lb-ipam's own flags and settings. Pure, no I/O."""

from __future__ import annotations

import ipaddress
from typing import Final

from local_ccm.flags import Flag, Parsed, Problem
from local_ccm.labels import load_balancer_class
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, dns1123_label, dns1123_subdomain

NAME: Final = "service-lb-ipam"
DEFAULT_CLASS: Final = "lb.local-ccm.io/pools"
CLASS_FLAG, CLASSLESS_FLAG = "lb-class", "lb-classless"
KUBEVIP_FLAG, SERVICE_CIDRS_FLAG = "lb-kubevip-configmap", "lb-service-cidrs"
ANNOTATE_FLAG = "lb-kubevip-annotation"
FLAGS: Final = (
    Flag(CLASS_FLAG, "string", DEFAULT_CLASS, "service-lb-ipam: the spec.loadBalancerClass "
         "whose Services get addresses from the pools.", metavar="class", env=("LB_CLASS",)),
    Flag(CLASSLESS_FLAG, "bool", True, "service-lb-ipam: also serve LoadBalancer Services "
         "without a loadBalancerClass; false when another load balancer serves those.",
         env=("LB_CLASSLESS",)),
    Flag(KUBEVIP_FLAG, "string", "kube-system/kubevip", "service-lb-ipam: the "
         "kube-vip-cloud-provider ConfigMap (namespace/name) read as pools when it exists; "
         "empty turns it off.", metavar="namespace/name", env=("LB_KUBEVIP_CONFIGMAP",)),
    Flag(ANNOTATE_FLAG, "bool", False, "service-lb-ipam: also write the addresses to the "
         "annotation kube-vip.io/loadbalancerIPs, which kube-vip reads to announce them.",
         env=("LB_KUBEVIP_ANNOTATION",)),
    Flag(SERVICE_CIDRS_FLAG, "string", "", "service-lb-ipam: the cluster's Service CIDRs "
         "(comma list, as kube-apiserver's --service-cluster-ip-range), reported as a pool "
         "Conflict when a pool overlaps them and never given to a Service.", metavar="cidrs",
         env=("LB_SERVICE_CIDRS",)),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    lb_class: str = DEFAULT_CLASS  # --lb-class
    classless: bool = True  # --lb-classless
    kubevip: tuple[str, str] | None = ("kube-system", "kubevip")  # --lb-kubevip-configmap
    service_cidrs: tuple[str, ...] = ()  # --lb-service-cidrs
    kubevip_annotation: bool = False  # --lb-kubevip-annotation
    event_namespace: str = "default"  # Events about pools (cluster-scoped) live there
    instance: str = NAME
    backoff: tuple[float, float] = (0.5, 30.0)  # first and longest retry delay of a write
    status_every: float = 1.0  # pool status writes: at most once per this many seconds
    # Services synced at once (the kit's workers): finalizer removals of Services being deleted
    # and status writes overlap, address decisions still go one at a time (docs/design.md)
    workers: int = 16


def settings_from(parsed: Parsed) -> Settings | list[Problem]:
    """The flags above read and checked; every problem listed."""
    problems: list[Problem] = []
    lb_class = parsed.get_str(CLASS_FLAG).strip()
    try:
        load_balancer_class(lb_class)
    except ValidationError as exc:
        problems.append(Problem(CLASS_FLAG, str(exc)))
    where = parsed.get_str(KUBEVIP_FLAG).strip()
    namespace, _, name = where.partition("/")
    if where and not (namespace and name and "/" not in name):
        problems.append(Problem(KUBEVIP_FLAG, f"{where!r} is not namespace/name"))
    elif where:
        for check, part in ((dns1123_label, namespace), (dns1123_subdomain, name)):
            try:
                check(part)
            except ValidationError as exc:
                problems.append(Problem(KUBEVIP_FLAG, str(exc)))
    cidrs = tuple(c.strip() for c in parsed.get_str(SERVICE_CIDRS_FLAG).split(",") if c.strip())
    for cidr in cidrs:
        try:
            ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            problems.append(Problem(SERVICE_CIDRS_FLAG, f"{cidr!r} is not a CIDR: {exc}"))
    if problems:
        return problems
    return Settings(
        lb_class=lb_class,
        classless=parsed.get_bool(CLASSLESS_FLAG),
        kubevip=(namespace, name) if where else None,
        service_cidrs=cidrs,
        kubevip_annotation=parsed.get_bool(ANNOTATE_FLAG),
    )
