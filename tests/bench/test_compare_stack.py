"""`make bench-compare`: the whole stack side by side — local-ccm against everything it replaces.

Two control planes run at the same time, one per stack, each with the same N kwok Nodes (kwok
keeps running: it renews their Leases and refreshes their status every 10–20 minutes, as
kubelets do), a ClusterCIDR, a LoadBalancer pool and, during the window, the same trickle
(tests/bench/stack_load.py): one LoadBalancer Service created and the oldest deleted, and one
kubelet-serving CSR from a Node identity, every `stack_churn_s` seconds.

- ours: `local-ccm-controller-manager` with the chart's arguments and RBAC for
  node-lifecycle, node-ipam, kubelet-serving-approver and service-lb-ipam (the chart rendered
  with those on; node-bmc, which has no peer, stays off), and the `local-ccm` agent;
- Go: cozystack's node-lifecycle-controller v0.3.0, kubernetes-sigs' node-ipam-controller,
  kube-vip-cloud-provider v0.0.12 (pools from the `kubevip` ConfigMap), postfinance's
  kubelet-csr-approver v1.2.14, and cozystack's local-ccm agent v0.2.1; each with leader
  election as its chart ships it and a `system:masters` certificate of its own.

1 000 agents per side do not fit this machine: K real agents per side (`stack_agents`), each
on a real Node of its own in a network namespace of its own, are measured, and each stack's
agent row is their mean × N (the tables say which rows are extrapolated, from how many).
The window starts once both stacks have settled (every Node holds pod CIDRs, the agents have
initialised their Nodes, the first Services are addressed) and lasts `stack_window_s`
(BENCH_HOUR=1: an hour; the agents' rows of that hour are also written as
``compare-agent-hour``, the side-by-side idle hour of the agent table). Every process's RSS,
CPU, API requests (audit log, per user) and response bytes (its relay) are taken over it
(tests/bench/compare_stack.py); the result is ``test-artifacts/bench/compare-stack-<stamp>.json``,
rendered by tests/bench/stack_stats.py.
Nothing about speed is asserted: the test fails when a measurement could not be taken, a
process died, or a stack did not do its job (a CSR not approved, a Service not addressed or
not deleted, one address on two Services).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.lbipam.api import POOLS
from tests.bench import compare_stack as cs
from tests.bench import stack_load
from tests.bench.agent_bench import grant_agent, is_tainted
from tests.bench.compare_record import LoadSampler, provenance, write
from tests.bench.compare_stats import Settings
from tests.integration.ipam.objects import cluster_cidr
from tests.support import chart, crds, nodes, originals
from tests.support import resources as r
from tests.support.agent_process import RESOURCES
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.ipam_bench import BITS, POOL_V4, POOL_V6
from tests.support.kwok import (
    create_fake_nodes,
    fake_node_body,
    is_ready,
    loopback_address,
    start_kwok,
)
from tests.support.netns import NetnsFactory
from tests.support.processes import AS_SHIPPED, free_port

pytestmark = [pytest.mark.compare, pytest.mark.kwok, pytest.mark.timeout(4 * 3600)]
IMPLS = ("ours", "go")
FIELD_MANAGER = "local-ccm-bench"
KWOK_LEASE_S = 600  # Node Leases renewed every few minutes: the audit log stays small
CHART_VALUES = {"controllerManager.enabled": "true", "nodeIpamController.enabled": "true",
                "controllerManager.kubeletServingApprover.enabled": "true",
                "controllerManager.loadBalancer.enabled": "true"}  # fmt: skip
MANAGER = "local-ccm-node-lifecycle-controller"  # the chart's Deployment and ServiceAccount
SYSTEM = "kube-system"
GRACE = 120.0  # s after the window for the last CSR, Service and deletion to be handled


# ------------------------------------------------------------------ what both planes hold
def populate(plane: ControlPlane, kube: Client, binaries: Binaries, count: int) -> None:
    """kwok and `count` Ready kwok Nodes with loopback InternalIPs, the ClusterCIDR (every
    Node, dual-stack, 8 host bits) and the Services' namespace."""
    start_kwok(plane, binaries, lease_seconds=KWOK_LEASE_S)
    crds.install(kube)
    bodies = [fake_node_body(stack_load.kwok_name(i), {}, addresses=[
        {"type": "InternalIP", "address": loopback_address(i)}]) for i in range(count)]  # fmt: skip
    create_fake_nodes(lambda body: kube.create(r.NODES, body), bodies)
    deadline = time.monotonic() + 120 + count * 0.2
    while sum(map(is_ready, kube.list(r.NODES)["items"])) < count:
        assert time.monotonic() < deadline, f"{count} kwok Nodes not Ready"
        time.sleep(2)
    kube.create(r.CLUSTER_CIDRS, cluster_cidr("bench-stack", {}, bits=BITS, ipv4=POOL_V4,
                                              ipv6=POOL_V6))  # fmt: skip
    stack_load.create_namespace(kube)


