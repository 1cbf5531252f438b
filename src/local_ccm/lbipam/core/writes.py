"""What the controller writes on a Service and on a pool, decided from the objects as read.

Pure, no I/O. Every Service write is a JSON Patch guarded by the object's resourceVersion, so
a write decided from a stale read fails (and is re-decided) instead of overwriting a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from local_ccm.lbipam.core.allocator import OUTSIDE_POOLS, Allocation, Decision
from local_ccm.lbipam.core.pools import IPAddress

Obj = dict[str, Any]
# The cloud service controller's finalizer. Earlier releases added it to every Service they
# served; this one adds none (an address is released at the Service's DELETED event, and the
# ledger is rebuilt from live Services, so nothing needs to hold a deletion) and removes it
# from every Service of ours it finds it on.
FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"
CONDITION: Final = "lb.local-ccm.io/Allocated"
Step = Literal["allocate", "cleanup", "forget"]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def has_finalizer(obj: Mapping[str, Any]) -> bool:
    return FINALIZER in (_meta(obj).get("finalizers") or ())


def class_matches(obj: Mapping[str, Any], lb_class: str, *, classless: bool) -> bool:
    """Whether the Service's class is ours. The apiserver clears the class when the type
    changes away from LoadBalancer, so a former LoadBalancer Service reads as classless."""
    given = (obj.get("spec") or {}).get("loadBalancerClass")
    return given == lb_class or (given is None and classless)


def shows_ours(obj: Mapping[str, Any]) -> bool:
    """Whether the Service still shows what this controller wrote: its condition, other than
    `Released`. A type change clears the class, and may clear the ingress, never our
    condition: this is how a former LoadBalancer Service of ours is still known as ours."""
    conditions = (obj.get("status") or {}).get("conditions") or ()
    ours = next((c for c in conditions if c.get("type") == CONDITION), None)
    return ours is not None and ours.get("reason") != "Released"


def step(obj: Mapping[str, Any] | None, lb_class: str, *, classless: bool) -> Step:
    """`allocate` a LoadBalancer Service of our class that is not being deleted; `cleanup` a
    Service of ours that still carries the finalizer earlier releases wrote, or that is no
    longer a LoadBalancer but still shows what we wrote; otherwise `forget` it (a deleted
    one is forgotten only once it is gone: see `run`)."""
    if obj is None:
        return "forget"
    balancer = (obj.get("spec") or {}).get("type") == "LoadBalancer"
    mine = class_matches(obj, lb_class, classless=classless)
    shown, gone = shows_ours(obj), deleting(obj)
    if mine and balancer and not gone:
        return "allocate"
    if (mine or (shown and not balancer)) and (has_finalizer(obj) or (shown and not gone)):
        return "cleanup"
    return "forget"


def may_hold(obj: Mapping[str, Any], lb_class: str, *, classless: bool) -> bool:
    """Whether the Service may hold addresses of ours when the ledger is rebuilt: one of our
    class (or a former LoadBalancer of ours) that shows addresses or carries the finalizer."""
    mine = class_matches(obj, lb_class, classless=classless) or shows_ours(obj)
    return mine and (has_finalizer(obj) or bool(current_ips(obj)))


def _guard(obj: Mapping[str, Any]) -> Obj:
    return {"op": "test", "path": "/metadata/resourceVersion", "value": version(obj)}


def finalizer_patch(obj: Mapping[str, Any]) -> list[Obj] | None:
    """The JSON Patch that removes our finalizer, others kept; None when it is not there."""
    found = _meta(obj).get("finalizers") or ()
    if FINALIZER not in found:
        return None
    others = [f for f in found if f != FINALIZER]
    return [_guard(obj), {"op": "add", "path": "/metadata/finalizers", "value": others}]


def ingress(addresses: Sequence[IPAddress]) -> list[Obj]:
    """`status.loadBalancer.ingress`: one entry per address, `ipMode: VIP` (traffic to the
    address reaches the node with the address still its destination, KEP-1860)."""
    return [{"ip": str(a), "ipMode": "VIP"} for a in addresses]


def condition(decision: Decision | None, generation: int, now: str) -> Obj:
    """Our Service condition (metav1.Condition) for a decision; None: released. An allocation
    that keeps an address outside every pool is still `True`, with its own reason."""
    if isinstance(decision, Allocation):
        status = "True"
        reason = OUTSIDE_POOLS if decision.outside else "Allocated"
        addresses = ", ".join(str(a) for a in decision.addresses)
        message = "; ".join((f"allocated {addresses}", *decision.notes, *decision.wanting))
    elif decision is None:
        status, reason, message = "False", "Released", "no address: released"
    else:
        status, reason, message = "False", decision.reason, decision.message
    found: Obj = {"type": CONDITION, "status": status, "reason": reason, "message": message[:32768],
             "lastTransitionTime": now}  # fmt: skip
    if generation:  # Services carry no generation today; 0 would be dropped (omitempty)
        found["observedGeneration"] = generation
    return found


def _merged(old: Sequence[Mapping[str, Any]], new: Obj) -> list[Obj]:
    """`old` conditions with ours replaced by `new`, its transition time kept if unchanged."""
    kept = [dict(c) for c in old if c.get("type") != CONDITION]
    before = next((c for c in old if c.get("type") == CONDITION), None)
    if before is not None and before.get("status") == new["status"]:
        new = {
            **new,
            "lastTransitionTime": before.get("lastTransitionTime", new["lastTransitionTime"]),
        }
    return [*kept, new]


def _same(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    ignore = ("lastTransitionTime",)
    return a is not None and {k: v for k, v in a.items() if k not in ignore} == {
        k: v for k, v in b.items() if k not in ignore
    }


def _same_ingress(before: Sequence[Mapping[str, Any]], entries: Sequence[Obj]) -> bool:
    """The same addresses, in VIP mode. Other fields (kube-vip adds `ports` when it announces)
    and the order are not ours to fight over."""
    ips = sorted(str(e.get("ip")) for e in before)
    modes = {e.get("ipMode", "VIP") for e in before}
    return ips == sorted(str(e["ip"]) for e in entries) and modes <= {"VIP"}


def status_patch(obj: Mapping[str, Any], entries: list[Obj] | None, cond: Obj) -> list[Obj] | None:
    """The JSON Patch that sets the ingress (`None`: leaves it) and our condition; None when
    the status already says that (no write)."""
    status = dict(obj.get("status") or {})
    balancer = dict(status.get("loadBalancer") or {})
    old_conditions = status.get("conditions") or []
    ours = next((c for c in old_conditions if c.get("type") == CONDITION), None)
    before = list(balancer.get("ingress") or [])
    same_ingress = entries is None or _same_ingress(before, entries)
    if same_ingress and _same(ours, cond):
        return None
    if entries is not None:
        by_ip = {e.get("ip"): e for e in before}
        balancer["ingress"] = [{**by_ip.get(e["ip"], {}), **e} for e in entries]
        if not entries:
            balancer.pop("ingress")
    status["loadBalancer"] = balancer
    status["conditions"] = _merged(old_conditions, cond)
    return [_guard(obj), {"op": "add", "path": "/status", "value": status}]


def current_ips(obj: Mapping[str, Any]) -> list[str]:
    balancer = (obj.get("status") or {}).get("loadBalancer") or {}
    return [str(e.get("ip")) for e in balancer.get("ingress") or () if e.get("ip")]


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def generation(obj: Mapping[str, Any]) -> int:
    return int(_meta(obj).get("generation") or 0)


def annotation_patch(obj: Mapping[str, Any], key: str, value: str | None) -> list[Obj] | None:
    """The JSON Patch that sets (or, with None, removes) one annotation; None when it already
    says that."""
    annotations = dict(_meta(obj).get("annotations") or {})
    if annotations.get(key) == value:
        return None
    if value is None:
        annotations.pop(key)
    else:
        annotations[key] = value
    return [_guard(obj), {"op": "add", "path": "/metadata/annotations", "value": annotations}]


def version(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("resourceVersion", ""))
