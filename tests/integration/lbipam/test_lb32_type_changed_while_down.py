"""LB32: a LoadBalancer Service of ours made a ClusterIP while the controller was down, on a
real apiserver. The apiserver clears its class with the type, so with `--lb-class` set it no
longer reads as of our class; what we wrote (our condition) still marks it as ours, and the
restarted controller cleans it up as it does when it sees the change live (LB07): condition
`Released`, no address shown, the address free for the next Service. (A Service left behind by
a changed `--lb-class` is another implementation's, and not touched: LB29.)

A class of the test's own: the controllers of other tests running beside it serve the
classless Services.
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

CLASS = "example.com/lb32"
FLAGS = ("--lb-classless=false", f"--lb-class={CLASS}")


def test_lb32_a_service_that_stopped_being_a_load_balancer_while_down_is_cleaned_up_at_start(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.4/32"], allowFirstAndLast=True)
    controller = start_lb(*FLAGS)
    space.service("a", loadBalancerClass=CLASS)
    assert lb.allocated(space, "a") == [f"{net}.4"]
    controller.stop(grace=5)
    kube.patch(SERVICES, "a", {"spec": {"type": "ClusterIP"}}, patch_type="merge",
               namespace=space.name)  # fmt: skip
    assert space.get("a")["spec"].get("loadBalancerClass") is None, "the class kept"
    space.service("b", loadBalancerClass=CLASS)
    start_lb(*FLAGS)

    def cleaned() -> bool:
        svc = space.get("a")
        return not lb.ips(svc) and (lb.condition(svc) or {}).get("reason") == "Released"

    eventually(cleaned, timeout=lb.SETTLE, message="a's status cleared after the restart")
    assert lb.allocated(space, "b") == [f"{net}.4"]
