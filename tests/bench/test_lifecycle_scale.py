"""node-lifecycle-controller at scale: with 5 000 kwok Nodes - RSS, CPU seconds per hour idle,
API requests and bytes per hour,
and the time from "timeout expired" to "Node deleted" for unreachable Nodes (probes concurrent).
Budgets: RSS ≤ 150 MiB; deletion ≤ 2 s after the timeout for a single Node.

A control plane of its own with the scale flags and kwok (Node Leases
of 200 s, so 5,000 Nodes renew about 100 Leases per second). The controller is the real console
script with the shipped RBAC, as a
subprocess. Numbers are recorded (test-artifacts/bench/lifecycle-*.json, docs/benchmarks.md),
never asserted against the budgets: a test fails only when a measurement could not be taken.

Every probe target is loopback (the kwok Nodes: 127.1.x.y, the self-check's peers) or an
unused address of this test's host-side /28 (the unreachable Nodes); nothing leaves the machine.
"""

from __future__ import annotations

import math
import os
import queue
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import names
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane, Options, start_control_plane
from tests.support.fixtures import run_state
from tests.support.kwok import (
    Kwok,
    create_fake_nodes,
    fake_node_body,
    is_ready,
    loopback_address,
    start_kwok,
)
from tests.support.lifecycle_bench import (
    Controller,
    by_request,
    counter_delta,
    machine_facts,
    net_rates,
    per_hour,
    percentile,
    read_counters,
    write_result,
)
from tests.support.lifecycle_harness import AUTOSCALER_TAINT, apply_rbac, controller_kubeconfig
from tests.support.netns import NetnsFactory
from tests.support.processes import cpu_seconds, memory_kib

pytestmark = pytest.mark.kwok
# The environment overrides are for a quick check of the bench itself, not for numbers.
NODES = int(os.environ.get("LOCAL_CCM_BENCH_LIFECYCLE_NODES", "5000"))
IDLE_WINDOW = float(os.environ.get("LOCAL_CCM_BENCH_LIFECYCLE_WINDOW", "120"))
SINGLE_RUNS = 3  # single-Node deletions per probe setting; the median is the figure
BATCH = 200  # at most 200 NotReady Nodes: the controller probes every NotReady Node
READY_TIMEOUT = 360.0
FIELD_MANAGER = "local-ccm-bench"


@dataclass(frozen=True)
class Scale:
    plane: ControlPlane
    kwok: Kwok
    kube: Client
    labels: dict[str, str]
    create_s: float
    ready_s: float


@pytest.fixture(scope="module")
def scale(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Scale]:
    """The scale plane, kwok, and NODES kwok Nodes that are Ready (bounded: READY_TIMEOUT)."""
    state = run_state(request.config)
    opts = Options(run_id=state.run_id, artifacts=state.artifacts, scale=True,
                   fallback_tmp=Path(tempfile.gettempdir()), keep=state.keep_control_plane,
                   plane=f"lifecycle-bench-{secrets.token_hex(3)}")  # fmt: skip
    plane = start_control_plane(binaries, opts)
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
    try:
        kwok = start_kwok(plane, binaries, lease_seconds=200)
        labels = names.test_labels(state.run_id, "bench-lifecycle-scale")
        started = time.monotonic()
        bodies = [
            fake_node_body(f"kwok-{i:05d}", labels, addresses=[internal(loopback_address(i))])
            for i in range(NODES)
        ]
        create_fake_nodes(lambda body: kube.create(r.NODES, body), bodies)
        created = time.monotonic()
        wait_ready(kube, labels)
        yield Scale(plane, kwok, kube, labels, created - started, time.monotonic() - created)
    finally:
        kube.close()
        plane.stop()


def internal(address: str) -> dict[str, str]:
    return {"type": "InternalIP", "address": address}


def wait_ready(kube: Client, labels: dict[str, str]) -> None:
    selector = f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}"
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        ready = sum(map(is_ready, list_all(kube, selector)))
        if ready >= NODES:
            return
        assert time.monotonic() < deadline, f"{ready}/{NODES} kwok Nodes Ready in time"
        time.sleep(5)


