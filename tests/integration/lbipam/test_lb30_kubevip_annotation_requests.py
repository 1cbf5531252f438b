"""LB30: without `--lb-kubevip-annotation`, kube-vip's annotation is a request, even when it
names exactly what the Service holds, on a real apiserver. Read as an echo of the allocation,
an annotation naming two IPv4 addresses on a SingleStack Service left it with one, which the
annotation then asked back: the status flipped between one and two addresses hundreds of
times a second. So did a dual-stack Service kube-vip-cloud-provider served (its annotation
naming both addresses) made SingleStack: now the annotation's IPv6 address is refused, named,
and the status stays as it is.

A "probe" Service created afterwards is decided after the Service's own events (the
decisions are taken in the queue's order): once it has its address, a Service that would
flip has been written again. A class of the test's own: the controllers of other tests running
beside it (one with `--lb-kubevip-annotation`) serve the classless Services.
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb

KUBEVIP = "kube-vip.io/loadbalancerIPs"
CLASS = "example.com/lb30"


def version(space: lb.Space, name: str) -> str:
    return str(space.get(name)["metadata"]["resourceVersion"])


def test_lb30_a_kube_vip_annotation_naming_two_addresses_is_written_once(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/28", "fd00:18:30::/125"])
    start_lb("--lb-classless=false", f"--lb-class={CLASS}")
    space.service(
        "two",
        annotations={KUBEVIP: f"{net}.3,{net}.4"},
        ipFamilies=["IPv4"],
        loadBalancerClass=CLASS,
    )
    assert lb.allocated(space, "two", 2) == [f"{net}.3", f"{net}.4"]
    before = version(space, "two")
    space.service("probe", loadBalancerClass=CLASS)
    assert lb.allocated(space, "probe") == [f"{net}.1"]
    assert version(space, "two") == before, "the status was written again"
    assert lb.ips(space.get("two")) == [f"{net}.3", f"{net}.4"]
    # kube-vip-cloud-provider's record of a dual-stack Service, then SingleStack
    space.service("moved", annotations={KUBEVIP: f"{net}.9,fd00:18:30::5"},
                  ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4", "IPv6"],
                  loadBalancerClass=CLASS)  # fmt: skip
    assert lb.allocated(space, "moved", 2) == [f"{net}.9", "fd00:18:30::5"]
    patch = {"spec": {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]}}
    kube.patch(SERVICES, "moved", patch, namespace=space.name, patch_type="merge")
    cond = lb.refused(space, "moved", "ConflictingRequests")
    assert f"annotation {KUBEVIP}: fd00:18:30::5 is IPv6" in cond["message"]
    before = version(space, "moved")
    space.service("probe2", loadBalancerClass=CLASS)
    assert lb.allocated(space, "probe2") == [f"{net}.2"]
    assert version(space, "moved") == before, "the status was written again"