def agent_nodes(kube: Client, k: int) -> list[str]:
    """K real Nodes, registered as a kubelet with --cloud-provider=external does (tainted)."""
    names = [f"agent-{i}" for i in range(k)]
    for name in names:
        kube.create(r.NODES, nodes.node_body(name, {}, uninitialized=True))
    return names


def rendered_chart(helm_binary: Path) -> list[Obj]:
    with chart.helm(helm_binary) as h:
        text = h.template(kube_version=chart.pinned_kube_version(), release="local-ccm",
                          namespace=SYSTEM, set_values=CHART_VALUES)  # fmt: skip
    return chart.parse(text)


def apply_manager_rbac(kube: Client, rendered: Sequence[Obj]) -> None:
    """The chart's RBAC of everything but the agent, as rendered (release local-ccm in
    kube-system: this plane is the cluster)."""
    label = "app.kubernetes.io/component"
    for obj in rendered:
        if obj["kind"] in RESOURCES and obj["metadata"].get("labels", {}).get(label) != "agent":
            kube.create(RESOURCES[obj["kind"]], obj, namespace=obj["metadata"].get("namespace"))


# ------------------------------------------------------------------ the processes
@dataclass(frozen=True)
class AgentSide:
    """Where one stack's agents run: its plane, its admin client, its binary, its Nodes."""

    impl: str
    plane: ControlPlane
    kube: Client
    binary: str
    names: Sequence[str]


def agent_starts(side: AgentSide, netns: NetnsFactory, rbac: chart.ShippedRbac) -> list[cs.Start]:
    """One agent per real Node, each in a namespace of its own (eth0 192.0.2.<10+i>/24): ours
    bound to the chart's agent roles, the Go one a `system:masters` user."""
    out = []
    for i, node in enumerate(side.names):
        up = netns.uplink(v4=(f"192.0.2.{10 + i}/24", "192.0.2.1/24"), v6=None)
        user = f"bench-{side.impl}-agent-{i}"
        groups = [] if side.impl == "ours" else ["system:masters"]
        if side.impl == "ours":
            grant_agent(side.kube, user, {}, lambda *a, **k: None, rbac)
        argv = (side.binary, "--kubeconfig={kubeconfig}", f"--node-name={node}")
        env = AS_SHIPPED if side.impl == "ours" else {}
        kubeconfig = side.plane.user_kubeconfig(user, groups)
        out.append(cs.Start(f"{side.impl}-agent-{i}", "agent", argv, user, kubeconfig, env,
                            up.node.name))  # fmt: skip
    return out


