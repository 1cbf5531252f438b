"""LB28: a PreferDualStack Service given one family while the other family's pools were full
gets the other once an address of it is released, on a real apiserver, as a Service waiting on
a problem does (without it, only a pool change or a restart brought it); until then its
condition says which family it lacks."""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

# a class of the test's own: the controllers of other tests running beside it serve the
# classless Services
CLASS = "example.com/lb28"


def test_lb28_a_prefer_dual_stack_service_short_of_a_family_gets_it_on_a_release(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    pool = space.pool([f"{net}.0/29", "fd00:18:28::5/128"])
    start_lb("--lb-classless=false", f"--lb-class={CLASS}")
    space.service(
        "first",
        loadBalancerClass=CLASS,
        ipFamilyPolicy="PreferDualStack",
        ipFamilies=["IPv4", "IPv6"],
    )
    assert lb.allocated(space, "first", 2) == [f"{net}.1", "fd00:18:28::5"]
    space.service(
        "second",
        loadBalancerClass=CLASS,
        ipFamilyPolicy="PreferDualStack",
        ipFamilies=["IPv4", "IPv6"],
    )
    assert lb.allocated(space, "second") == [f"{net}.2"]
    cond = lb.condition(space.get("second")) or {}
    assert (cond.get("status"), cond.get("reason")) == ("True", "Allocated")
    assert f"no free IPv6 address in {pool}" in str(cond.get("message"))
    kube.delete(SERVICES, "first", namespace=space.name)
    eventually(
        lambda: lb.ips(space.get("second")) == [f"{net}.2", "fd00:18:28::5"],
        timeout=lb.SETTLE,
        message="second gets the IPv6 address first released",
    )
    cond = lb.condition(space.get("second")) or {}
    assert "no free" not in str(cond.get("message"))
    messages = [e["message"] for e in space.events("second") if e["reason"] == "AddressAllocated"]
    assert f"allocated {net}.2, fd00:18:28::5" in messages
