"""The L2 announcement's scenarios: a bridged segment in namespaces of the test's own, Nodes
on it each with a real `local-ccm --l2-announce` process inside its namespace (talking to the
real apiserver through a relay on the namespace's loopback, under the chart's RBAC with
l2Announcement on, uid 65532 with CAP_NET_RAW as its one capability), a client namespace,
the real service-lb-ipam handing out the addresses, and a capture on the bridge."""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from local_ccm.announce.core.hold import lease_name
from local_ccm.kube.client import Client
from local_ccm.kube.errors import NotFound
from local_ccm.kube.resources import LEASES
from local_ccm.lease.election import parse_micro_time
from tests.netns.announce.segment import Capture, Segment, flood_arp, make_segment
from tests.support import lb
from tests.support.agent_process import (
    AGENT_UID,
    BINARY,
    SERVICE_ACCOUNT,
    AgentProcess,
    copy_kubeconfig,
    create_agent_identity,
    private_dir,
)
from tests.support.chart import ShippedRbac, helm, parse, pinned_kube_version
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import Namespace, NetnsFactory
from tests.support.processes import Child, stop_all
from tests.support.ticker import Ticker

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# uid 65532 with CAP_NET_RAW alone (ambient, so that the exec'd interpreter keeps it); the
# chart runs the container as root with NET_RAW only, which gives the same one capability.
NET_RAW_ONLY = (
    "setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", "--clear-groups",
    "--inh-caps=-all,+net_raw", "--ambient-caps=-all,+net_raw", "--bounding-set=-all,+net_raw",
    "--no-new-privs", "--pdeathsig=TERM", "--",
)  # fmt: skip
L2_VALUES = {"l2Announcement.enabled": "true"}


class L2Agent(AgentProcess):
    """The agent with CAP_NET_RAW: the one privilege answering ARP and NDP needs."""

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *NET_RAW_ONLY, str(BINARY), *self.argv]


@pytest.fixture(scope="session")
def l2_agent_rbac(helm_binary: Path) -> ShippedRbac:
    """The agent's RBAC as the chart ships it with l2Announcement on."""
    return l2_rbac(helm_binary)


def l2_rbac(helm_binary: Path) -> ShippedRbac:
    """`l2_agent_rbac`, for the benchmark too (tests/bench)."""
    with helm(helm_binary) as h:
        text = h.template(kube_version=pinned_kube_version(), release="local-ccm",
                          namespace="kube-system", set_values=L2_VALUES)  # fmt: skip
        return ShippedRbac.of(parse(text), "agent")


@dataclass
class Node:
    name: str
    ns: Namespace
    mac: str
    agent: L2Agent


