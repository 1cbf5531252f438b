"""LB17–LB21: a held address stays held whatever happens to the pools.

LB17 the testers' report: the holding pool disabled (no `NoPool`, no move), then another pool
that selects the Service (still no move), and an overlapping pool never hands the address out;
LB18 the pool deleted: the address, now outside every pool, is kept with `AddressOutsidePools`
and a Warning, and moves only when the operator clears the status; LB19 the pool's ranges
edited around it: kept, and moved only by a request; LB20 the pool's serviceSelector no longer
selecting the Service; LB21 a restart while the pool is disabled (the ledger is rebuilt from
the Services' status, so the address is still held and nothing is rewritten).

A "probe" Service created after a pool's status shows the controller has seen a change is
decided after the Services that change queued (the address decisions are taken in the queue's
order, first in first out): once the probe has its address, the Service under test has been
decided again.
"""

from __future__ import annotations

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import POOLS, SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

SETTLE = lb.SETTLE


def decided_again(space: lb.Space, name: str, before: Obj | None) -> Obj:
    """The Service once our condition's message differs from `before`'s."""
    old = (before or {}).get("message")

    def check() -> Obj | None:
        svc = space.get(name)
        cond = lb.condition(svc)
        return svc if cond is not None and cond.get("message") != old else None

    return eventually(check, timeout=SETTLE, message=f"{name}: decided again")


def pool_seen(kube: Client, pool: str) -> None:
    """The controller has seen the pool: it wrote the pool's status."""
    eventually(lambda: lb.pool_condition(kube, pool, "Ready"), timeout=SETTLE,
               message=f"{pool}: status written")  # fmt: skip


def ours(svc: Obj) -> tuple[str, str, str]:
    cond = lb.condition(svc) or {}
    return str(cond.get("status")), str(cond.get("reason")), str(cond.get("message"))


