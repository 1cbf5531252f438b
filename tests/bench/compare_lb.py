"""One LoadBalancer run of `make bench-compare`: ours (service-lb-ipam), MetalLB's controller
or kube-vip-cloud-provider on the same plane, N Services created at once, then a restart,
then all deleted.

A run has a namespace, a pool and a user of its own (a `system:masters` client certificate
for every implementation, so authorization costs none of them anything and the audit log
tells their requests apart). One admin watch over the namespace (tests/bench/lb_watch.py)
runs from before the controller starts to the end; it times everything below and records
every moment one address shows on two live Services. In order:

1. start the controller; it is ready once it has opened its watch of Services (audit log)
   and then made no request for `READY_QUIET_S`.
2. create N Services from `CREATORS` threads (one in five PreferDualStack: the plane is
   dual-stack, so those ask for an address per family); wait until each holds all it asked
   for (ours and MetalLB: status.loadBalancer.ingress; kube-vip-cloud-provider: its
   annotation), then until the controller has made no request for `QUIET_S`. CPU
   (utime + stime from /proc/<pid>/stat), requests and writes (audit log) over that phase,
   VmRSS and VmHWM at its end.
3. stop the controller (SIGTERM) and start it again with every Service addressed; until it
   has been quiet for `RESTART_QUIET_S`: its writes, and the Services whose address changed.
4. delete every Service from `CREATORS` threads: until the watch has seen the last one gone
   (ours and MetalLB hold no finalizer; kube-vip-cloud-provider's framework holds the
   cloud-provider one), and for ours until its pool's `used` gauge is back to 0. CPU per
   Service over the phase.
"""

from __future__ import annotations

import secrets
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import SERVICES
from tests.bench import lb_peers
from tests.bench.lb_watch import WRITE_VERBS, AddressBook, AuditTail, ServiceWatch, count
from tests.support import resources as r
from tests.support.controlplane import ControlPlane
from tests.support.processes import Child, cpu_seconds, memory_kib

CREATORS = 16
DUAL_EVERY = 5  # one Service in five is PreferDualStack
READY_QUIET_S, QUIET_S, RESTART_QUIET_S = 2.0, 5.0, 10.0
USER_PREFIX = "bench-lb-"
POLL = 0.2


@dataclass(frozen=True)
class LbBench:
    plane: ControlPlane
    kube: Client  # admin
    audit: AuditTail
    binaries: dict[str, Path]  # impl → its binary (ours: unused, the manager's entry point)
    logs: Path


def service_body(namespace: str, index: int) -> Obj:
    spec: Obj = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}],
                 "allocateLoadBalancerNodePorts": False}  # 5 000 > the 2 768 NodePorts  # fmt: skip
    if index % DUAL_EVERY == 0:
        spec |= {"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv6"]}
    return {"apiVersion": "v1", "kind": "Service", "spec": spec,
            "metadata": {"name": f"s{index:05d}", "namespace": namespace}}  # fmt: skip


