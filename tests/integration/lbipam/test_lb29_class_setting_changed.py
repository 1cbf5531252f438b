"""LB29: the controller restarted with another `--lb-class` (another implementation is to
serve the old class; `--lb-classless=false` turned on is the same case), on a real
apiserver. A Service of the old class it served is no longer its own and is not touched;
the address that Service still shows stays held, so a Service of the new class is given
another one, and it is freed once the Service shows no address.

Classes of the test's own: the controllers of other tests running beside it serve the
classless Services.
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.integration.lbipam.test_lb01_lb07_allocation import scrape
from tests.support import lb
from tests.support.processes import free_port
from tests.support.waiting import eventually

OLD, NEW = "example.com/lb29-old", "example.com/lb29-new"


def test_lb29_a_service_no_longer_ours_keeps_the_address_it_shows_held(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/29"])
    controller = start_lb("--lb-classless=false", f"--lb-class={OLD}")
    space.service("old", loadBalancerClass=OLD)
    assert lb.allocated(space, "old") == [f"{net}.1"]
    controller.stop(grace=5)
    health = free_port()
    start_lb("--lb-classless=false", f"--lb-class={NEW}",
             f"--health-probe-bind-address=127.0.0.1:{health}")  # fmt: skip
    # ready: the ledger is rebuilt and the listed Services queued before any created now
    eventually(lambda: scrape(health, "/readyz")[0] == 200, timeout=lb.SETTLE, message="ready")
    space.service("new", loadBalancerClass=NEW)
    assert lb.allocated(space, "new") == [f"{net}.2"]
    assert lb.ips(space.get("old")) == [f"{net}.1"]  # not ours: left as it is
    # the other implementation takes it over: our address is no longer shown, and is free
    kube.patch(SERVICES, "old", [{"op": "remove", "path": "/status/loadBalancer/ingress"}],
               namespace=space.name, subresource="status")  # fmt: skip
    space.service("next", loadBalancerClass=NEW, annotations={"lb.local-ccm.io/ips": f"{net}.1"})
    assert lb.allocated(space, "next") == [f"{net}.1"]
    assert lb.ips(space.get("old")) == []
