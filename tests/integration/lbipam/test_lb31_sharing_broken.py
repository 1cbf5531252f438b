"""LB31: two Services sharing an address by key, then one changes its port to the other's,
on a real apiserver. The one that changed moves to another address (as MetalLB's
controller clears and allocates again), the other keeps the shared one, and the mover's
`AddressAllocated` Event says which address it left and for whom (MetalLB's
`ClearAssignment` says why too); changing the port back moves nothing.
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

KEY = {"lb.local-ccm.io/sharing-key": "k"}

# a class of the test's own: the controllers of other tests running beside it serve the
# classless Services
CLASS = "example.com/lb31"


def test_lb31_a_sharer_whose_port_comes_to_clash_moves_and_says_why(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/29"])
    start_lb("--lb-classless=false", f"--lb-class={CLASS}")
    space.service("web", loadBalancerClass=CLASS, annotations=KEY, ports=[80])
    space.service("api", loadBalancerClass=CLASS, annotations=KEY, ports=[443])
    assert lb.allocated(space, "web") == lb.allocated(space, "api") == [f"{net}.1"]
    port = [{"op": "replace", "path": "/spec/ports/0/port", "value": 80}]
    kube.patch(SERVICES, "api", port, namespace=space.name)
    eventually(lambda: lb.ips(space.get("api")) == [f"{net}.2"], timeout=lb.SETTLE,
               message="api moves off the shared address")  # fmt: skip
    assert lb.ips(space.get("web")) == [f"{net}.1"]
    left = f"{net}.1 left: this Service's ports or sharing key no longer let it share the address"
    events = eventually(
        lambda: [e for e in space.events("api") if left in e["message"]],
        timeout=10,
        message="an Event on api says why it moved",
    )
    assert events[0]["reason"] == "AddressAllocated"
    assert f"{space.name}/web" in events[0]["message"]
    port = [{"op": "replace", "path": "/spec/ports/0/port", "value": 443}]
    kube.patch(SERVICES, "api", port, namespace=space.name)
    space.service("probe", loadBalancerClass=CLASS)
    assert lb.allocated(space, "probe") == [f"{net}.3"]
    assert lb.ips(space.get("api")) == [f"{net}.2"]
