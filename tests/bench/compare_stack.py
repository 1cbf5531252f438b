"""The whole stack of `make bench-compare` (tests/bench/test_compare_stack.py): each stack's
processes, started as shipped, and what each used over the window.

Every process gets an identity of its own (the audit log's user) and talks to its plane's
apiserver through a relay of its own (tests/support/relay.py), which counts the bytes it
read: the responses on the wire, after TLS and whatever compression the client asked for.
The agents run in network namespaces of their own (an uplink each, the relay inside); the
controllers in the test's namespace behind a relay on loopback. Over the window each process
is sampled: VmRSS every `SAMPLE_S` s, VmHWM and CPU at the end. CPU is the larger of the
schedstat sum of the live threads (ns) and utime + stime (10 ms ticks, which keep the CPU of
threads that ended), so neither a short window nor a thread that ended hides any.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.support.audit import AuditEvent
from tests.support.controlplane import ControlPlane
from tests.support.processes import (
    Child,
    children_cpu_seconds,
    cpu_seconds,
    memory_kib,
    spawn,
    task_cpu_seconds,
)
from tests.support.relay import LoopbackRelay

SAMPLE_S = 15.0
MIB = 1024.0


# ------------------------------------------------------------------ a measured process
@dataclass
class Measured:
    """One process of a stack: its child, its audit-log user and its relay."""

    name: str
    component: str
    child: Child
    user: str
    relay: LoopbackRelay
    rss_mib: list[float] = field(default_factory=list)
    at_start: dict[str, float] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        pid = self.child.pid
        return {"sched": task_cpu_seconds(pid), "ticks": cpu_seconds(pid),
                "children": children_cpu_seconds(pid)}  # fmt: skip

    def sample(self) -> None:
        with contextlib.suppress(OSError, KeyError):
            self.rss_mib.append(round(memory_kib(self.child.pid)["VmRSS"] / MIB, 2))

    def begin(self) -> None:
        cpu = self.cpu()
        self.at_start = {**cpu, "received": self.relay.received, "sent": self.relay.sent}
        self.sample()

    def end(self) -> dict[str, Any]:
        """This process's figures over the window (without its requests: see `count_requests`)."""
        self.sample()
        cpu, start = self.cpu(), self.at_start
        sched, ticks = cpu["sched"] - start["sched"], cpu["ticks"] - start["ticks"]
        children = cpu["children"] - start["children"]
        self.result = {
            "name": self.name, "user": self.user, "pid": self.child.pid,
            "rss_mib": list(self.rss_mib),
            "hwm_mib": round(memory_kib(self.child.pid)["VmHWM"] / MIB, 2),
            "cpu_s": round(max(sched, ticks) + children, 4),
            "cpu_sched_s": round(sched, 4), "cpu_ticks_s": round(ticks, 2),
            "startup_cpu_s": round(max(start["sched"], start["ticks"]) + start["children"], 4),
            "response_bytes": self.relay.received - int(start["received"]),
            "sent_bytes": self.relay.sent - int(start["sent"]),
            "exited": self.child.exited(),
        }  # fmt: skip
        return self.result


class Window:
    """The window over every process of both stacks: RSS sampled every `every` s meanwhile."""

    def __init__(self, processes: Sequence[Measured], every: float = SAMPLE_S) -> None:
        self.processes = processes
        self.every = every
        self.since = self.until = datetime.now(UTC)
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for process in self.processes:
                if process.child.exited() is None:
                    process.sample()

    def __enter__(self) -> Window:
        self.since, self._t0 = datetime.now(UTC), time.monotonic()
        for process in self.processes:
            process.begin()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.until, self.seconds = datetime.now(UTC), time.monotonic() - self._t0
        if exc[0] is None:
            for process in self.processes:
                process.end()


def count_requests(
    audit_log: Path, users: Collection[str], since: datetime, until: datetime
) -> dict[str, Counter[str]]:
    """Requests (stage RequestReceived) per user in [since, until), by "verb resource"; read
    in one pass, line by line (an hour at 1 000 Nodes is a large file)."""
    found: dict[str, Counter[str]] = {user: Counter() for user in users}
    with audit_log.open() as lines:
        for line in lines:
            if '"RequestReceived"' not in line:
                continue
            try:
                event = AuditEvent(json.loads(line))
            except json.JSONDecodeError:
                continue  # the line still being written
            if event.user in found and since <= event.received < until:
                found[event.user][f"{event.verb} {event.resource}"] += 1
    return found


