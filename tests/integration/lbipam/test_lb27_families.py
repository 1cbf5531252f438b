"""LB27: a Service's IP families and the addresses it asks for, on a real apiserver.

LB27 a requested address of a family the Service does not have (`spec.ipFamilies`) is
refused: kube-proxy ignores a load-balancer ingress IP of another family than the Service's,
so it would show as EXTERNAL-IP and never carry traffic; a RequireDualStack Service must ask
for both families.
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb

# a class of the test's own: the controllers of other tests running beside it serve the
# classless Services
CLASS = "example.com/lb27"


def test_lb27_a_requested_address_of_another_family_than_the_services_is_refused(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/29", "fd00:18:27::/125"])
    start_lb("--lb-classless=false", f"--lb-class={CLASS}")
    space.service(
        "four",
        loadBalancerClass=CLASS,
        ipFamilies=["IPv4"],
        annotations={"lb.local-ccm.io/ips": "fd00:18:27::3"},
    )
    cond = lb.refused(space, "four", "ConflictingRequests")
    assert "fd00:18:27::3 is IPv6, a family spec.ipFamilies (IPv4) does not list" in cond["message"]
    assert lb.ips(space.get("four")) == []
    assert "ConflictingRequests" in [e["reason"] for e in space.events("four")]
    # held, then asked for an address of the other family: the held one stays
    space.service("moving", loadBalancerClass=CLASS, ipFamilies=["IPv4"])
    assert lb.allocated(space, "moving") == [f"{net}.1"]
    patch = {"metadata": {"annotations": {"lb.local-ccm.io/ips": "fd00:18:27::4"}}}
    kube.patch(SERVICES, "moving", patch, namespace=space.name, patch_type="merge")
    lb.refused(space, "moving", "ConflictingRequests")
    assert lb.ips(space.get("moving")) == [f"{net}.1"]
    space.service("both", loadBalancerClass=CLASS, ipFamilyPolicy="RequireDualStack",
                  ipFamilies=["IPv4", "IPv6"],
                  annotations={"lb.local-ccm.io/ips": f"{net}.6"})  # fmt: skip
    cond = lb.refused(space, "both", "ConflictingRequests")
    assert "no IPv6 address" in cond["message"]
    patch = {"metadata": {"annotations": {"lb.local-ccm.io/ips": f"{net}.6,fd00:18:27::6"}}}
    kube.patch(SERVICES, "both", patch, namespace=space.name, patch_type="merge")
    assert lb.allocated(space, "both", 2) == [f"{net}.6", "fd00:18:27::6"]
