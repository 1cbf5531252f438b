"""Helpers of the service-lb-ipam scenarios: the manager running only that controller, pools
and Services in a namespace of the test's own, and reads of what the controller wrote."""

from __future__ import annotations

import itertools
import secrets
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from local_ccm.lbipam.api import POOLS, SERVICES
from local_ccm.lbipam.core.writes import CONDITION, FINALIZER
from tests.support import resources as r
from tests.support.processes import Child, spawn
from tests.support.waiting import eventually

SETTLE = 20.0  # seconds for the controller to act on a change
BINARY = Path(sys.executable).parent / "local-ccm-controller-manager"
ARGS = ("--controllers=service-lb-ipam", "--metrics-bind-address=0",
        "--health-probe-bind-address=0")  # fmt: skip
_blocks = itertools.count(1 + secrets.randbelow(200))
# Pool names, unique within a process (a space's name is the test's own). They were two random
# hex bytes, which can repeat within a test: a CI run's LB17 was refused its third pool with
# 409 AlreadyExists.
_pools = itertools.count(1)


def start(kubeconfig: Path, log: Path, *extra: str, leader_elect: bool = False) -> Child:
    election = () if leader_elect else ("--leader-elect=false",)
    argv = [str(BINARY), *ARGS, *election, f"--kubeconfig={kubeconfig}", *extra]
    return spawn("lb", argv, log, env={"PATH": "/usr/bin:/bin"})


def block() -> str:
    """A /24 of 198.18.0.0/15 (the benchmarking range) no other test of the session uses."""
    n = next(_blocks)
    return f"198.{18 + n // 256}.{n % 256}"


@dataclass
class Space:
    """A namespace of the test's own, labelled so that only its pools select it."""

    kube: Client
    name: str
    label: str

    def pool(self, addresses: Sequence[str], **spec: Any) -> str:
        name = f"{self.name}-{next(_pools)}"
        selector = {"matchLabels": {"lbtest": self.label}}
        spec = {"addresses": list(addresses), "namespaceSelector": selector, **spec}
        body = {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
        self.kube.create(POOLS, body)
        return name

    def service(
        self,
        name: str,
        *,
        ports: Sequence[int | tuple[str, int]] = (80,),
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        **spec: Any,
    ) -> Obj:
        entries = [
            {"name": f"p{i}", "protocol": p[0], "port": p[1]} if isinstance(p, tuple)
            else {"name": f"p{i}", "protocol": "TCP", "port": p}
            for i, p in enumerate(ports)
        ]  # fmt: skip
        meta: Obj = {"name": name, "namespace": self.name}
        if annotations:
            meta["annotations"] = annotations
        if labels:
            meta["labels"] = labels
        body = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"type": "LoadBalancer", "ports": entries, **spec}}  # fmt: skip
        return self.kube.create(SERVICES, body, namespace=self.name)

    def get(self, name: str) -> Obj:
        return self.kube.get(SERVICES, name, namespace=self.name)

    def events(self, name: str) -> list[Obj]:
        found = self.kube.list(r.EVENTS, namespace=self.name,
                               field_selector=f"involvedObject.name={name}")["items"]  # fmt: skip
        return list(found)


def space(kube: Client) -> Iterator[Space]:
    label = secrets.token_hex(3)
    name = f"lb-{label}"
    meta = {"name": name, "labels": {"lbtest": label}}
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    yield Space(kube, name, label)
    for pool in kube.list(POOLS)["items"]:
        if pool["metadata"]["name"].startswith(name):
            kube.delete(POOLS, pool["metadata"]["name"])


def ips(svc: Obj) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(e.get("ip")) for e in ingress]


def condition(svc: Obj) -> Obj | None:
    found = (svc.get("status") or {}).get("conditions") or []
    return next((c for c in found if c.get("type") == CONDITION), None)


def has_finalizer(svc: Obj) -> bool:
    return FINALIZER in (svc["metadata"].get("finalizers") or [])


def pool_status(kube: Client, name: str) -> Obj:
    return dict(kube.get(POOLS, name).get("status") or {})


def pool_condition(kube: Client, name: str, kind: str) -> Obj | None:
    found = pool_status(kube, name).get("conditions") or []
    return next((c for c in found if c.get("type") == kind), None)


def gone(kube: Client, namespace: str, name: str) -> bool:
    try:
        kube.get(SERVICES, name, namespace=namespace)
    except NotFound:
        return True
    return False


def allocated(space: Space, name: str, count: int = 1) -> list[str]:
    """The Service's addresses once it holds `count` of them."""

    def check() -> list[str] | None:
        found = ips(space.get(name))
        return found if len(found) == count else None

    return eventually(check, timeout=SETTLE, message=f"{name} gets {count} address(es)")


def refused(space: Space, name: str, reason: str) -> Obj:
    """Our condition on the Service once its reason is `reason`."""

    def check() -> Obj | None:
        found = condition(space.get(name))
        return found if found and found["reason"] == reason else None

    return eventually(check, timeout=SETTLE, message=f"{name}: condition {reason}")
