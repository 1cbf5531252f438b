"""node-bmc at 500 BMCs: Redfish requests per Node-hour, API requests per hour, the
controller's CPU and RSS over a steady window, and the time from a System powered off to the
shutdown taint on its NotReady Node.

A scale plane of its own (no request throttling, the audit log on), kwok keeping 500 Nodes
Ready, one sushy-tools emulator (tests/support/sushy.py; its fake driver) holding a System for
each, a credentials Secret and a NodeBMC per Node (as Metal3 keeps one Secret per host), and
`local-ccm-controller-manager --controllers=node-bmc` as shipped: the console script, default
flags (leader election on), as a client-certificate user of its own so the audit log tells its
requests apart. Redfish requests are counted twice, by the controller's own histogram and in
the emulator's access log; API requests in the audit log, by resource. The steady window is
600 s by default: one period of the 10-minute Secret re-read and two of the 5-minute
lastContact refresh, so the periodic writes are counted in their proportion.

The latency: kwok is stopped (the kubelets are gone), ~20 Nodes are made NotReady as the
node lifecycle controller does (Ready=Unknown), and their Systems are switched Off behind the
controller's back one after another, spread over one poll interval; an admin watch times each
taint. The poll interval bounds it: a power-off is seen at the System's next poll.

Settings (for checking the bench itself, or another size): BENCH_BMC_NODES (500),
BENCH_BMC_WINDOW (600 s), BENCH_BMC_POLL (--bmc-poll-interval, empty: the default),
BENCH_BMC_CONCURRENCY (--bmc-concurrent-polls, empty: the default), BENCH_BMC_EMULATORS (1:
the controller sends one request at a time per BMC endpoint, so one emulator is polled one
request at a time), BENCH_BMC_LATENCY_NODES (20). Numbers are recorded, never asserted; the
test fails only when the outcome is wrong (a BMC never read, a taint missing or on the wrong
Node) or a measurement could not be taken.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from local_ccm.bmc.api import NODEBMCS
from local_ccm.bmc.options import Settings
from local_ccm.gosyntax import parse_go_duration
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError
from local_ccm.names import SHUTDOWN_TAINT
from tests.support import bmc, crds, names
from tests.support import bmc_bench as bb
from tests.support import resources as r
from tests.support.audit import AuditLog, audit_log
from tests.support.binaries import ensure
from tests.support.controlplane import ControlPlane, Options, start_control_plane
from tests.support.fixtures import run_state
from tests.support.kwok import Kwok, create_fake_nodes, fake_node_body, is_ready, start_kwok
from tests.support.lifecycle_bench import RESULTS, machine_facts
from tests.support.processes import Child, cpu_seconds, free_port, memory_kib, spawn, tail
from tests.support.sushy import SushyEmulator, emulator_or_skip
from tests.support.waiting import eventually

NODES = int(os.environ.get("BENCH_BMC_NODES", "500"))
WINDOW = float(os.environ.get("BENCH_BMC_WINDOW", "600"))
POLL = os.environ.get("BENCH_BMC_POLL", "")
CONCURRENCY = os.environ.get("BENCH_BMC_CONCURRENCY", "")
EMULATORS = int(os.environ.get("BENCH_BMC_EMULATORS", "1"))
LATENCY_NODES = int(os.environ.get("BENCH_BMC_LATENCY_NODES", "20"))
INTERVAL = parse_go_duration(POLL) if POLL else Settings().poll_interval
USER = "local-ccm-bench-node-bmc"
FIELD_MANAGER = "local-ccm-bench"
pytestmark = [pytest.mark.bench, pytest.mark.kwok,
              pytest.mark.timeout(int(WINDOW + 8 * INTERVAL + 1200))]  # fmt: skip
GROUPS = {  # the audit log's resources, by what they are for
    "leader election": ["leases"], "NodeBMC status": ["nodebmcs/status"],
    "credentials Secrets": ["secrets"], "shutdown taints": ["nodes"], "Events": ["events"],
    "watches and lists": ["nodebmcs"],
}  # fmt: skip


@dataclass(frozen=True)
class World:
    plane: ControlPlane
    kwok: Kwok
    kube: Client
    emulators: list[SushyEmulator]
    owner: dict[str, SushyEmulator]  # Node name -> the emulator holding its System
    namespace: str  # the credentials namespace
    selector: str  # every Node of the bench
    started: float  # monotonic, for the wall time
    setup: dict[str, float]


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    started, state = time.monotonic(), run_state(request.config)
    executable = emulator_or_skip(request.config)
    binaries = ensure(["etcd", "kube-apiserver", "kwok"])
    opts = Options(run_id=state.run_id, artifacts=state.artifacts, scale=True, audit=True,
                   fallback_tmp=Path(tempfile.gettempdir()), keep=state.keep_control_plane,
                   plane=f"bmc-bench-{secrets.token_hex(3)}")  # fmt: skip
    with contextlib.ExitStack() as stack:
        plane = start_control_plane(binaries, opts)
        stack.callback(plane.stop)
        kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER)
        stack.callback(kube.close)
        crds.install(kube, (bmc.CRD_FILE,))
        kwok = start_kwok(plane, binaries, lease_seconds=200)  # as the lifecycle bench
        labels = names.test_labels(state.run_id, "bench-bmc-scale")
        nodes = [f"bmc-{i:04d}" for i in range(NODES)]
        setup: dict[str, float] = {}
        mark = time.monotonic()
        create_fake_nodes(lambda b: kube.create(r.NODES, b),
                          [fake_node_body(n, labels) for n in nodes])  # fmt: skip
        selector = f"{names.TEST_LABEL}={labels[names.TEST_LABEL]}"
        eventually(lambda: all_ready(kube, selector), timeout=360, interval=5,
                   message=f"{NODES} kwok Nodes Ready")  # fmt: skip
        setup["nodes_ready_s"], mark = round(time.monotonic() - mark, 1), time.monotonic()
        emulators = []
        for k in range(EMULATORS):
            emulator = SushyEmulator(plane.logs_dir / f"sushy-{k}", nodes[k::EMULATORS],
                                     executable=executable)  # fmt: skip
            stack.callback(emulator.stop)
            emulator.start()
            emulators.append(emulator)
        owner = {n: e for e in emulators for n in e.systems}
        setup["emulators_ready_s"], mark = round(time.monotonic() - mark, 1), time.monotonic()
        namespace = bmc.namespace(kube)
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: machine(kube, namespace, owner[n], n), nodes))
        setup["nodebmcs_created_s"] = round(time.monotonic() - mark, 1)
        yield World(plane, kwok, kube, emulators, owner, namespace, selector, started, setup)


def all_ready(kube: Client, selector: str) -> bool:
    found = kube.list(r.NODES, label_selector=selector)["items"]
    return len(found) == NODES and all(map(is_ready, found))


def machine(kube: Client, namespace: str, emulator: SushyEmulator, name: str) -> Obj:
    """Node `name`'s credentials Secret and NodeBMC."""
    bmc.secret(kube, namespace, f"{name}-bmc", emulator.username, emulator.password)
    return bmc.nodebmc(kube, name, emulator.address(name), f"{name}-bmc",
                       caBundle=emulator.ca_pem)  # fmt: skip