def ours_manager(plane: ControlPlane, rendered: Sequence[Obj], window_s: float) -> cs.Start:
    container = cs.chart_container(rendered, "Deployment", MANAGER)
    args = cs.manager_argv(container["args"], namespace=SYSTEM, node=stack_load.kwok_name(0),
                           metrics=f"127.0.0.1:{free_port()}",
                           health=f"127.0.0.1:{free_port()}")  # fmt: skip
    binary = str(Path(sys.executable).with_name("local-ccm-controller-manager"))
    kubeconfig = plane.token_kubeconfig(MANAGER, SYSTEM, expiration=int(window_s) + 4 * 3600)
    user = f"system:serviceaccount:{SYSTEM}:{MANAGER}"
    argv = (binary, "--kubeconfig={kubeconfig}", *args)
    return cs.Start("ours-manager", "local-ccm-controller-manager", argv, user, kubeconfig,
                    AS_SHIPPED)  # fmt: skip


def go_controllers(plane: ControlPlane, built: originals.Built) -> list[cs.Start]:
    """The four Go controllers as their charts run them, each a `system:masters` user."""

    def bin_(name: str, binary: str) -> str:
        return str(built.path(name, binary))

    def user(name: str) -> tuple[str, Path]:
        return f"bench-go-{name}", plane.user_kubeconfig(f"bench-go-{name}", ["system:masters"])

    port = free_port
    nlc, ipam, kvcp, csr = user("nlc"), user("ipam"), user("kube-vip-cp"), user("csr-approver")
    return [
        cs.Start("go-nlc", "node-lifecycle-controller",
                 (bin_("go-node-lifecycle-controller", "node-lifecycle-controller"),
                  "--kubeconfig={kubeconfig}", f"--namespace={SYSTEM}"), *nlc),
        cs.Start("go-ipam", "node-ipam-controller",
                 (bin_("go-node-ipam-controller", "node-ipam-controller"),
                  "--kubeconfig={kubeconfig}", "--enable-leader-election",
                  f"--leader-elect-namespace={SYSTEM}",
                  f"--webserver-bind-address=127.0.0.1:{port()}"), *ipam),
        cs.Start("go-kube-vip-cp", "kube-vip-cloud-provider",
                 (bin_("go-kube-vip-cloud-provider", "kube-vip-cloud-provider"),
                  "--kubeconfig={kubeconfig}", "--OutSideCluster=true",
                  "--leader-elect-resource-name=kube-vip-cloud-controller",
                  "--bind-address=127.0.0.1", f"--secure-port={port()}"), *kvcp,
                 home_kubeconfig=True),
        cs.Start("go-csr-approver", "kubelet-csr-approver",
                 (bin_("go-kubelet-csr-approver", "kubelet-csr-approver"),
                  "--kubeconfig={kubeconfig}", "--leader-election",
                  "--provider-regex=^kwok-[0-9]+$", "--provider-ip-prefixes=127.1.0.0/16",
                  "--bypass-dns-resolution", f"--metrics-bind-address=127.0.0.1:{port()}",
                  f"--health-probe-bind-address=127.0.0.1:{port()}"), *csr),
    ]  # fmt: skip


def components(impl: str, built: originals.Built, n: int) -> list[tuple[str, str, int]]:
    """(name, label, count) of each component, in table order."""
    if impl == "ours":
        return [("agent", "local-ccm agent (one per Node)", n),
                ("local-ccm-controller-manager", "local-ccm-controller-manager (node-lifecycle, "
                 "node-ipam, kubelet-serving-approver, service-lb-ipam)", 0)]  # fmt: skip

    def label(name: str, what: str) -> str:
        info = built.infos[name]
        return f"{what} {info.get('version', '?')}"

    return [("agent", label("go-local-ccm", "cozystack local-ccm agent") + " (one per Node)", n),
            ("node-lifecycle-controller", label("go-node-lifecycle-controller",
                                                "cozystack node-lifecycle-controller"), 0),
            ("node-ipam-controller", label("go-node-ipam-controller",
                                           "kubernetes-sigs node-ipam-controller"), 0),
            ("kube-vip-cloud-provider", label("go-kube-vip-cloud-provider",
                                              "kube-vip-cloud-provider"), 0),
            ("kubelet-csr-approver", label("go-kubelet-csr-approver",
                                           "postfinance kubelet-csr-approver"), 0)]  # fmt: skip


