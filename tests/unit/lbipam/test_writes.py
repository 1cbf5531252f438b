"""The controller's write decisions for a Service (pure)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from local_ccm.flags import FlagSet, parse
from local_ccm.lbipam.core import writes
from local_ccm.lbipam.core.allocator import Allocation, Placement, Problem
from local_ccm.lbipam.core.ledger import Holder
from local_ccm.lbipam.core.model import created, project_service
from local_ccm.lbipam.options import FLAGS, NAME, Settings, settings_from

TABLE = FlagSet(NAME, list(FLAGS), version="0")
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"


def svc(**spec: Any) -> dict[str, Any]:
    meta = {"name": "s", "namespace": "n", "resourceVersion": "7", **spec.pop("meta", {})}
    return {"metadata": meta, "spec": {"type": "LoadBalancer", **spec},
            "status": spec.pop("status", {"loadBalancer": {}})}  # fmt: skip


def allocation(*ips: str) -> Allocation:
    holder = Holder("n/s", None, frozenset())
    return Allocation(tuple(Placement(ipaddress.ip_address(i), "p", holder) for i in ips))


def test_step_follows_class_type_and_deletion() -> None:
    def step(obj: dict[str, Any] | None, classless: bool = True) -> str:
        return writes.step(obj, "x.io/lb", classless=classless)

    assert step(svc()) == "allocate"
    assert step(svc(), classless=False) == "forget"
    assert step(svc(loadBalancerClass="x.io/lb"), classless=False) == "allocate"
    assert step(svc(loadBalancerClass="other.io/lb")) == "forget"
    assert step(None) == "forget"
    assert step(svc(type="ClusterIP")) == "forget"


def shown(reason: str = "Allocated", **spec: Any) -> dict[str, Any]:
    """A Service showing our condition with `reason` (and an address unless released)."""
    ingress = [] if reason == "Released" else [{"ip": "10.0.0.1", "ipMode": "VIP"}]
    cond = {"type": writes.CONDITION, "status": "True", "reason": reason}
    return svc(status={"loadBalancer": {"ingress": ingress}, "conditions": [cond]}, **spec)


def test_a_service_being_deleted_is_left_alone_unless_it_carries_the_old_finalizer() -> None:
    """No finalizer of ours, nothing to write: its addresses go with its DELETED event. The
    finalizer an earlier release added is removed, so the deletion is not held."""
    deleting = {"deletionTimestamp": NOW, "finalizers": ["other.io/hold"]}
    assert writes.step(shown(meta=deleting), "x.io/lb", classless=True) == "forget"
    legacy = {"deletionTimestamp": NOW, "finalizers": ["other.io/hold", writes.FINALIZER]}
    assert writes.step(shown(meta=legacy), "x.io/lb", classless=True) == "cleanup"
    assert writes.step(svc(meta=legacy), "x.io/lb", classless=True) == "cleanup"


def test_a_former_load_balancer_of_ours_is_cleaned_up_even_with_its_class_cleared() -> None:
    """The apiserver clears the class with the type, never our condition: what we wrote marks it
    as ours, once; a released one, another class's or a never-served one is not touched."""
    for classless in (True, False):
        former = shown(type="ClusterIP")
        assert writes.step(former, "x.io/lb", classless=classless) == "cleanup"
        assert writes.may_hold(former, "x.io/lb", classless=classless)
        released = shown("Released", type="ClusterIP")
        assert writes.step(released, "x.io/lb", classless=classless) == "forget"
        assert not writes.may_hold(released, "x.io/lb", classless=classless)
    theirs = svc(loadBalancerClass="other.io/lb",
                 status={"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}})  # fmt: skip
    assert writes.step(theirs, "x.io/lb", classless=True) == "forget"
    assert not writes.may_hold(theirs, "x.io/lb", classless=True)
    legacy = svc(type="ClusterIP", meta={"finalizers": [writes.FINALIZER]})
    assert writes.step(legacy, "x.io/lb", classless=True) == "cleanup"
    assert writes.may_hold(legacy, "x.io/lb", classless=True)


def test_finalizer_patch_removes_only_ours_and_is_guarded() -> None:
    assert writes.finalizer_patch(svc(meta={"finalizers": ["a/b"]})) is None
    assert writes.finalizer_patch(svc()) is None
    both = svc(meta={"finalizers": ["a/b", writes.FINALIZER]})
    removed = writes.finalizer_patch(both)
    assert removed is not None
    assert removed[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert removed[1] == {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]}


def test_status_patch_writes_ingress_and_condition_once() -> None:
    obj = svc(status={"loadBalancer": {}, "conditions": [{"type": "Other", "status": "True"}]})
    cond = writes.condition(allocation("10.0.0.1", "fd00::1"), 0, NOW)
    patch = writes.status_patch(
        obj, writes.ingress(allocation("10.0.0.1", "fd00::1").addresses), cond
    )
    assert patch is not None
    status = patch[1]["value"]
    assert status["loadBalancer"]["ingress"] == [
        {"ip": "10.0.0.1", "ipMode": "VIP"}, {"ip": "fd00::1", "ipMode": "VIP"}
    ]  # fmt: skip
    assert [c["type"] for c in status["conditions"]] == ["Other", writes.CONDITION]
    assert "observedGeneration" not in status["conditions"][1]
    written = {**obj, "status": status}
    same = writes.condition(allocation("10.0.0.1", "fd00::1"), 0, LATER)
    assert writes.status_patch(written, writes.ingress(allocation("10.0.0.1", "fd00::1").addresses),
                             same) is None  # fmt: skip


def test_a_problem_keeps_the_ingress_and_the_transition_time_when_unchanged() -> None:
    problem = writes.condition(Problem("NoPool", "a"), 0, NOW)
    held = svc(status={"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "VIP"}]},
                       "conditions": [problem]})  # fmt: skip
    patch = writes.status_patch(held, None, writes.condition(Problem("NoPool", "b"), 0, LATER))
    assert patch is not None
    status = patch[1]["value"]
    assert status["loadBalancer"]["ingress"] == [{"ip": "10.0.0.1", "ipMode": "VIP"}]
    assert status["conditions"][0]["lastTransitionTime"] == NOW  # still False
    assert status["conditions"][0]["message"] == "b"


def test_released_clears_the_ingress() -> None:
    held = svc(status={"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}})
    patch = writes.status_patch(held, [], writes.condition(None, 0, NOW))
    assert patch is not None
    assert patch[1]["value"]["loadBalancer"] == {}
    assert patch[1]["value"]["conditions"][0]["reason"] == "Released"


def test_created_orders_recorded_allocations_before_hand_edits_within_a_second() -> None:
    recorded = writes.condition(allocation("10.0.0.1"), 0, NOW)
    mine = svc(meta={"creationTimestamp": NOW, "uid": "z"},
               status={"conditions": [recorded]})  # fmt: skip
    edited = svc(meta={"creationTimestamp": NOW, "uid": "a"})
    older = svc(meta={"creationTimestamp": "2025-01-01T00:00:00Z", "uid": "q"})
    assert sorted([edited, mine, older], key=created) == [older, mine, edited]


def test_options_list_every_problem() -> None:
    argv = ["--lb-class=nope", "--lb-kubevip-configmap=x", "--lb-service-cidrs=10.0.0.1/8,zz"]
    parsed = parse(TABLE, argv, {})
    problems = settings_from(parsed)
    assert isinstance(problems, list)
    assert [p.flag for p in problems] == [
        "lb-class", "lb-kubevip-configmap", "lb-service-cidrs", "lb-service-cidrs"
    ]  # fmt: skip
    ok = settings_from(parse(TABLE, ["--lb-kubevip-configmap=", "--lb-classless=false"], {}))
    assert ok == Settings(classless=False, kubevip=None)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("lb-class", "EXAMPLE.com/lb"), ("lb-class", "example.com/"), ("lb-class", "/lb"),
     ("lb-class", "example.com/-lb"), ("lb-class", "ex ample.com/lb"), ("lb-class", "a/b/c"),
     ("lb-kubevip-configmap", "Bad_/x"), ("lb-kubevip-configmap", "kube-system/Bad_Name")],
)  # fmt: skip
def test_a_class_or_configmap_the_api_server_would_refuse_is_a_problem(
    flag: str, value: str
) -> None:
    """A class no Service can carry (a label-style key with a domain prefix), a namespace or
    name no object can have: the controller would wait for ever for what cannot exist."""
    problems = settings_from(parse(TABLE, [f"--{flag}={value}"], {}))
    assert isinstance(problems, list)
    assert [p.flag for p in problems] == [flag]


def test_annotation_patch_sets_removes_and_leaves_alone() -> None:
    obj = svc(meta={"annotations": {"a": "1"}})
    patch = writes.annotation_patch(obj, "kube-vip.io/loadbalancerIPs", "10.0.0.1")
    assert patch is not None
    assert patch[1]["value"] == {"a": "1", "kube-vip.io/loadbalancerIPs": "10.0.0.1"}
    written = svc(meta={"annotations": patch[1]["value"]})
    assert writes.annotation_patch(written, "kube-vip.io/loadbalancerIPs", "10.0.0.1") is None
    removed = writes.annotation_patch(written, "kube-vip.io/loadbalancerIPs", None)
    assert removed is not None
    assert removed[1]["value"] == {"a": "1"}
    assert writes.annotation_patch(svc(), "x", None) is None


def test_an_announcer_adding_ports_or_reordering_is_not_overwritten() -> None:
    cond = writes.condition(allocation("10.0.0.1", "fd00::1"), 0, NOW)
    announced = [{"ip": "fd00::1", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
                 {"ip": "10.0.0.1", "ipMode": "VIP"}]  # fmt: skip
    obj = svc(status={"loadBalancer": {"ingress": announced}, "conditions": [cond]})
    entries = writes.ingress(allocation("10.0.0.1", "fd00::1").addresses)
    assert writes.status_patch(obj, entries, cond) is None
    moved = writes.ingress(allocation("10.0.0.2", "fd00::1").addresses)
    patch = writes.status_patch(
        obj, moved, writes.condition(allocation("10.0.0.2", "fd00::1"), 0, NOW)
    )
    assert patch is not None
    assert patch[1]["value"]["loadBalancer"]["ingress"] == [
        {"ip": "10.0.0.2", "ipMode": "VIP"},
        {"ip": "fd00::1", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
    ]
    proxied = svc(status={"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "ipMode": "Proxy"}]}})
    assert writes.status_patch(proxied, writes.ingress(allocation("10.0.0.1").addresses), cond)


def test_the_kept_service_drops_only_managed_fields() -> None:
    obj = svc(meta={"managedFields": [{"manager": "kubectl"}], "annotations": {"a": "1"}})
    kept = project_service(obj)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"a": "1"}
    assert (kept["spec"], kept["status"]) == (obj["spec"], obj["status"])
    assert "managedFields" in obj["metadata"]  # the listed object is not changed
