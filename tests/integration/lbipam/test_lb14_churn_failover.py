"""LB14: no duplicate address, ever, and no leak: 2 000 Services created and deleted by eight
clients at once, on a plane of its own, while two controllers with leader election run and
the leader is killed (SIGKILL, then restarted) and later stopped (SIGTERM, the Lease handed
over) mid-churn. Then every address across the cluster is checked: two Services hold one
address only when both asked to share it (one sharing key) and their ports differ; every
address is in the pool; the pool's used count is the number of distinct held addresses; and
after everything is deleted, every Service is gone and the pool is empty again.

The pool (a /22, 1 022 usable addresses) is smaller than the number of Services created, so
addresses are released and handed out again many times during the run.
"""

from __future__ import annotations

import ipaddress
import random
import secrets
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from local_ccm.lbipam.api import POOLS, SERVICES
from tests.support import crds, lb
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.processes import Child, stop_all, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(900)
CLIENTS, PER_CLIENT = 8, 250  # 2 000 Services
POOL = "10.77.0.0/22"
LEASE = ("--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
         "--leader-elect-retry-period=1s", "--leader-elect-resource-namespace=default",
         "--lb-kubevip-configmap=")  # fmt: skip
SHARING = "lb.local-ccm.io/sharing-key"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries: Binaries = ensure(["etcd", "kube-apiserver"])
    with dedicated_plane(request.config, binaries, "lbchurn", scale=True) as started:
        with Client.from_kubeconfig(started.admin_kubeconfig, field_manager="lb14") as kube:
            crds.install(kube, (crds.POOL_CRD,))
        yield started


def churn(
    plane: ControlPlane, namespace: str, client: int, errors: list[str], alive: set[str]
) -> None:
    """Create PER_CLIENT Services; after each, delete the one created two steps before with
    probability one half. One in ten shares a key with the client's other sharers (each on a
    port of its own)."""
    rng = random.Random(client)
    created: list[str] = []
    with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=f"c{client}") as kube:
        for i in range(PER_CLIENT):
            name = f"c{client}-{i}"
            sharing = i % 10 == 0
            meta: Obj = {"name": name, "namespace": namespace}
            if sharing:
                meta["annotations"] = {SHARING: f"k{client}"}
            ports = [{"port": 1000 + i if sharing else 80, "protocol": "TCP"}]
            body = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                    "spec": {"type": "LoadBalancer", "ports": ports}}  # fmt: skip
            try:
                kube.create(SERVICES, body, namespace=namespace)
                created.append(name)
                if len(created) > 2 and rng.random() < 0.5:
                    kube.delete(SERVICES, created.pop(-3), namespace=namespace)
            except Exception as exc:
                errors.append(f"{name}: {exc}")
    alive.update(created)


def leader(kube: Client) -> str | None:
    try:
        lease = kube.get(r.LEASES, "local-ccm-controller-manager", namespace="default")
    except NotFound:
        return None
    return (lease.get("spec") or {}).get("holderIdentity")


def services(kube: Client, namespace: str) -> list[Obj]:
    return list(kube.list(SERVICES, namespace=namespace)["items"])


def duplicates(items: list[Obj]) -> list[str]:
    """Addresses held by Services that may not share them."""
    by_address: dict[str, list[Obj]] = defaultdict(list)
    for svc in items:
        for ip in lb.ips(svc):
            by_address[ip].append(svc)
    found = []
    for ip, holders in by_address.items():
        if len(holders) < 2:
            continue
        keys = {(h["metadata"].get("annotations") or {}).get(SHARING) for h in holders}
        ports = [p["port"] for h in holders for p in h["spec"]["ports"]]
        if None in keys or len(keys) > 1 or len(ports) != len(set(ports)):
            found.append(f"{ip}: {[h['metadata']['name'] for h in holders]}")
    return found


def test_lb14_2000_services_churn_with_failover(plane: ControlPlane, test_artifacts: Path) -> None:
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="lb14")
    namespace = f"lb14-{secrets.token_hex(3)}"
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})  # fmt: skip
    pool = f"{namespace}-pool"
    kube.create(POOLS, {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
                           "metadata": {"name": pool}, "spec": {"addresses": [POOL]}})  # fmt: skip
    children: dict[str, Child] = {}

    def start(identity: str) -> None:
        log = test_artifacts / f"{identity}-{len(children)}.log"
        args = (*LEASE, f"--leader-elect-identity={identity}")
        children[identity] = lb.start(plane.admin_kubeconfig, log, *args, leader_elect=True)

    start("a")
    eventually(lambda: leader(kube) == "a", timeout=30, message="a leads")
    start("b")
    errors: list[str] = []
    alive: set[str] = set()
    clients = [threading.Thread(target=churn, args=(plane, namespace, c, errors, alive))
               for c in range(CLIENTS)]  # fmt: skip
    try:
        for thread in clients:
            thread.start()
        eventually(lambda: len(services(kube, namespace)) > 300, timeout=120)
        killed = str(leader(kube))
        children[killed].proc.kill()  # no release: the standby waits out the Lease
        children[killed].proc.wait(timeout=10)
        eventually(lambda: leader(kube) not in (None, killed), timeout=30, message="takeover")
        start(killed)
        eventually(lambda: len(services(kube, namespace)) > 700, timeout=180)
        stopped = str(leader(kube))
        children[stopped].stop(grace=10)  # SIGTERM: the Lease is released
        eventually(lambda: leader(kube) not in (None, "", stopped), timeout=30)
        for thread in clients:
            thread.join(timeout=600)
        assert not errors, errors[:5]

        def settled() -> list[Obj] | None:
            items = services(kube, namespace)
            done = all(len(lb.ips(s)) == 1 and not lb.has_finalizer(s)
                       and not s["metadata"].get("deletionTimestamp") for s in items)  # fmt: skip
            return items if done else None

        items = eventually(settled, timeout=180, interval=1.0, message="every Service served")
        assert {s["metadata"]["name"] for s in items} == alive  # deleted ones are gone
        assert duplicates(items) == []
        network = ipaddress.ip_network(POOL)
        held = {ip for s in items for ip in lb.ips(s)}
        assert all(ipaddress.ip_address(ip) in network for ip in held)
        want = str(len(held))
        eventually(lambda: lb.pool_status(kube, pool).get("ipv4", {}).get("used") == want,
                   timeout=60, message=f"pool used == {want} distinct addresses")  # fmt: skip
        for svc in items:
            kube.delete(SERVICES, svc["metadata"]["name"], namespace=namespace)
        eventually(lambda: services(kube, namespace) == [], timeout=180, interval=1.0,
                   message="every Service gone")  # fmt: skip
        eventually(lambda: lb.pool_status(kube, pool).get("ipv4", {}).get("used") == "0",
                   timeout=60, message="no address leaked")  # fmt: skip
        running = [c for c in children.values() if c.exited() is None]
        assert running, "a controller still runs"
        for child in running:
            assert "Traceback" not in tail(child.log_path, 2000)
    finally:
        stop_all(list(children.values()), grace=10)
        kube.close()