GO_STACK = ("go-local-ccm", "go-node-lifecycle-controller", "go-node-ipam-controller",
            "go-kube-vip-cloud-provider", "go-kubelet-csr-approver")  # fmt: skip


def go_originals(built: originals.Built) -> dict[str, Any]:
    """Each Go program's provenance, and under "go" the five together (the run's line on the
    page names one Go side per component)."""
    each = {name: provenance(built, name) for name in GO_STACK}
    programs = ", ".join(f"{each[n].get('project')} {each[n].get('version')}" for n in GO_STACK)
    keys = " + ".join(str(each[n].get("key")) for n in GO_STACK)
    return {"go": {"project": programs, "version": "(five programs)", "key": keys}, **each}


# ------------------------------------------------------------------ settled, and the window
def unsettled(kube: Client, load: stack_load.PlaneLoad, agents: Sequence[str], total: int) -> str:
    """What this plane still waits for before the window ("" when nothing)."""
    items = kube.list(r.NODES)["items"]
    cidrs = sum(1 for n in items if (n.get("spec") or {}).get("podCIDRs"))
    tainted = [n["metadata"]["name"] for n in items
               if n["metadata"]["name"] in agents and is_tainted(n)]  # fmt: skip
    missing = load.unaddressed()
    parts = [f"{cidrs}/{total} Nodes with pod CIDRs" if cidrs < total else "",
             f"agent Nodes still tainted: {tainted}" if tainted else "",
             f"Services without an address: {missing}" if missing else ""]  # fmt: skip
    return "; ".join(p for p in parts if p)


def settle(
    planes: dict[str, tuple[Client, stack_load.PlaneLoad]], agents: Sequence[str], total: int,
    processes: Sequence[cs.Measured], timeout: float,
) -> float:  # fmt: skip
    started = time.monotonic()
    while True:
        assert not cs.exited(processes), cs.exited(processes)
        waiting = {impl: unsettled(kube, load, agents, total)
                   for impl, (kube, load) in planes.items()}  # fmt: skip
        if not any(waiting.values()):
            return round(time.monotonic() - started, 1)
        assert time.monotonic() - started < timeout, f"not settled after {timeout:.0f} s: {waiting}"
        time.sleep(5)  # each check LISTs every Node of both planes


def run_window(
    loads: Sequence[stack_load.PlaneLoad], processes: Sequence[cs.Measured], seconds: float,
    churn_s: float,
) -> cs.Window:  # fmt: skip
    """The window: the trickle on both planes every `churn_s` (at the middle of each period)."""
    with cs.Window(processes) as window:
        t0, k = time.monotonic(), 0
        while (now := time.monotonic() - t0) < seconds:
            assert not cs.exited(processes), cs.exited(processes)
            if now >= churn_s * (k + 0.5) and churn_s * (k + 1) <= seconds:
                for load in loads:
                    load.tick(k)
                k += 1
            time.sleep(min(1.0, max(0.05, seconds - now)))
    return window


def finished(loads: Sequence[stack_load.PlaneLoad]) -> dict[str, dict[str, list[str]]]:
    """Every stack's leftover problems, after up to GRACE s for the last changes."""
    deadline = time.monotonic() + GRACE
    while True:
        found = {load.impl: load.problems() for load in loads}
        if not any(v for p in found.values() for v in p.values()) or time.monotonic() > deadline:
            return found
        time.sleep(3)