@dataclass
class L2:
    """One segment, its Nodes with their agents, the client and the capture."""

    kube: Client
    space: lb.Space
    segment: Segment
    client: Namespace
    capture: Capture
    lease_namespace: str
    nodes: list[Node] = field(default_factory=list)

    def by_mac(self, mac: str) -> Node:
        return next(n for n in self.nodes if n.mac == mac)

    def by_name(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def holder(self, address: IPAddress) -> str | None:
        """The Lease's holder ("" released), None when there is no Lease."""
        try:
            lease = self.kube.get(LEASES, lease_name(address), namespace=self.lease_namespace)
        except NotFound:
            return None
        return str(lease["spec"].get("holderIdentity") or "")

    def pool(self, v4: str, v6: str, **l2: Any) -> str:
        return self.space.pool([v4, v6], l2Announcement=l2)


@pytest.fixture
def world(
    *,
    control_plane: ControlPlane,
    kube: Client,
    crds: object,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
    l2_agent_rbac: ShippedRbac,
) -> Iterator[L2]:
    """Three Nodes on 192.0.2.0/24 and 2001:db8:0:1::/64 (.11-.13, ::11-::13), each with its
    agent running and ready; the client (.100, ::100); service-lb-ipam; the capture started."""
    with l2_world(control_plane=control_plane, kube=kube, make_node=make_node, netns=netns,
                  track=track, namespace=test_namespace, labels=test_labels,
                  artifacts=test_artifacts, rbac=l2_agent_rbac) as running:  # fmt: skip
        yield running


@contextlib.contextmanager
def l2_world(
    *,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    namespace: str,
    labels: dict[str, str],
    artifacts: Path,
    rbac: ShippedRbac,
) -> Iterator[L2]:
    """The `world` fixture's segment, for the benchmark too (tests/bench)."""
    segment = make_segment(netns)
    client = segment.client()
    capture = Capture(segment.bridge).start()
    allocator = lb.start(control_plane.admin_kubeconfig, artifacts / "lb.log")
    children: list[Child] = [allocator]
    spaces = lb.space(kube)
    space = next(spaces)
    world = L2(kube, space, segment, client, capture, namespace)
    try:
        for number in (1, 2, 3):
            world.nodes.append(start_node(world, number, control_plane=control_plane,
                                          make_node=make_node, track=track,
                                          labels=labels, artifacts=artifacts,
                                          rbac=rbac))  # fmt: skip
        for node in world.nodes:
            node.agent.wait_ready(timeout=30)
        yield world
    finally:
        for node in world.nodes:
            node.agent.stop()
        stop_all(children, grace=5)
        capture.stop()
        next(spaces, None)


def start_node(
    world: L2,
    number: int,
    *,
    control_plane: ControlPlane,
    make_node: NodeFactory,
    track: Tracker,
    labels: dict[str, str],
    artifacts: Path,
    rbac: ShippedRbac,
) -> Node:
    ns, mac = world.segment.node()
    ns.add_address("eth0", f"192.0.2.{10 + number}/24")
    ns.add_address("eth0", f"2001:db8:0:1::{10 + number}/64")
    name = make_node(f"l2-{secrets.token_hex(3)}-{number}")["metadata"]["name"]
    identity = create_agent_identity(world.kube, track, rbac=rbac, name=f"lccm-{name}"[:60],
                                     namespace=world.lease_namespace, node=name,
                                     labels=labels)  # fmt: skip
    source = control_plane.token_kubeconfig(SERVICE_ACCOUNT, world.lease_namespace,
                                            bound_pod=identity.pod)  # fmt: skip
    log_path = artifacts / f"agent-{number}.log"
    home = private_dir(log_path.parent)
    argv = [f"--node-name={name}", "--external-ip-target=", "--l2-announce",
            f"--l2-lease-namespace={world.lease_namespace}", "--v=2"]  # fmt: skip
    agent = L2Agent(ns.name, argv, log_path=log_path, kubeconfig=copy_kubeconfig(home, source),
                    api_url=control_plane.api_url)  # fmt: skip
    agent.start()
    return Node(name, ns, mac, agent)


def kill(node: Node) -> None:
    """The holder's agent dies at once (SIGKILL): no release, its Lease must expire."""
    node.agent.signal(signal.SIGKILL)
    node.agent.wait(timeout=10)


def restart(node: Node) -> None:
    """Start the Node's agent again after it ended (its relay is made anew) and wait until it
    is ready."""
    node.agent.stop()
    node.agent.start()
    node.agent.wait_ready(timeout=30)


@dataclass(frozen=True)
class Record:
    """One version of an address's Lease as read, and when (wall clock) it was first read."""

    seen: float
    holder: str
    acquired: float | None  # acquireTime, renewTime: the writer's wall clock
    renewed: float | None


class LeaseHistory(Ticker):
    """Reads an address's Lease every `interval` seconds in a thread and keeps each version
    that changed its holder or renewTime: when holders changed and when the last renewal of
    each was written (``with LeaseHistory(world, address) as history:``)."""

    def __init__(self, world: L2, address: IPAddress, interval: float = 0.05) -> None:
        # The version before whatever the test does next is read on entering, not a tick
        # later: on a loaded machine the holder's release came before the thread's first read.
        super().__init__(interval, at_once=True)
        self.world, self.name = world, lease_name(address)
        self.records: list[Record] = []

    def tick(self) -> None:
        try:
            spec = self.world.kube.get(LEASES, self.name, namespace=self.world.lease_namespace,
                                       timeout=2)["spec"]  # fmt: skip
        except Exception:  # absent, or a slow read: the next one counts
            return
        record = Record(
            time.time(),
            str(spec.get("holderIdentity") or ""),
            _micro(spec.get("acquireTime")),
            _micro(spec.get("renewTime")),
        )
        last = self.records[-1] if self.records else None
        if last is None or (last.holder, last.renewed) != (record.holder, record.renewed):
            self.records.append(record)

    def last_of(self, holder: str) -> Record:
        """The last version written by `holder` (its last successful write)."""
        return next(r for r in reversed(self.records) if r.holder == holder)

    def first_after(self, holder: str) -> Record | None:
        """The first version naming a holder other than `holder` (and not empty) after it."""
        index = max(i for i, r in enumerate(self.records) if r.holder == holder)
        return next((r for r in self.records[index + 1 :] if r.holder not in ("", holder)), None)


def _micro(text: Any) -> float | None:
    parsed = parse_micro_time(text)
    return None if parsed is None else parsed.timestamp()


class Asker(Ticker):
    """The client asks "who has `address`?" (one broadcast ARP request) every `interval`
    seconds in a thread, so the capture shows who answers at each moment; `sent` keeps when
    (wall clock)."""

    def __init__(self, world: L2, address: ipaddress.IPv4Address, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.world, self.address = world, address
        self.sent: list[float] = []

    def tick(self) -> None:
        flood_arp(self.world.client, self.address, 1)
        self.sent.append(time.time())
