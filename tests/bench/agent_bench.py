"""Shared parts of the agent benchmarks (tests/bench/test_agent_*.py).

The agent under test is the real ``local-ccm`` console script, one process per run, started
inside a network namespace with ``ip netns exec`` (pattern 1 in docs/testing.md: the loopback
relay carries its API connections to the test apiserver). It authenticates as a
client-certificate user bound to exactly the agent's roles as the chart ships them. A separate
admin watch, opened in the test process, is the observer of every latency: it sees what any
other client of the API would see. Results go to
``test-artifacts/bench/agent-<name>-<time>.json`` with the machine facts and the load average at
the time, because this 2-core machine is shared.
"""

from __future__ import annotations

import http.client
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_ccm import names as product
from local_ccm.kube.client import Client, WatchStream
from local_ccm.kube.errors import ApiError
from local_ccm.netlink.netns import run_in_netns
from tests.support import benchrecord
from tests.support import resources as r
from tests.support.agent_process import RESOURCES
from tests.support.chart import RbacTarget, ShippedRbac, bound_to_user
from tests.support.netns import NetnsFactory, Uplink
from tests.support.processes import AS_SHIPPED, Child, spawn

ROOT, RESULTS = benchrecord.ROOT, benchrecord.RESULTS
LOCAL_CCM = str(Path(sys.executable).with_name("local-ccm"))
METRICS_PORT = 8092  # the agent's default --metrics-bind-address, inside its own namespace
NODE_V4 = ("192.0.2.10/24", "192.0.2.1/24")
FLIP = ("192.0.2.10", "192.0.2.11")  # the address changes alternate between these two
Tracker = Callable[..., None]


# ------------------------------------------------------------------ pure helpers
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0-100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100), at least 1
    return ordered[int(rank) - 1]


