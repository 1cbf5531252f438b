"""LB25: an upgrade from a release that added the finalizer
`service.kubernetes.io/load-balancer-cleanup` to every Service it served, on a real apiserver.

Before the controller starts, the namespace holds what such a release left: `kept`, served
(its address in its status, our condition, the finalizer); `leaving`, served too and deleted
while that release was down, so the finalizer keeps it; `former`, once served and then turned
into a ClusterIP Service (the apiserver clears its class, not our condition). A new Service
`wants` asks for `leaving`'s address. Once the controller runs: `kept` loses the finalizer and
keeps its address (no move, nothing else rewritten); `leaving` loses it and is gone, and only
then does `wants` get the address; `former` shows no address, `Released`, no finalizer; and a
Service served after the upgrade carries no finalizer and is gone as soon as it is deleted.
"""

from __future__ import annotations

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import SERVICES
from local_ccm.lbipam.core.writes import CONDITION, FINALIZER
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

SETTLE = lb.SETTLE
ASK = "lb.local-ccm.io/ips"


def served_before(space: lb.Space, name: str, address: str, **spec: object) -> Obj:
    """A Service as the earlier release left it: the finalizer, the address, our condition."""
    meta = {"name": name, "namespace": space.name, "finalizers": [FINALIZER]}
    spec = {"type": "LoadBalancer", "ports": [{"name": "p0", "port": 80}], **spec}
    body = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
    space.kube.create(SERVICES, body, namespace=space.name)
    cond = {"type": CONDITION, "status": "True", "reason": "Allocated",
            "message": f"allocated {address}",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    status = {"loadBalancer": {"ingress": [{"ip": address, "ipMode": "VIP"}]},
              "conditions": [cond]}  # fmt: skip
    return space.kube.patch(SERVICES, name, {"status": status}, patch_type="merge",
                            namespace=space.name, subresource="status")  # fmt: skip


def test_lb25_an_upgrade_removes_the_old_finalizers_and_moves_nothing(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/29"])
    kept = served_before(space, "kept", f"{net}.3")
    served_before(space, "leaving", f"{net}.4")
    kube.delete(SERVICES, "leaving", namespace=space.name)
    served_before(space, "former", f"{net}.5")
    kube.patch(SERVICES, "former", {"spec": {"type": "ClusterIP"}}, patch_type="merge",
               namespace=space.name)  # fmt: skip
    assert space.get("leaving")["metadata"].get("deletionTimestamp"), "the finalizer holds it"
    space.service("wants", annotations={ASK: f"{net}.4"})
    start_lb()

    eventually(lambda: lb.gone(kube, space.name, "leaving"), timeout=SETTLE,
               message="the deleted Service let go")  # fmt: skip
    assert lb.allocated(space, "wants") == [f"{net}.4"]

    def upgraded() -> Obj | None:
        svc = space.get("kept")
        return None if lb.has_finalizer(svc) else svc

    now = eventually(upgraded, timeout=SETTLE, message="the old finalizer removed from kept")
    assert lb.ips(now) == [f"{net}.3"], "moved"
    assert now["status"] == kept["status"], "its status rewritten"

    def cleaned() -> Obj | None:
        svc = space.get("former")
        cond = lb.condition(svc)
        done = cond is not None and cond["reason"] == "Released" and not lb.ips(svc)
        return svc if done and not lb.has_finalizer(svc) else None

    eventually(cleaned, timeout=SETTLE, message="former: released, its finalizer removed")

    space.service("after")
    assert lb.allocated(space, "after")  # any free address
    assert not lb.has_finalizer(space.get("after"))
    kube.delete(SERVICES, "after", namespace=space.name)
    assert lb.gone(kube, space.name, "after"), "held by a finalizer"