# ------------------------------------------------------------------ the test
def test_compare_stack(  # noqa: PLR0917 (pytest passes fixtures by name)
    request: pytest.FixtureRequest, binaries: Binaries, settings: Settings,
    built: originals.Built, netns: NetnsFactory, helm_binary: Path, test_artifacts: Path,
) -> None:  # fmt: skip
    s = settings
    rendered = rendered_chart(helm_binary)
    agent_rbac = chart.ShippedRbac.of(rendered, "agent")
    started = time.monotonic()
    with (
        dedicated_plane(request.config, binaries, "stack-ours", scale=True, audit=True) as ours,
        dedicated_plane(request.config, binaries, "stack-go", scale=True, audit=True) as go,
        Client.from_kubeconfig(ours.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube_ours,
        Client.from_kubeconfig(go.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube_go,
        LoadSampler(every=60) as machine,
    ):
        planes = {"ours": (ours, kube_ours), "go": (go, kube_go)}
        for plane, kube in planes.values():
            populate(plane, kube, binaries, s.stack_nodes)
        kube_ours.create(POOLS, stack_load.pool_body())
        kube_go.create(r.CONFIG_MAPS, stack_load.kubevip_configmap(), namespace=SYSTEM)
        apply_manager_rbac(kube_ours, rendered)
        names = {impl: agent_nodes(kube, s.stack_agents) for impl, (_, kube) in planes.items()}
        specs = [(ours_manager(ours, rendered, s.stack_window_s), ours)]
        specs += [(spec, go) for spec in go_controllers(go, built)]
        binaries_of = {"ours": str(Path(sys.executable).with_name("local-ccm")),
                       "go": str(built.path("go-local-ccm", "local-ccm"))}  # fmt: skip
        agents = {
            impl: agent_starts(AgentSide(impl, plane, kube, binaries_of[impl], names[impl]),
                               netns, agent_rbac)
            for impl, (plane, kube) in planes.items()
        }  # fmt: skip
        for a, b in zip(agents["ours"], agents["go"], strict=True):
            specs += [(a, ours), (b, go)]
        loads = [stack_load.PlaneLoad(impl, plane, kube, s.stack_nodes)
                 for impl, (plane, kube) in planes.items()]  # fmt: skip
        with cs.running(specs, test_artifacts) as processes:
            for load in loads:
                for _ in range(s.stack_services):
                    load.create_service()
            total = s.stack_nodes + s.stack_agents
            settle_s = settle({ld.impl: (ld.kube, ld) for ld in loads}, names["ours"], total,
                              processes, timeout=300 + s.stack_nodes * 0.8)  # fmt: skip
            window = run_window(loads, processes, s.stack_window_s, s.stack_churn_s)
            problems = finished(loads)
            died = cs.exited(processes)
        by_impl = {impl: [p for p in processes if p.name.startswith(impl)] for impl in IMPLS}
        stacks = {}
        for impl, (plane, _) in planes.items():
            users = [p.user for p in by_impl[impl]]
            counted = cs.count_requests(plane.logs_dir / "audit.log", users, window.since,
                                        window.until)  # fmt: skip
            stacks[impl] = cs.stack_entry(by_impl[impl], counted,
                                          components(impl, built, s.stack_nodes))  # fmt: skip
        loads_summary = {ld.impl: ld.summary() for ld in loads}
        result: dict[str, Any] = {
            "settings": s.as_dict(), "rounds": {}, "nodes": s.stack_nodes,
            "window_s": round(window.seconds, 1), "settle_s": settle_s,
            "load": {**loads_summary["ours"], "churn_s": s.stack_churn_s,
                     "per_plane": loads_summary},
            "stacks": stacks, "problems": problems, "exited": died,
            "originals": go_originals(built),
            "loadavg_samples": machine.samples, "wall_s": round(time.monotonic() - started, 1),
        }  # fmt: skip
        write("stack", binaries, ours, result)
        if s.agent_hour_s:  # the agents' real hour is this window (settings: at least BENCH_HOUR)
            write("agent-hour", binaries, ours, {
                "settings": s.as_dict(), "originals": {"go": provenance(built, "go-local-ccm")},
                **cs.agent_hour(stacks, window.seconds), "loadavg_samples": machine.samples,
                "wall_s": round(window.seconds, 1),
            })  # fmt: skip
    assert not died, died
    assert all(not v for p in problems.values() for v in p.values()), problems