def list_all(kube: Client, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = kube.list(r.NODES, label_selector=selector, limit=500, continue_token=token)
        items += page.get("items") or []
        token = page.get("metadata", {}).get("continue") or None
        if token is None:
            return items


@pytest.fixture
def identity(scale: Scale, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """(namespace, kubeconfig): the shipped RBAC in a fresh namespace of the scale plane."""
    state = run_state(request.config)
    namespace = names.unique_name(request.node.name, secrets.token_hex(3))
    labels = names.test_labels(state.run_id, request.node.nodeid)
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": labels}}  # fmt: skip
    scale.kube.create(r.NAMESPACES, body)
    track = Tracker(scale.kube, state.run_id)
    apply_rbac(scale.kube, track, labels, name=namespace, namespace=namespace, lease=namespace)
    yield namespace, controller_kubeconfig(scale.plane, scale.kube, namespace)
    track.cleanup()


def controller_argv(namespace: str, *more: str) -> list[str]:
    return [f"--namespace={namespace}", f"--leader-elect-id={namespace}", *more]


# ------------------------------------------------------------------ idle cost
def window(plane: ControlPlane, pid: int | None, seconds: float) -> dict[str, Any]:
    """API counters (and the controller's CPU and RSS, when `pid`) over `seconds`."""
    before, cpu0, t0 = read_counters(plane), cpu_seconds(pid) if pid else 0.0, time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    delta = counter_delta(before, read_counters(plane))
    out: dict[str, Any] = {
        "seconds": round(elapsed, 1),
        "requests": by_request(delta, "apiserver_request_total"),
        "response_bytes": by_request(delta, "apiserver_response_sizes_sum"),
        "watch_events": by_request(delta, "apiserver_watch_events_total"),
        "watch_event_bytes": by_request(delta, "apiserver_watch_events_sizes_sum"),
    }
    if pid:
        cpu = cpu_seconds(pid) - cpu0
        out |= {"cpu_s": round(cpu, 3), "cpu_s_per_hour": per_hour(cpu, elapsed),
                "rss_kib": memory_kib(pid)}  # fmt: skip
    return out


def net_of(measured: dict[str, Any], background: dict[str, Any]) -> dict[str, Any]:
    """The controller's share: its resources' requests and bytes minus the background rate."""
    ratio = measured["seconds"] / background["seconds"]
    requests = net_rates(measured["requests"], background["requests"], ratio)
    sizes = net_rates(measured["response_bytes"], background["response_bytes"], ratio)
    return {
        "requests_in_window": requests,
        "requests_per_hour": per_hour(sum(requests.values()), measured["seconds"]),
        "response_bytes_per_hour": per_hour(sum(sizes.values()), measured["seconds"]),
    }


@pytest.mark.timeout(600)
def test_lifecycle_idle_cost_with_5000_nodes(
    scale: Scale, identity: tuple[str, Path], test_artifacts: Path
) -> None:
    seconds = IDLE_WINDOW
    namespace, kubeconfig = identity
    result: dict[str, Any] = {"machine": machine_facts(scale.plane), "nodes": NODES,
                              "create_s": round(scale.create_s, 1),
                              "kwok_ready_s": round(scale.ready_s, 1)}  # fmt: skip
    log = test_artifacts / "controller-idle.log"
    ctl = Controller.start(kubeconfig, controller_argv(namespace), log)  # default flags
    try:
        result["start_to_ready_s"] = round(ctl.wait_ready(120), 2)
        assert ctl.metric("watched_nodes") >= NODES
        scale.kwok.child.stop()  # nothing else writes now; without KCM the Nodes stay Ready
        time.sleep(10)  # settle: the first evaluations and Lease renewals have run
        result["quiet"] = window(scale.plane, ctl.pid, seconds)
        result["evaluation_seconds_sum"] = ctl.metric("evaluation_duration_seconds_sum")
        result["evaluations"] = ctl.metric("evaluation_duration_seconds_count")
    finally:
        result["exit_code"] = ctl.stop()
    time.sleep(3)
    result["background"] = window(scale.plane, None, seconds)
    result["controller_api"] = net_of(result["quiet"], result["background"])
    rss = result["quiet"]["rss_kib"]
    result["summary"] = {
        "rss_mib": round(rss["VmRSS"] / 1024, 1), "hwm_mib": round(rss["VmHWM"] / 1024, 1),
        "cpu_s_per_hour": result["quiet"]["cpu_s_per_hour"],
        "api_requests_per_hour": result["controller_api"]["requests_per_hour"],
        "api_response_bytes_per_hour": result["controller_api"]["response_bytes_per_hour"],
        "ms_per_evaluation": round(1000 * result["evaluation_seconds_sum"]
                                   / max(1.0, result["evaluations"]), 2),
    }  # fmt: skip
    write_result("idle", result)
    assert result["quiet"]["requests"], "no API counters moved: nothing was measured"


# ------------------------------------------------------------------ deletion latency
class Deletions:
    """An admin watch of the unreachable Nodes; the monotonic time each one was deleted."""

    def __init__(self, kube: Client, selector: str) -> None:
        listed = kube.list(r.NODES, label_selector=selector)
        self.stream = kube.watch(r.NODES, label_selector=selector, timeout_seconds=900,
                                 resource_version=listed["metadata"]["resourceVersion"],
                                 allow_bookmarks=False)  # fmt: skip
        self.seen: queue.Queue[tuple[str, float]] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if event.type == "DELETED":
                    self.seen.put((event.object["metadata"]["name"], time.monotonic()))
        except (ApiError, OSError):
            pass  # closed

    def wait(self, wanted: set[str], timeout: float) -> dict[str, float]:
        found: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while set(found) < wanted and (left := deadline - time.monotonic()) > 0:
            try:
                name, when = self.seen.get(timeout=left)
            except queue.Empty:
                break
            found[name] = when
        return {k: v for k, v in found.items() if k in wanted}

    def close(self) -> None:
        self.stream.close()
        self.thread.join(timeout=10)


def unreachable_batch(
    factory: NodeFactory, addresses: Sequence[str], count: int, timeout: float, lead: float
) -> tuple[list[str], float]:
    """`count` autoscaler-tainted Nodes, Ready=Unknown since (T − timeout) with T a whole
    second ≥ `lead` s from now, so their timeout expires at T: the names and T (monotonic)."""
    expiry = datetime.fromtimestamp(math.ceil(time.time() + lead), UTC)
    since = expiry - timedelta(seconds=timeout)  # backdated: the API keeps whole seconds

    def make(i: int) -> str:
        node = factory(
            taints=[AUTOSCALER_TAINT],
            ready="Unknown",
            ready_since=since,
            addresses=[{"type": "InternalIP", "address": addresses[i % len(addresses)]}],
        )
        return str(node["metadata"]["name"])  # fmt: skip

    with ThreadPoolExecutor(max_workers=4) as pool:
        made = list(pool.map(make, range(count)))
    assert datetime.now(UTC) < expiry, "creating the batch took longer than its lead"
    return made, time.monotonic() + (expiry.timestamp() - time.time())


def latencies(deleted: dict[str, float], expiry: float, wanted: Sequence[str]) -> dict[str, Any]:
    values = [deleted[n] - expiry for n in wanted if n in deleted]
    out: dict[str, Any] = {"nodes": len(wanted), "deleted": len(values)}
    if values:
        out |= {"p50_s": round(percentile(values, 50), 3),
                "p95_s": round(percentile(values, 95), 3),
                "min_s": round(min(values), 3), "max_s": round(max(values), 3)}  # fmt: skip
    return out


@dataclass(frozen=True)
class Batches:
    factory: NodeFactory
    selector: str  # every Node the factory makes
    addresses: Sequence[str]  # unused addresses of the test's /28


def run_deletions(
    scale: Scale, kubeconfig: Path, argv: Sequence[str], batches: Batches, *,
    sizes: Sequence[int], log: Path,
) -> dict[str, Any]:  # fmt: skip
    """One controller; for each size, a batch whose timeout expires at once, timed."""
    timeout = 60.0
    ctl = Controller.start(kubeconfig, [*argv, f"--not-ready-timeout={timeout:g}s"], log)
    watch = Deletions(scale.kube, batches.selector)
    out: dict[str, Any] = {}
    try:
        out["start_to_ready_s"] = round(ctl.wait_ready(120), 2)
        runs = []
        for size in sizes:
            made, expiry = unreachable_batch(
                batches.factory, batches.addresses, size, timeout, lead=8 + size / 10
            )
            deleted = watch.wait(set(made), timeout=max(0.0, expiry - time.monotonic()) + 90)
            runs.append(latencies(deleted, expiry, made))
        out["runs"] = runs
        singles = [run["max_s"] for run in runs if run["nodes"] == 1 and run["deleted"] == 1]
        out["single_median_s"] = round(statistics.median(singles), 3) if singles else None
        out["rss_kib"] = memory_kib(ctl.pid)
        out["probes_total"] = ctl.metric("probes_total")
    finally:
        watch.close()
        out["exit_code"] = ctl.stop()
    return out


@pytest.mark.timeout(600)
def test_lifecycle_deletion_latency_after_the_timeout(
    scale: Scale, identity: tuple[str, Path], netns: NetnsFactory, test_artifacts: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    namespace, kubeconfig = identity
    link = netns.host_link(netns())
    silent = [str(link.block[i]) for i in range(5, 15)]  # unused addresses of this /28
    run_id = run_state(request.config).run_id
    labels = names.test_labels(run_id, request.node.nodeid)
    factory = NodeFactory(scale.kube, Tracker(scale.kube, run_id), labels, "bench-unreachable")
    batches = Batches(factory, f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}", silent)
    limits = ("--max-deletions-per-interval=1000", "--probe-concurrency=64")
    result: dict[str, Any] = {"machine": machine_facts(scale.plane), "nodes": NODES,
                              "unreachable_addresses": silent}  # fmt: skip
    ones = (1,) * SINGLE_RUNS
    fast = controller_argv(namespace, *limits, "--ping-count=1", "--ping-timeout=1s")
    result["probe_1s"] = run_deletions(scale, kubeconfig, fast, batches, sizes=(*ones, BATCH),
                                       log=test_artifacts / "controller-fast.log")  # fmt: skip
    default = controller_argv(namespace, *limits)
    log = test_artifacts / "controller-default.log"
    result["probe_default"] = run_deletions(
        scale, kubeconfig, default, batches, sizes=ones, log=log
    )
    write_result("deletion", result)
    assert result["probe_1s"]["single_median_s"] is not None, result
