"""LB24: a few hundred Services deleted at once, while new Services want addresses from a pool
those Services fill, on a real apiserver. The controller holds no deletion (it adds no
finalizer), yet an address goes to a new Service only once its old holder is gone: a watch
in the test follows every Service of the namespace from before the first create to the end,
and no address is ever shown by two Services that both exist. Half the old Services
carry a finalizer of the test's own, so they still exist, being deleted (as behind a finalizer
of another controller): their addresses stay held, and the new Services beyond the free ones
wait, until the test lets them go. Every deleted Service ends gone, every new one holds an
address that it shows only after its old holder's DELETED event.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import pytest

from local_ccm.kube.client import Client, Obj, WatchStream
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(600)
OLD, NEW, CLIENTS = 256, 160, 16  # the pool: one /24 with its first and last, 256 addresses
HOLD = "lb24.local-ccm.io/hold"  # the test's own finalizer on half the old Services
TIMEOUT = 120.0


class Shown:
    """The namespace's Services as one watch delivers them, in resourceVersion order: what each
    existing Service shows, and at every event whether an address is shown twice."""

    def __init__(self, kube: Client, namespace: str) -> None:
        version = kube.list(SERVICES, namespace=namespace)["metadata"]["resourceVersion"]
        self.stream: WatchStream = kube.watch(SERVICES, namespace=namespace,
                                              resource_version=version)  # fmt: skip
        self.now: dict[str, list[str]] = {}  # existing Service -> the addresses it shows
        self.events = 0
        self.first_shown: dict[tuple[str, str], int] = {}  # (Service, address) -> event
        self.deleted: dict[str, int] = {}  # Service -> its DELETED event
        self.holders: dict[str, list[str]] = {}  # address -> every Service that showed it
        self.twice: list[str] = []
        self.failed: BaseException | None = None
        self.closing = False
        self.thread = threading.Thread(target=self._follow, name="lb24-watch", daemon=True)

    def _follow(self) -> None:
        try:
            for event in self.stream:
                if event.type != "BOOKMARK":
                    self._apply(event.type, event.object)
        except BaseException as exc:  # the test fails on it: a gap would hide a duplicate
            self.failed = exc
        else:
            if not self.closing:
                self.failed = RuntimeError("the server ended the watch")

    def _apply(self, kind: str, obj: Obj) -> None:
        self.events += 1
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.now.pop(name, None)
            self.deleted[name] = self.events
            return
        self.now[name] = lb.ips(obj)
        for ip in self.now[name]:
            if (name, ip) not in self.first_shown:
                self.first_shown[name, ip] = self.events
                self.holders.setdefault(ip, []).append(name)
            others = [o for o, shown in self.now.items() if o != name and ip in shown]
            self.twice += [f"{ip}: {name} and {o} (event {self.events})" for o in others]

    def __enter__(self) -> Shown:
        self.thread.start()
        eventually(lambda: self.stream.is_open or self.failed, timeout=30, message="watching")
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing = True
        self.stream.close()
        self.thread.join(timeout=30)


def at_once(clients: int, work: Callable[[str], object], names: Iterable[str]) -> None:
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(work, names))


def test_lb24_services_deleted_at_once_free_their_addresses_only_once_gone(
    space: lb.Space, start_lb: StartLb, kube: Client
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/24"], allowFirstAndLast=True)
    start_lb()
    old = [f"old-{n:03d}" for n in range(OLD)]
    held = old[::2]  # with the test's finalizer
    new = [f"new-{n:03d}" for n in range(NEW)]

    def create(name: str) -> Obj:
        meta: Obj = {"name": name, "namespace": space.name}
        if name in held:
            meta["finalizers"] = [HOLD]
        spec = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}],
                "allocateLoadBalancerNodePorts": False}  # fmt: skip
        body = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
        return kube.create(SERVICES, body, namespace=space.name)

    def delete(name: str) -> Obj:
        return kube.delete(SERVICES, name, namespace=space.name)

    def let_go(name: str) -> Obj:
        only_ours = [{"op": "test", "path": "/metadata/finalizers", "value": [HOLD]},
                     {"op": "replace", "path": "/metadata/finalizers", "value": []}]  # fmt: skip
        return kube.patch(SERVICES, name, only_ours, namespace=space.name)

    def services() -> dict[str, Obj]:
        items = kube.list(SERVICES, namespace=space.name)["items"]
        return {s["metadata"]["name"]: s for s in items}

    def full() -> bool:
        found = services()
        return sorted(found) == old and all(len(lb.ips(s)) == 1 for s in found.values())

    def waiting() -> dict[str, Obj] | None:
        """The old Services without the test's finalizer gone, the held ones still there;
        as many new ones served as addresses were freed, the others refused."""
        found = services()
        if sorted(n for n in found if n.startswith("old-")) != held:
            return None
        if any(found[n]["metadata"].get("finalizers") != [HOLD] for n in held):
            return None
        fresh = [found[n] for n in new if n in found]
        served = [s for s in fresh if len(lb.ips(s)) == 1]
        refused = [s for s in fresh if (lb.condition(s) or {}).get("reason") == "PoolExhausted"]
        done = len(served) == OLD - len(held) and len(served) + len(refused) == NEW
        return found if done else None

    def served() -> list[Obj] | None:
        items = list(services().values())
        done = sorted(s["metadata"]["name"] for s in items) == new
        return items if done and all(len(lb.ips(s)) == 1 for s in items) else None

    with Shown(kube, space.name) as shown:
        at_once(CLIENTS, create, old)
        eventually(full, timeout=TIMEOUT, interval=1.0, message="the pool full")
        deleting = threading.Thread(target=at_once, args=(CLIENTS, delete, old))
        deleting.start()  # and, while they go, the new Services, which only freed addresses serve
        at_once(4, create, new)
        deleting.join()
        eventually(lambda: shown.twice or waiting(), timeout=TIMEOUT, interval=1.0,
                   message="the held ones there, the new ones beyond the freed wait")  # fmt: skip
        assert shown.twice == [], shown.twice[:5]
        at_once(CLIENTS, let_go, held)
        items = eventually(served, timeout=TIMEOUT, interval=1.0,
                           message="every old Service gone, every new one served")  # fmt: skip
        eventually(lambda: all(n in shown.deleted for n in old) and all(
            (s["metadata"]["name"], lb.ips(s)[0]) in shown.first_shown for s in items),
            timeout=30, message="the watch caught up")  # fmt: skip
    assert shown.failed is None, f"the watch ended: {shown.failed!r}"
    assert shown.twice == [], shown.twice[:5]
    addresses = [lb.ips(s)[0] for s in items]
    assert len(set(addresses)) == NEW
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(f"{net}.0/24") for a in addresses)
    for svc in items:
        name, ip = svc["metadata"]["name"], lb.ips(svc)[0]
        before = [h for h in shown.holders[ip] if h.startswith("old-")]
        assert before, f"{ip} of {name} was never an old Service's: the pool was not full"
        assert all(shown.deleted[h] < shown.first_shown[name, ip] for h in before), (
            f"{name} shows {ip} before {before} were gone"
        )