# ------------------------------------------------------------------ the controller
@dataclass
class Manager:
    child: Child
    metrics_port: int
    health_port: int
    spawned: float

    @classmethod
    def start(cls, kubeconfig: Path, namespace: str, log: Path) -> Manager:
        binary = Path(sys.executable).parent / "local-ccm-controller-manager"
        metrics, health = free_port(), free_port()
        argv = [str(binary), "--controllers=node-bmc", f"--kubeconfig={kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{metrics}", "--metrics-secure=false",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--bmc-credentials-namespace={namespace}",
                f"--leader-elect-resource-namespace={namespace}"]  # fmt: skip
        argv += [f"--bmc-poll-interval={POLL}"] if POLL else []
        argv += [f"--bmc-concurrent-polls={CONCURRENCY}"] if CONCURRENCY else []
        spawned = time.monotonic()
        child = spawn("node-bmc", argv, log, env={"PATH": "/usr/bin:/bin"})
        return cls(child, metrics, health, spawned)

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                return int(answer.status), answer.read().decode()
        except OSError:
            return 0, ""

    def scrape(self) -> bb.Scrape:
        status, text = self.get(self.metrics_port, "/metrics")
        assert status == 200, f"/metrics answered {status}:\n{tail(self.child.log_path)}"
        return bb.Scrape.parse(text)

    def alive(self) -> None:
        code = self.child.exited()
        assert code is None, f"node-bmc exited {code}:\n{tail(self.child.log_path)}"


def first_round(world: World, ctl: Manager) -> dict[str, Any]:
    """Spawn -> ready (leading, caches synced) -> every NodeBMC read On and Reachable."""
    eventually(lambda: ctl.get(ctl.health_port, "/readyz")[0] == 200, timeout=120,
               interval=0.1, message="node-bmc ready")  # fmt: skip
    ready = time.monotonic()

    def all_read() -> bool:
        ctl.alive()
        items = world.kube.list(NODEBMCS)["items"]
        return len(items) == NODES and all(contacted(i) for i in items)

    eventually(all_read, timeout=600, interval=1, message=f"{NODES} NodeBMCs read On")
    rss = memory_kib(ctl.child.pid)
    return {"spawn_to_ready_s": round(ready - ctl.spawned, 2),
            "spawn_to_all_read_s": round(time.monotonic() - ctl.spawned, 1),
            "cpu_s": round(cpu_seconds(ctl.child.pid), 2),
            "rss_mib": round(rss["VmRSS"] / 1024, 1)}  # fmt: skip