def addresses_of(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = (node.get("status") or {}).get("addresses") or []
    return [(a["type"], a["address"]) for a in found]


def is_tainted(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == product.UNINITIALIZED_TAINT for t in taints)


def flip_commands(old: str, new: str, dev: str = "eth0") -> list[str]:
    """One address change: the new address arrives as a secondary and is promoted when the
    old primary goes (promote_secondaries=1), so the default route survives the change."""
    return [f"addr add {new}/24 dev {dev}", f"addr del {old}/24 dev {dev}"]


def sample_value(exposition: str, name: str) -> float | None:
    """The value of an unlabelled sample in a Prometheus text exposition."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


# ------------------------------------------------------------------ machine and results
def machine_facts() -> dict[str, Any]:
    return benchrecord.machine_facts()


def write_result(name: str, result: dict[str, Any]) -> Path:
    return benchrecord.write_result("agent", name, result)


# ------------------------------------------------------------------ identity and topology
@dataclass(frozen=True)
class AgentIdentity:
    """Who the agent runs as, and where the apiserver listens (127.0.0.1:<api_port>)."""

    user: str
    kubeconfig: Path
    api_port: int
    kube_version: str


def grant_agent(
    kube: Client, user: str, labels: Mapping[str, str], track: Tracker, rbac: ShippedRbac
) -> None:
    """The chart's agent ClusterRole and events Role (``rbac``, from the
    ``shipped_agent_rbac`` fixture) with their bindings, for the client-certificate ``user``."""
    target = RbacTarget(user, user, "default", labels)
    for obj in bound_to_user(rbac.for_test(target), user):
        res, meta = RESOURCES[obj["kind"]], obj["metadata"]
        kube.create(res, obj, namespace=meta.get("namespace"))
        track(res, meta["name"], meta.get("namespace"))


def node_uplink(netns: NetnsFactory) -> Uplink:
    """eth0 192.0.2.10/24, default route via 192.0.2.1, IPv4 only, secondaries promoted."""
    up = netns.uplink(v4=NODE_V4, v6=None)
    up.node.sysctl("net.ipv4.conf.all.promote_secondaries=1",
                   "net.ipv4.conf.eth0.promote_secondaries=1")  # fmt: skip
    return up


# ------------------------------------------------------------------ the agent process
@dataclass
class AgentProcess:
    """``local-ccm`` started in ``netns`` (``ip netns exec`` execs, so the pid is the agent's)."""

    child: Child
    netns: str
    started: float  # time.monotonic() just before the spawn

    @classmethod
    def start(cls, netns: str, argv: Sequence[str], kubeconfig: Path, log: Path) -> AgentProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
        env |= AS_SHIPPED
        cmd = ["ip", "netns", "exec", netns, LOCAL_CCM, f"--kubeconfig={kubeconfig}", *argv]
        started = time.monotonic()
        return cls(spawn("local-ccm", cmd, log, env=env), netns, started)

    @property
    def pid(self) -> int:
        return self.child.pid

    def status_kib(self) -> dict[str, int]:
        """VmRSS and VmHWM of the agent process, KiB."""
        fields = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
        return fields

    def scrape(self, path: str = "/metrics") -> str:
        """GET the agent's own metrics endpoint inside its namespace."""
        sock = run_in_netns(
            self.netns, lambda: socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
        )
        conn = http.client.HTTPConnection("127.0.0.1", METRICS_PORT, timeout=5)
        conn.sock = sock
        try:
            conn.request("GET", path)
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def stop(self) -> int:
        """SIGTERM (graceful stop) and the exit code."""
        self.child.stop(grace=15)
        code = self.child.proc.returncode
        return -1 if code is None else code


# ------------------------------------------------------------------ observing the Node
@dataclass
class NodeWatcher:
    """An admin watch on one Node; every event is queued as (monotonic time, Node)."""

    kube: Client
    name: str
    resource_version: str
    events: queue.Queue[tuple[float, dict[str, Any]]] = field(default_factory=queue.Queue)
    _stream: WatchStream | None = None
    _thread: threading.Thread | None = None

    def __enter__(self) -> NodeWatcher:
        self._stream = self.kube.watch(
            r.NODES, field_selector=f"metadata.name={self.name}",
            resource_version=self.resource_version, timeout_seconds=1800, allow_bookmarks=False,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, name=f"watch:{self.name}", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._stream is not None
        try:
            for event in self._stream:
                self.events.put((time.monotonic(), event.object))
        except (ApiError, OSError):
            pass  # closed by __exit__, or the run ended

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        """Monotonic time of the first queued Node version matching ``predicate``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                seen, node = self.events.get(timeout=left)
            except queue.Empty:
                break
            if predicate(node):
                return seen
        raise AssertionError(f"Node {self.name}: no matching version within {timeout}s")

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)


# ------------------------------------------------------------------ API cost model (pure)
def simulate_requests_per_hour(
    resync_s: float, watch_timeout_s: tuple[int, int] = (300, 600), *, hours: int = 2000,
    seed: int = 1,
) -> dict[str, float]:  # fmt: skip
    """Steady-state LIST and WATCH requests per hour of one agent, by simulation of its loop
    (agent/run.py): every resync (interval ±10 %) LISTs and restarts the
    watch; a watch that reaches its server-side ``timeoutSeconds`` (uniform in the range) is
    reopened at once. Nothing else happens while nothing changes (measured, not assumed)."""
    import random  # noqa: PLC0415 - only this model draws random numbers

    rng = random.Random(seed)
    horizon = hours * 3600.0
    now, lists, watches = 0.0, 0, 0
    next_resync = resync_s * rng.uniform(0.9, 1.1)
    watch_end = float(rng.randint(*watch_timeout_s))
    while now < horizon:
        if next_resync <= watch_end:
            now, lists = next_resync, lists + 1
            next_resync = now + resync_s * rng.uniform(0.9, 1.1)
        else:
            now = watch_end
        watches += 1
        watch_end = now + rng.randint(*watch_timeout_s)
    return {"LIST": lists / hours, "WATCH": watches / hours}
