"""LB33: a Service whose decision is a problem keeps the address it shows; once its status no
longer shows it (an operator cleared it), the address is free again without a restart, on a
real apiserver.

The Service asks for an address outside every pool: refused whole (`AddressNotInPool`), and
the address it was given before stays shown and held. The operator clears its ingress; a
Service that asks for that address gets it. Before, the ledger kept the address for the first
Service until the controller restarted (the ledger is rebuilt from what Services show).
"""

from __future__ import annotations

from local_ccm.kube.client import Client
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

IPS = "lb.local-ccm.io/ips"


def test_lb33_an_address_a_refused_service_no_longer_shows_is_free_without_a_restart(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, elsewhere = lb.block(), lb.block()
    space.pool([f"{net}.0/29"])
    start_lb()
    space.service("a")
    assert lb.allocated(space, "a") == [f"{net}.1"]
    kube.patch(SERVICES, "a", {"metadata": {"annotations": {IPS: f"{elsewhere}.5"}}},
               patch_type="merge", namespace=space.name)  # fmt: skip
    lb.refused(space, "a", "AddressNotInPool")
    assert lb.ips(space.get("a")) == [f"{net}.1"], "a refused request takes nothing away"
    space.service("b", annotations={IPS: f"{net}.1"})
    lb.refused(space, "b", "AddressInUse")
    # the operator's move: a's status no longer shows the address
    kube.patch(SERVICES, "a", [{"op": "remove", "path": "/status/loadBalancer/ingress"}],
               namespace=space.name, subresource="status")  # fmt: skip
    eventually(lambda: lb.ips(space.get("b")) == [f"{net}.1"], timeout=lb.SETTLE,
               message="b gets the address a no longer shows")  # fmt: skip
    assert lb.ips(space.get("a")) == []