def contacted(item: Obj) -> bool:
    status = item.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
    return status.get("powerState") == "On" and conditions.get("Reachable") == "True"


# ------------------------------------------------------------------ the steady window
def steady_window(world: World, ctl: Manager, audit: AuditLog) -> dict[str, Any]:
    pid, logs = ctl.child.pid, [e.log_path for e in world.emulators]
    before, cpu0 = ctl.scrape(), cpu_seconds(pid)
    bmc_cpu0 = sum(cpu_seconds(e.child.pid) for e in world.emulators if e.child)
    offsets = [path.stat().st_size for path in logs]
    since, t0, rss = datetime.now(UTC), time.monotonic(), []
    while (left := t0 + WINDOW - time.monotonic()) > 0:
        time.sleep(min(10.0, left))
        rss.append(memory_kib(pid)["VmRSS"])
        ctl.alive()
    until, seconds = datetime.now(UTC), time.monotonic() - t0
    after, cpu = ctl.scrape(), cpu_seconds(pid) - cpu0
    bmc_cpu = sum(cpu_seconds(e.child.pid) for e in world.emulators if e.child) - bmc_cpu0
    at_bmc: dict[str, int] = {}
    for path, offset in zip(logs, offsets, strict=True):
        for key, n in bb.access_requests(bb.read_log_from(path, offset)[0]).items():
            at_bmc[key] = at_bmc.get(key, 0) + n
    redfish = after.total(bb.REDFISH_COUNT) - before.total(bb.REDFISH_COUNT)
    took = (after.total("local_ccm_bmc_redfish_request_duration_seconds_sum")
            - before.total("local_ccm_bmc_redfish_request_duration_seconds_sum"))  # fmt: skip
    buckets = bb.bucket_delta(before, after, bb.REDFISH_BUCKET)
    api = bb.by_request(audit.requests(user=USER, since=since, until=until))
    return {
        "seconds": round(seconds, 1),
        "cpu_s": round(cpu, 2), "cpu_s_per_hour": bb.per_hour(cpu, seconds),
        "rss_mib_min": round(min(rss) / 1024, 1), "rss_mib_max": round(max(rss) / 1024, 1),
        "rss_mib_end": round(rss[-1] / 1024, 1),
        "redfish_requests": redfish,
        "redfish_requests_per_node_hour": bb.per_node_hour(redfish, seconds, NODES),
        "redfish_at_emulator": at_bmc,
        "redfish_at_emulator_per_node_hour": bb.per_node_hour(sum(at_bmc.values()), seconds,
                                                              NODES),
        "redfish_mean_s": round(took / redfish, 4) if redfish else None,
        "redfish_p50_le_s": bb.quantile_le(buckets, 0.5),
        "redfish_p99_le_s": bb.quantile_le(buckets, 0.99),
        "redfish_in_flight_mean": round(took / seconds, 3),  # Little's law
        "poll_errors": delta(before, after, "local_ccm_bmc_errors_total", "reason"),
        "rest_client_requests": delta(before, after, "rest_client_requests_total", "method"),
        "api_requests": api,
        "api_requests_per_hour": bb.per_hour(sum(api.values()), seconds),
        "api_requests_per_hour_by_use": {k: bb.per_hour(v, seconds) for k, v in
                                         bb.shares(api, GROUPS).items()},
        "emulator_cpu_s_per_hour": bb.per_hour(bmc_cpu, seconds),
    }  # fmt: skip


def delta(before: bb.Scrape, after: bb.Scrape, name: str, label: str) -> dict[str, float]:
    old = before.by_label(name, label)
    moved = {k: v - old.get(k, 0.0) for k, v in after.by_label(name, label).items()}
    return {k: v for k, v in sorted(moved.items()) if v}


# ------------------------------------------------------------------ power off -> taint
class Taints:
    """An admin watch of the bench's Nodes: when each first carried the shutdown taint."""

    def __init__(self, kube: Client, selector: str) -> None:
        listed = kube.list(r.NODES, label_selector=selector, limit=1)
        self.stream = kube.watch(r.NODES, label_selector=selector, timeout_seconds=900,
                                 resource_version=listed["metadata"]["resourceVersion"],
                                 allow_bookmarks=False)  # fmt: skip
        self.seen: queue.Queue[tuple[str, float]] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if has_taint(event.object):
                    self.seen.put((event.object["metadata"]["name"], time.monotonic()))
        except (ApiError, OSError):
            pass  # closed

    def wait(self, wanted: set[str], timeout: float) -> dict[str, float]:
        found: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while not wanted <= set(found) and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                name, when = self.seen.get(timeout=left)
                found.setdefault(name, when)
        return found

    def close(self) -> None:
        self.stream.close()
        self.thread.join(timeout=10)