# ------------------------------------------------------------------ kubeconfigs and relays
def relayed(kubeconfig: Path, relay: LoopbackRelay) -> Path:
    """A copy of `kubeconfig` whose server is `relay`'s port on loopback (the apiserver's
    certificate names 127.0.0.1, so any port will do)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for cluster in doc["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    out = kubeconfig.with_name(f"{kubeconfig.stem}-relay-{relay.port}.kubeconfig")
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o600)
    return out


def api_port(plane: ControlPlane) -> int:
    return int(plane.api_url.rsplit(":", 1)[1])


# ------------------------------------------------------------------ ours: the chart's command line
def manager_argv(
    args: Sequence[str], *, namespace: str, node: str, metrics: str, health: str
) -> list[str]:
    """The chart's controller-manager arguments with what Kubernetes would substitute
    ($(POD_NAMESPACE), $(NODE_NAME)) filled in and both servers on loopback ports. Pure."""
    servers = {"--metrics-bind-address": metrics, "--health-probe-bind-address": health}
    out = []
    for arg in args:
        flag = arg.partition("=")[0]
        filled = arg.replace("$(POD_NAMESPACE)", namespace).replace("$(NODE_NAME)", node)
        out.append(f"{flag}={servers[flag]}" if flag in servers else filled)
    return out


def chart_container(objs: Sequence[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one container of the chart's `kind`/`name` workload."""
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    (container,) = found["spec"]["template"]["spec"]["containers"]
    return dict(container)


# ------------------------------------------------------------------ starting processes
@dataclass(frozen=True)
class Start:
    """How to start one process of a stack."""

    name: str
    component: str
    argv: tuple[str, ...]  # with {kubeconfig} where the relayed kubeconfig goes
    user: str
    kubeconfig: Path
    env: Mapping[str, str] = field(default_factory=dict)
    netns: str | None = None  # the agents: run with `ip netns exec`, relay inside
    home_kubeconfig: bool = False  # kube-vip-cloud-provider reads $HOME/.kube/config


def start(spec: Start, plane: ControlPlane, logs: Path) -> Measured:
    relay = LoopbackRelay(spec.netns, ("127.0.0.1", api_port(plane)),
                          port=None if spec.netns else 0)  # fmt: skip
    kubeconfig = spec.kubeconfig if spec.netns else relayed(spec.kubeconfig, relay)
    argv = [a.replace("{kubeconfig}", str(kubeconfig)) for a in spec.argv]
    env = {"PATH": "/usr/bin:/bin", **spec.env}
    if spec.home_kubeconfig:
        home = logs / f"{spec.name}-home"
        (home / ".kube").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kubeconfig, home / ".kube" / "config")
        env["HOME"] = str(home)
    if spec.netns:
        argv = ["ip", "netns", "exec", spec.netns, *argv]
    child = spawn(spec.name, argv, logs / f"{spec.name}.log", env=env)
    return Measured(spec.name, spec.component, child, spec.user, relay)


def stop(processes: Sequence[Measured]) -> None:
    for process in reversed(processes):
        with contextlib.suppress(Exception):
            process.child.stop(grace=15)
        with contextlib.suppress(Exception):
            process.relay.close()


@contextlib.contextmanager
def running(specs: Sequence[tuple[Start, ControlPlane]], logs: Path) -> Iterator[list[Measured]]:
    """Every process started (in `specs` order), stopped when the block ends."""
    started: list[Measured] = []
    try:
        for spec, plane in specs:
            started.append(start(spec, plane, logs))
        yield started
    finally:
        stop(started)


def exited(processes: Sequence[Measured]) -> list[str]:
    return [f"{p.name} exited {p.child.exited()} (log {p.child.log_path})"
            for p in processes if p.child.exited() is not None]  # fmt: skip


# ------------------------------------------------------------------ the result
def stack_entry(
    processes: Sequence[Measured],
    requests: Mapping[str, Counter[str]],
    components: Sequence[tuple[str, str, int]],
) -> dict[str, Any]:
    """{"components": [...]} of one stack: `components` is (name, label, count) in table
    order; count 0 means one per process, else the number of processes the sample stands
    for (the agent: the Node count)."""
    out = []
    for name, label, count in components:
        members = [p for p in processes if p.component == name]
        rows = []
        for p in members:
            kinds = requests.get(p.user, Counter())
            rows.append({**p.result, "requests": sum(kinds.values()),
                         "request_kinds": dict(sorted(kinds.items()))})  # fmt: skip
        entry: dict[str, Any] = {"name": name, "label": label, "processes": rows}
        if count:
            entry["count"] = count
        out.append(entry)
    return {"components": out}


def agent_hour(stacks: Mapping[str, Mapping[str, Any]], window_s: float) -> dict[str, Any]:
    """The `compare-agent-hour` result from the stack's window: every real agent of each
    stack (idle on a Node of its own while the controllers work on the kwok Nodes) is one
    value of its side: its API requests (audit log) and CPU over the window."""
    rounds: dict[str, dict[str, list[float]]] = {
        "agent_api_requests_hour": {}, "agent_idle_cpu_hour_s": {}}  # fmt: skip
    runs = []
    for impl, stack in stacks.items():
        agent = next(c for c in stack["components"] if c["name"] == "agent")
        for p in agent["processes"]:
            rounds["agent_api_requests_hour"].setdefault(impl, []).append(p["requests"])
            rounds["agent_idle_cpu_hour_s"].setdefault(impl, []).append(p["cpu_s"])
            runs.append({"impl": impl, "user": p["user"], "idle_s": round(window_s, 1),
                         "requests": p["requests"], "request_kinds": p["request_kinds"],
                         "idle_cpu_s": p["cpu_s"], "exited": p["exited"]})  # fmt: skip
    return {"rounds": rounds, "runs": runs}
