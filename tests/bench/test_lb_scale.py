"""`make bench` for service-lb-ipam: 5 000 `type: LoadBalancer` Services created at once →
time until all hold their addresses, the controller's CPU time and RSS, API writes per
Service, the allocation latency it reports, then the same for deleting them all (16 clients
again).

A dedicated scale plane (an apiserver without request throttling, a /16 Service CIDR), one
dual-stack pool, the controller as a subprocess of `local-ccm-controller-manager
--controllers=service-lb-ipam`. Four Services in five are IPv4 SingleStack, one in five
PreferDualStack (an address per family). The pure core alone (decide + hold for 5 000
requests) is timed in-process. Numbers are recorded, not asserted: only the outcome is checked
(distinct addresses inside the pool, no finalizer, nothing left held after the deletion).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import POOLS, SERVICES
from local_ccm.lbipam.core.allocator import Allocation, build_ledger, decide, hold
from local_ccm.lbipam.core.pools import Pool, parse_pool
from local_ccm.lbipam.core.service import parse_service
from tests.bench.compare_lb import CREATORS, in_threads
from tests.support import crds, lb
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.ipam_bench import machine_facts, proc_stats, table
from tests.support.processes import free_port
from tests.support.waiting import eventually

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]
SERVICES_N = 5000
POOL_V4, POOL_V6 = "10.200.0.0/16", "fd00:200::/112"
RESULTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "bench"


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with dedicated_plane(request.config, binaries, "lb-scale", scale=True) as plane:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="lb-bench") as kube:
            crds.install(kube, (crds.POOL_CRD,))
        yield plane


def service_body(namespace: str, index: int) -> Obj:
    spec: Obj = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}],
                 "allocateLoadBalancerNodePorts": False}  # 5 000 > the 2 768 NodePorts  # fmt: skip
    if index % 5 == 0:
        spec |= {"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv6"]}
    return {"apiVersion": "v1", "kind": "Service", "spec": spec,
            "metadata": {"name": f"s{index:05d}", "namespace": namespace}}  # fmt: skip


def create_all(plane: ControlPlane, namespace: str) -> tuple[float, float]:
    """Every Service created by CREATORS clients at once: (start, last answer), monotonic."""
    start = time.monotonic()
    last = in_threads(plane, SERVICES_N, lambda kube, index: kube.create(
        SERVICES, service_body(namespace, index), namespace=namespace))  # fmt: skip
    return start, last


def delete_all(plane: ControlPlane, namespace: str, items: list[Obj]) -> None:
    """Every Service deleted by CREATORS clients at once, as a namespace's worth of Services
    goes in a real cluster (and as the side-by-side comparison with MetalLB deletes them)."""
    names = [svc["metadata"]["name"] for svc in items]
    in_threads(plane, len(names), lambda kube, index: kube.delete(
        SERVICES, names[index], namespace=namespace))  # fmt: skip


def list_services(kube: Client, namespace: str) -> list[Obj]:
    found, token = [], None
    while True:
        page = kube.list(SERVICES, namespace=namespace, limit=1000, continue_token=token)
        found += page["items"]
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return found


def none_left(kube: Client, namespace: str) -> bool:
    """No Service left: a LIST of one item, so that asking twice a second does not load the
    apiserver the deletion is measured on with pages of thousands of Services."""
    return not kube.list(SERVICES, namespace=namespace, limit=1)["items"]


def wanted(svc: Obj) -> int:
    return 2 if svc["spec"].get("ipFamilyPolicy") == "PreferDualStack" else 1


def metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def writes(samples: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    return sum(v for labels, v in samples.get("rest_client_requests_total", [])
               if labels.get("method") in ("PATCH", "POST", "PUT"))  # fmt: skip


def status_writes(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
    """Service status PATCHes by answer code ("200", "422" for a failed resourceVersion test)."""
    found = samples.get("local_ccm_lb_writes_total", [])
    return {labels["code"]: v for labels, v in found if labels.get("resource") == "services/status"}


def quantile(samples: dict[str, list[tuple[dict[str, str], float]]], q: float) -> float | None:
    """The upper bound of the histogram bucket holding quantile `q` of the latency."""
    found = samples.get("local_ccm_lb_allocation_latency_seconds_bucket", [])
    buckets = sorted((float(labels["le"]), v) for labels, v in found)
    total = buckets[-1][1] if buckets else 0
    return next((le for le, count in buckets if total and count >= q * total), None)


def core_in_process() -> dict[str, float]:
    """decide + hold for SERVICES_N requests on the same pool, and a rebuild of them all."""
    pool = parse_pool({"metadata": {"name": "p"}, "spec": {"addresses": [POOL_V4, POOL_V6]}})
    assert isinstance(pool, Pool)
    bodies = [service_body("bench", i) for i in range(SERVICES_N)]
    requests = [parse_service(b) for b in bodies]
    ledger, _ = build_ledger([], [pool])
    start, slowest = time.process_time(), 0.0
    placed: list[Obj] = []
    for request, body in zip(requests, bodies, strict=True):
        began = time.perf_counter()
        decision = decide(request, [pool], ledger, {})
        assert isinstance(decision, Allocation), decision
        hold(ledger, decision)
        slowest = max(slowest, time.perf_counter() - began)
        ingress = [{"ip": str(a)} for a in decision.addresses]
        placed.append({**body, "status": {"loadBalancer": {"ingress": ingress}}})
    decided = time.process_time() - start
    start = time.process_time()
    build_ledger([parse_service(b) for b in placed], [pool])
    return {"decide_and_hold_total_s": round(decided, 3),
            "decide_and_hold_max_ms": round(slowest * 1000, 3),
            "rebuild_total_s": round(time.process_time() - start, 3)}  # fmt: skip


def test_lb_scale_5000_services(
    control_plane: ControlPlane, binaries: Binaries, test_artifacts: Path
) -> None:
    facts = machine_facts(binaries, control_plane)
    kube = Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="lb-bench")
    namespace = f"lbscale-{secrets.token_hex(3)}"
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})  # fmt: skip
    pool = f"{namespace}-pool"
    spec = {"addresses": [POOL_V4, POOL_V6]}
    kube.create(POOLS, {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
                        "metadata": {"name": pool}, "spec": spec})  # fmt: skip
    port, health = free_port(), free_port()
    child = lb.start(control_plane.admin_kubeconfig, test_artifacts / "lb.log",
                     f"--metrics-bind-address=127.0.0.1:{port}", "--metrics-secure=false",
                     f"--health-probe-bind-address=127.0.0.1:{health}",
                     "--lb-kubevip-configmap=")  # fmt: skip
    try:
        eventually(lambda: metrics(port) is not None, timeout=30, message="metrics served")
        ready = proc_stats(child.pid)
        start, created = create_all(control_plane, namespace)

        def all_allocated() -> list[Obj] | None:
            items = list_services(kube, namespace)
            done = len(items) == SERVICES_N and all(len(lb.ips(s)) == wanted(s) for s in items)
            return items if done else None

        items = eventually(all_allocated, timeout=600, interval=0.5, message="all allocated")
        allocated = time.monotonic()
        stats = proc_stats(child.pid)
        after_create = metrics(port)
        delete_all(control_plane, namespace, items)
        deleted = time.monotonic()
        eventually(lambda: none_left(kube, namespace), timeout=600, interval=0.5,
                   message="every Service gone")  # fmt: skip
        gone = time.monotonic()
        eventually(lambda: lb.pool_status(kube, pool).get("ipv4", {}).get("used") == "0",
                   timeout=60, message="nothing held")  # fmt: skip
        end = proc_stats(child.pid)
        after_delete = metrics(port)
    finally:
        child.stop(grace=10)
        kube.close()
    addresses = [ip for s in items for ip in lb.ips(s)]
    v4, v6 = ipaddress.ip_network(POOL_V4), ipaddress.ip_network(POOL_V6)
    dual = sum(1 for s in items if wanted(s) == 2)
    result: dict[str, Any] = {
        **facts,
        "services": SERVICES_N, "dual_stack_services": dual, "creators": CREATORS,
        "create_s": round(created - start, 2),
        "all_allocated_after_first_create_s": round(allocated - start, 2),
        "all_allocated_after_last_create_s": round(allocated - created, 2),
        "delete_requests_s": round(deleted - allocated, 2),
        "all_gone_after_first_delete_s": round(gone - allocated, 2),
        "controller_cpu_startup_s": round(ready.cpu_seconds, 2),
        "controller_cpu_allocation_phase_s": round(stats.cpu_seconds - ready.cpu_seconds, 2),
        "controller_cpu_release_phase_s": round(end.cpu_seconds - stats.cpu_seconds, 2),
        "controller_rss_ready_mib": round(ready.rss_mib, 1),
        "controller_rss_after_allocation_mib": round(stats.rss_mib, 1),
        "controller_rss_peak_mib": round(end.hwm_mib, 1),
        "writes_per_service_allocation": round(writes(after_create) / SERVICES_N, 2),
        # One written status per Service; a second one that lands means the Service was moved
        # to another address, which another Service was then shown with too.
        "status_writes_allocation": status_writes(after_create),
        "writes_per_service_release": round(
            (writes(after_delete) - writes(after_create)) / SERVICES_N, 2),
        "allocation_latency_p50_le_s": quantile(after_create, 0.5),
        "allocation_latency_p99_le_s": quantile(after_create, 0.99),
        "core_in_process": core_in_process(),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"lb-scale-5000-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nlb-scale-5000: {path}\n{json.dumps(result, indent=2)}")
    print(table([
        ("all 5,000 hold their addresses, from the first create", "bounded by API latency",
         f"{result['all_allocated_after_first_create_s']} s"),
        ("controller CPU, allocation phase", "–",
         f"{result['controller_cpu_allocation_phase_s']} s"),
        ("controller RSS (peak)", "–", f"{result['controller_rss_peak_mib']} MiB"),
        ("API writes per Service (status + Event)", "2",
         str(result["writes_per_service_allocation"])),
    ]))  # fmt: skip
    assert len(addresses) == SERVICES_N + dual
    assert len(set(addresses)) == len(addresses), "an address held twice"
    assert all(ipaddress.ip_address(a) in (v4 if ":" not in a else v6) for a in addresses)
    assert not any(lb.has_finalizer(s) for s in items), "a deletion held by a finalizer"
    moved = status_writes(after_create).get("200", 0) - SERVICES_N
    assert moved == 0, f"{moved:.0f} Services moved to another address after their first"