def has_taint(node: Obj) -> bool:
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(t.get("key") == SHUTDOWN_TAINT and t.get("effect") == "NoSchedule" for t in taints)


def taint_latency(world: World, ctl: Manager) -> dict[str, Any]:
    world.kwok.child.stop()  # the kubelets are gone: nothing reports these Nodes Ready again
    chosen = bb.spread(sorted(world.owner), LATENCY_NODES)
    for name in chosen:
        bmc.set_ready(world.kube, name, "Unknown")
    time.sleep(5)  # decided on the last poll (On): nothing to write
    watch, off = Taints(world.kube, world.selector), {}
    try:
        start, gap = time.monotonic(), INTERVAL / len(chosen)
        for i, name in enumerate(chosen):
            time.sleep(max(0.0, start + i * gap - time.monotonic()))
            world.owner[name].set_power(name, "Off")
            off[name] = time.monotonic()
        seen = watch.wait(set(chosen), timeout=2.5 * INTERVAL + 30)
    finally:
        watch.close()
    ctl.alive()
    tainted = sorted(n["metadata"]["name"] for n in list_nodes(world) if has_taint(n))
    assert tainted == sorted(chosen), f"tainted {tainted}, powered off {chosen}"
    latencies = [seen[n] - off[n] for n in chosen if n in seen]
    return {"nodes": chosen, "interval_s": INTERVAL,
            "latencies_s": [round(x, 2) for x in latencies],
            **bb.latency_summary(latencies, INTERVAL)}  # fmt: skip


def list_nodes(world: World) -> list[Obj]:
    items: list[Obj] = world.kube.list(r.NODES, label_selector=world.selector)["items"]
    return items


# ------------------------------------------------------------------ the run
def test_node_bmc_with_500_bmcs(world: World, test_artifacts: Path) -> None:
    result: dict[str, Any] = {
        **machine_facts(world.plane), "nodes": NODES, "emulators": EMULATORS,
        "settings": {"BENCH_BMC_WINDOW": WINDOW, "BENCH_BMC_POLL": POLL or "default",
                     "BENCH_BMC_CONCURRENCY": CONCURRENCY or "default",
                     "BENCH_BMC_LATENCY_NODES": LATENCY_NODES, "poll_interval_s": INTERVAL},
        "setup": world.setup,
    }  # fmt: skip
    kubeconfig = world.plane.user_kubeconfig(USER, ["system:masters"])
    ctl = Manager.start(kubeconfig, world.namespace, test_artifacts / "node-bmc.log")
    try:
        result["first_round"] = first_round(world, ctl)
        time.sleep(INTERVAL)  # the first round's status writes and Events are done
        result["steady"] = steady_window(world, ctl, audit_log(world.plane))
        result["taint_latency"] = taint_latency(world, ctl)
        hwm = memory_kib(ctl.child.pid)["VmHWM"]
        result["rss_peak_mib"] = round(hwm / 1024, 1)
    finally:
        ctl.child.stop(grace=15)
    result["wall_s"] = round(time.monotonic() - world.started, 1)
    report(result)
    assert result["steady"]["redfish_requests"] > 0, "no Redfish request counted"
    assert result["steady"]["api_requests"], "no API request of the controller in the audit log"


def report(result: dict[str, Any]) -> Path:
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bmc-scale-{NODES}-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    steady, taint = result["steady"], result["taint_latency"]
    print(f"\nbmc-scale: {path}\n{json.dumps(result, indent=2)}")
    for line in summary_lines(steady, taint, result):
        print(line)
    return path


def summary_lines(steady: dict[str, Any], taint: dict[str, Any],
                  result: dict[str, Any]) -> Sequence[str]:  # fmt: skip
    return [
        f"Redfish requests per Node-hour: {steady['redfish_requests_per_node_hour']} "
        f"(emulator: {steady['redfish_at_emulator_per_node_hour']})",
        f"API requests per hour: {steady['api_requests_per_hour']} "
        f"{steady['api_requests_per_hour_by_use']}",
        f"CPU-s per hour: {steady['cpu_s_per_hour']}; RSS steady {steady['rss_mib_end']} MiB, "
        f"peak {result['rss_peak_mib']} MiB",
        f"power off -> taint: median {taint.get('median_s')} s, max {taint.get('max_s')} s "
        f"(interval {taint['interval_s']} s)",
        f"wall: {result['wall_s']} s",
    ]