def test_lb17_a_disabled_pool_keeps_its_address_when_another_pool_selects_the_service(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, other = lb.block(), lb.block()
    a = space.pool([f"{net}.0/29"])
    start_lb()
    space.service("d1")
    assert lb.allocated(space, "d1") == [f"{net}.1"]
    before = lb.condition(space.get("d1"))
    kube.patch(POOLS, a, {"spec": {"disabled": True}}, patch_type="merge")
    svc = decided_again(space, "d1", before)
    status, reason, message = ours(svc)
    assert (status, reason) == ("True", "Allocated"), message
    assert f"{net}.1 is kept from pool {a}, which is disabled" in message
    assert lb.ips(svc) == [f"{net}.1"]
    b = space.pool([f"{other}.0/29"], priority=10)
    pool_seen(kube, b)
    space.service("probe")
    assert lb.allocated(space, "probe") == [f"{other}.1"]
    assert lb.ips(space.get("d1")) == [f"{net}.1"]
    # a pool over the disabled pool's range (tried before b) never hands out what it holds
    c = space.pool([f"{net}.0/29"])
    pool_seen(kube, c)
    space.service("d3")
    assert lb.allocated(space, "d3") == [f"{net}.2"]
    assert "NoPool" not in [e["reason"] for e in space.events("d1")]
    assert lb.ips(space.get("d1")) == [f"{net}.1"]


def test_lb18_a_deleted_pool_leaves_the_address_held_and_flagged_until_the_operator_moves_it(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, other = lb.block(), lb.block()
    a = space.pool([f"{net}.0/29"])
    space.pool([f"{other}.0/29"], priority=10)
    start_lb()
    space.service("d1")
    assert lb.allocated(space, "d1") == [f"{net}.1"]
    before = lb.condition(space.get("d1"))
    kube.delete(POOLS, a)
    svc = decided_again(space, "d1", before)
    assert lb.ips(svc) == [f"{net}.1"]
    status, reason, message = ours(svc)
    assert (status, reason) == ("True", "AddressOutsidePools"), message
    assert f"{net}.1 is in no pool's ranges" in message
    warnings = eventually(
        lambda: [e for e in space.events("d1") if e["reason"] == "AddressOutsidePools"],
        timeout=10,
        message="a Warning Event on d1",
    )
    assert warnings[0]["type"] == "Warning"
    space.service("d2", annotations={"lb.local-ccm.io/ips": f"{net}.1"})
    lb.refused(space, "d2", "AddressNotInPool")
    # the operator's move: clear the status; the Service gets an address of a pool
    kube.patch(SERVICES, "d1", [{"op": "remove", "path": "/status/loadBalancer/ingress"}],
               namespace=space.name, subresource="status")  # fmt: skip
    eventually(lambda: lb.ips(space.get("d1")) == [f"{other}.1"], timeout=SETTLE,
               message="d1 moves to the pool that selects it")  # fmt: skip
    assert ours(space.get("d1"))[:2] == ("True", "Allocated")


def test_lb19_ranges_edited_around_a_held_address_keep_it_until_a_request_moves_it(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    a = space.pool([f"{net}.0/29"])
    start_lb()
    space.service("d1")
    assert lb.allocated(space, "d1") == [f"{net}.1"]
    before = lb.condition(space.get("d1"))
    kube.patch(POOLS, a, {"spec": {"addresses": [f"{net}.8/29"]}}, patch_type="merge")
    svc = decided_again(space, "d1", before)
    assert lb.ips(svc) == [f"{net}.1"]
    assert ours(svc)[:2] == ("True", "AddressOutsidePools")
    space.service("d2")
    assert lb.allocated(space, "d2") == [f"{net}.9"]
    # the operator's move: a request for another address
    kube.patch(SERVICES, "d1", {"metadata": {"annotations": {"lb.local-ccm.io/ips": f"{net}.12"}}},
               patch_type="merge", namespace=space.name)  # fmt: skip
    eventually(lambda: lb.ips(space.get("d1")) == [f"{net}.12"], timeout=SETTLE,
               message="d1 moves to the requested address")  # fmt: skip
    assert ours(space.get("d1"))[:2] == ("True", "Allocated")


def test_lb20_a_pool_that_stops_selecting_the_service_leaves_its_address(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, other = lb.block(), lb.block()
    a = space.pool([f"{net}.0/29"])
    space.pool([f"{other}.0/29"], priority=10)
    start_lb()
    space.service("d1")
    assert lb.allocated(space, "d1") == [f"{net}.1"]
    before = lb.condition(space.get("d1"))
    selector = {"matchLabels": {"team": "blue"}}
    kube.patch(POOLS, a, {"spec": {"serviceSelector": selector}}, patch_type="merge")
    svc = decided_again(space, "d1", before)
    assert lb.ips(svc) == [f"{net}.1"]
    status, reason, message = ours(svc)
    assert (status, reason) == ("True", "Allocated"), message
    assert f"kept from pool {a}, which does not select the Service" in message
    space.service("blue", labels={"team": "blue"})
    assert lb.allocated(space, "blue") == [f"{net}.2"]
    space.service("plain")
    assert lb.allocated(space, "plain") == [f"{other}.1"]
    assert lb.ips(space.get("d1")) == [f"{net}.1"]


def test_lb21_a_restart_while_the_pool_is_disabled_keeps_the_address_held(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net, other = lb.block(), lb.block()
    a = space.pool([f"{net}.0/29"])
    controller = start_lb()
    space.service("d1")
    assert lb.allocated(space, "d1") == [f"{net}.1"]
    before = lb.condition(space.get("d1"))
    kube.patch(POOLS, a, {"spec": {"disabled": True}}, patch_type="merge")
    decided_again(space, "d1", before)
    version = space.get("d1")["metadata"]["resourceVersion"]
    controller.stop(grace=5)
    space.pool([f"{other}.0/29"])
    space.service("zz-probe")  # listed, so queued, after d1
    start_lb()
    assert lb.allocated(space, "zz-probe") == [f"{other}.1"]
    svc = space.get("d1")
    assert lb.ips(svc) == [f"{net}.1"]
    assert svc["metadata"]["resourceVersion"] == version  # nothing rewritten
    eventually(lambda: lb.pool_status(kube, a).get("ipv4", {}).get("used") == "1",
               timeout=SETTLE, message=f"{a} counts the held address")  # fmt: skip