def in_threads(plane: ControlPlane, count_: int, work: Callable[[Client, int], object]) -> float:
    """`work(client, i)` for i in range(count_) from CREATORS threads; when the last request
    was answered (monotonic)."""
    errors: list[str] = []
    answered = [0.0] * CREATORS

    def part(k: int) -> None:
        with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=f"lb-bench-{k}") as kube:
            for i in range(k, count_, CREATORS):
                try:
                    work(kube, i)
                except Exception as exc:  # every failure is reported below, not only the first
                    errors.append(f"{i}: {exc!r}")
                answered[k] = time.monotonic()

    threads = [threading.Thread(target=part, args=(k,)) for k in range(CREATORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise AssertionError(f"{len(errors)} requests failed: {errors[:3]}")
    return max(answered)


def until(what: str, check: Callable[[], Any], timeout: float, child: Child | None) -> Any:
    """`check()` until truthy; fails at once when `child` exited, else after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if child is not None and child.exited() is not None:
            raise AssertionError(f"{child.name} exited {child.exited()} waiting for {what}: "
                                 f"see {child.log_path}")  # fmt: skip
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL)
    return found


def quiet(bench: LbBench, user: str, since: float, for_s: float, timeout: float) -> float:
    """Until `user` has made no request for `for_s` (or `timeout`); the wall time then."""
    deadline = time.time() + timeout
    while True:
        now = time.time()
        if now - max(bench.audit.last(user) or since, since) >= for_s or now > deadline:
            return now
        time.sleep(POLL)


def ready(bench: LbBench, started: lb_peers.Started, user: str, since: float) -> float:
    def watching() -> bool:
        found = bench.audit.requests(user, since)
        return any(q.verb == "watch" and q.resource == "services" for q in found)

    until("its watch of Services", watching, 120, started.child)
    return quiet(bench, user, since, READY_QUIET_S, 30)


def pool_used(port: int, pool: str) -> float | None:
    """Ours: the `used` addresses of `pool` by its own gauge (None until it reports it)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = [s.value for family in text_string_to_metric_families(text) for s in family.samples
             if s.name == "local_ccm_lb_pool_addresses" and s.labels.get("pool") == pool
             and s.labels.get("state") == "used"]  # fmt: skip
    return sum(found) if found else None


@dataclass
class Run:
    """One run's moving parts."""

    bench: LbBench
    impl: str
    tag: str
    count: int
    namespace: str
    user: str
    kubeconfig: Path
    watch: ServiceWatch
    pool: str = ""
    started: lb_peers.Started | None = None

    def start(self, phase: str) -> lb_peers.Started:
        log = self.bench.logs / f"lb-{self.impl}-{self.tag}-{phase}.log"
        binary = self.bench.binaries.get(self.impl, Path())
        self.started = lb_peers.start(self.impl, binary, self.kubeconfig, log)
        return self.started

    @property
    def pid(self) -> int:
        assert self.started is not None
        return self.started.child.pid

    def book(self, what: Callable[[AddressBook], Any]) -> Any:
        return self.watch.read(what)


def run_lb(bench: LbBench, impl: str, tag: str, count_: int) -> dict[str, Any]:
    """One run of `impl` with `count_` Services; the raw numbers (see metric_values)."""
    namespace = f"lb-{impl}-{tag}-{secrets.token_hex(2)}"[:63]
    bench.kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": namespace}})  # fmt: skip
    user = f"{USER_PREFIX}{impl}-{tag}-{secrets.token_hex(2)}"
    kubeconfig = bench.plane.user_kubeconfig(user, ["system:masters"])
    with ServiceWatch(bench.plane.admin_kubeconfig, namespace, impl) as watch:
        run = Run(bench, impl, tag, count_, namespace, user, kubeconfig, watch)
        run.pool = lb_peers.add_pool(bench.kube, impl, namespace)
        began = time.monotonic()
        dual = len(range(0, count_, DUAL_EVERY))
        out: dict[str, Any] = {"impl": impl, "tag": tag, "services": count_,
                               "namespace": namespace, "user": user,
                               "dual_stack_services": dual}  # fmt: skip
        try:
            for phase in (_allocate, _restart, _delete):
                out |= phase(run)
        except AssertionError as exc:  # a measurement not taken: recorded, the test fails on it
            out["error"] = str(exc)[:500]
        finally:
            if run.started is not None:
                run.started.child.stop(grace=15)
            left = run.book(lambda b: list(b.held))
            lb_peers.purge(bench.kube, namespace, iter(left))
            lb_peers.drop_pool(bench.kube, impl, namespace, run.pool)
        out |= {"watch": run.book(lambda b: b.summary(began)), "watch_errors": watch.errors[:5]}
    return out


def _allocate(run: Run) -> dict[str, Any]:
    spawned = time.time()
    started = run.start("a")
    ready_at = ready(run.bench, started, run.user, spawned)
    startup_cpu, rss_ready = cpu_seconds(run.pid), memory_kib(run.pid)["VmRSS"]
    began, cpu0 = time.time(), cpu_seconds(run.pid)
    first = time.monotonic()

    def create(kube: Client, i: int) -> None:
        kube.create(SERVICES, service_body(run.namespace, i), namespace=run.namespace)

    created = in_threads(run.bench.plane, run.count, create)
    timeout = 120 + run.count * (1.5 if run.impl == "kube-vip-cp" else 0.2)
    until(f"{run.count} Services addressed",
          lambda: run.book(lambda b: len(b.addressed_at) >= run.count), timeout,
          started.child)  # fmt: skip
    addressed = run.book(lambda b: max(b.addressed_at.values()))
    done = quiet(run.bench, run.user, began, QUIET_S, 60 + run.count * 0.05)
    cpu, mem = cpu_seconds(run.pid) - cpu0, memory_kib(run.pid)
    asked = run.bench.audit.requests(run.user, began, done)
    startup = run.bench.audit.requests(run.user, spawned, began)
    return {
        "spawn_to_ready_s": round(ready_at - spawned, 2), "startup_cpu_s": round(startup_cpu, 2),
        "startup_requests": len(startup), "rss_ready_mib": round(rss_ready / 1024, 1),
        "create_s": round(created - first, 2),
        "addressed_after_last_create_s": round(addressed - created, 2),
        "addressed_after_first_create_s": round(addressed - first, 2),
        "quiet_after_addressed_s": round(done - began - (addressed - first), 2),
        "allocate_cpu_s": round(cpu, 2),
        "allocate_requests": len(asked), "allocate_writes": count(asked, WRITE_VERBS),
        "allocate_by_kind": _kinds(asked),
        "rss_steady_mib": round(mem["VmRSS"] / 1024, 1),
        "rss_peak_mib": round(mem["VmHWM"] / 1024, 1),
    }  # fmt: skip


def _kinds(asked: list[Any]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for q in asked:
        key = f"{q.verb} {q.resource}"
        kinds[key] = kinds.get(key, 0) + 1
    return dict(sorted(kinds.items()))


def _restart(run: Run) -> dict[str, Any]:
    assert run.started is not None
    run.started.child.stop(grace=15)
    changed = run.book(lambda b: b.changed)
    spawned = time.time()
    started = run.start("b")
    ready(run.bench, started, run.user, spawned)
    done = quiet(run.bench, run.user, spawned, RESTART_QUIET_S, 120 + run.count * 0.2)
    asked = run.bench.audit.requests(run.user, spawned, done)
    return {
        "restart_requests": len(asked), "restart_writes": count(asked, WRITE_VERBS),
        "restart_by_kind": _kinds(asked),
        "restart_changed": run.book(lambda b: b.changed) - changed,
        "restart_cpu_s": round(cpu_seconds(run.pid), 2),
        "restart_quiet_after_s": round(done - spawned, 2),
        "restart_rss_mib": round(memory_kib(run.pid)["VmRSS"] / 1024, 1),
    }  # fmt: skip


def _delete(run: Run) -> dict[str, Any]:
    assert run.started is not None
    names = run.book(lambda b: sorted(b.held))
    began, cpu0, first = time.time(), cpu_seconds(run.pid), time.monotonic()

    def delete(kube: Client, i: int) -> None:
        kube.delete(SERVICES, names[i], namespace=run.namespace)

    issued = in_threads(run.bench.plane, len(names), delete)
    timeout = 120 + run.count * (0.5 if run.impl == "kube-vip-cp" else 0.2)
    until("every Service gone", lambda: run.book(lambda b: b.live == 0), timeout,
          run.started.child)  # fmt: skip
    gone = run.book(lambda b: max((b.gone_at.get(n, first) for n in names), default=first))
    released = None
    if run.impl == "ours":
        port = run.started.metrics_port
        until("the pool's used addresses back to 0", lambda: pool_used(port, run.pool) == 0,
              timeout, run.started.child)  # fmt: skip
        released = round(time.monotonic() - first, 2)
    done = quiet(run.bench, run.user, began, QUIET_S, 60 + run.count * 0.05)
    asked = run.bench.audit.requests(run.user, began, done)
    return {
        "delete_requests_s": round(issued - first, 2), "gone_after_first_delete_s":
        round(gone - first, 2), "released_after_first_delete_s": released,
        "delete_cpu_s": round(cpu_seconds(run.pid) - cpu0, 2),
        "delete_requests": len(asked), "delete_writes": count(asked, WRITE_VERBS),
        "delete_by_kind": _kinds(asked),
    }  # fmt: skip


def metric_values(run: dict[str, Any]) -> dict[str, float | None]:
    """The rows of tests/bench/compare_peers.py from one run."""
    n = run["services"]

    def per_service(key: str, scale: float = 1.0) -> float | None:
        return None if run.get(key) is None else round(run[key] * scale / n, 3)

    return {
        "lb_addressed_s": run.get("addressed_after_last_create_s"),
        "lb_cpu_ms_per_service": per_service("allocate_cpu_s", 1000),
        "lb_requests_per_service": per_service("allocate_requests"),
        "lb_writes_per_service": per_service("allocate_writes"),
        "lb_rss_steady_mib": run.get("rss_steady_mib"),
        "lb_rss_peak_mib": run.get("rss_peak_mib"),
        "lb_restart_writes": run.get("restart_writes"),
        "lb_restart_changed": run.get("restart_changed"),
        "lb_gone_s": run.get("gone_after_first_delete_s"),
        "lb_released_s": run.get("released_after_first_delete_s"),
        "lb_delete_cpu_ms_per_service": per_service("delete_cpu_s", 1000),
        "lb_duplicates": run["watch"]["duplicates"],
    }
