"""One Ethernet segment in namespaces for the speaker's tests, and the speakers on it.

A bridge ``br0`` in a namespace of its own; each Node and the client is a namespace attached to
it by a veth pair (``eth0`` inside, ``p<n>`` on the bridge). Everything stays inside the test's
namespaces: nothing is bridged to the test process's network. A speaker runs in this process
on an event loop of its own thread, its socket made inside its Node's namespace (a socket
keeps the namespace it was created in), with a fence the test sets by hand. The capture is a
packet socket in the bridge's namespace: it sees every frame where it enters the bridge.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

import pytest

from local_ccm.announce import speaker as sp
from local_ccm.announce.core import wire
from local_ccm.netlink import run_in_netns
from tests.support.netns import Namespace, NetnsFactory
from tests.support.waiting import eventually

T = TypeVar("T")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
CLIENT_V4 = "192.0.2.100/24"
CLIENT_V6 = "2001:db8:0:1::100/64"
VIP4 = ipaddress.IPv4Address("192.0.2.50")
VIP6 = ipaddress.IPv6Address("2001:db8:0:1::50")
OTHER4 = ipaddress.IPv4Address("192.0.2.51")  # on the segment, served by no one
OTHER6 = ipaddress.IPv6Address("2001:db8:0:1::51")
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET, PACKET_STATISTICS = 263, 6
SO_RCVBUFFORCE = 33
TOOLS = {"arping": "iputils-arping"}


@cache
def need(tool: str) -> str:
    """The tool's path; fails (never skips) naming the Debian package when it is missing or
    another program of that name is installed (Debian's arping package is not iputils')."""
    path = shutil.which(tool)
    version = "" if path is None else subprocess.run(
        [path, "-V"], capture_output=True, text=True, check=False
    ).stdout  # fmt: skip
    if "iputils" not in version:
        pytest.fail(f"{tool}: iputils' is needed: install the Debian package {TOOLS[tool]} "
                    "(make setup)")  # fmt: skip
    return str(path)


@dataclass
class Segment:
    """The bridge's namespace and the namespaces attached to it."""

    netns: NetnsFactory
    bridge: Namespace
    ports: int = 0
    port_of: dict[str, str] = field(default_factory=dict)  # namespace name -> bridge port

    def attach(self, ns: Namespace) -> str:
        """A veth from `ns` (``eth0``, up) to a new port of the bridge; returns its MAC."""
        self.ports += 1
        port = f"p{self.ports}"
        self.port_of[ns.name] = port
        self.bridge.ip("link", "add", port, "type", "veth", "peer", "name", "eth0",
                       "netns", ns.name)  # fmt: skip
        self.bridge.batch(f"link set {port} master br0", f"link set {port} up")
        ns.ip("link", "set", "eth0", "up")
        return str(ns.ip_json("link", "show", "eth0")[0]["address"])

    def set_port(self, ns: Namespace, state: str) -> None:
        """Set the bridge's side of `ns`'s link ``down`` (a cut cable: `ns`'s ``eth0`` stays
        up but loses its carrier) or ``up`` again."""
        self.bridge.ip("link", "set", self.port_of[ns.name], state)

    def node(self) -> tuple[Namespace, str]:
        """A Node: no address of its own on the segment but its IPv6 link-local."""
        ns = self.netns()
        return ns, self.attach(ns)

    def client(self) -> Namespace:
        """The client: an address of each family on the segment, no DAD for them."""
        ns = self.netns()
        self.attach(ns)
        ns.add_address("eth0", CLIENT_V4)
        ns.add_address("eth0", CLIENT_V6)
        return ns


def make_segment(netns: NetnsFactory) -> Segment:
    bridge = netns(disable_ipv6=True)
    # No multicast snooping: the bridge floods solicitations like a plain switch would.
    bridge.batch("link add br0 type bridge mcast_snooping 0", "link set br0 up")
    return Segment(netns, bridge)


# ------------------------------------------------------------------ speakers


class SpeakerThread:
    """A `Speaker` on an event loop of its own thread, with a fence the test sets."""

    def __init__(self, ns: Namespace, **options: Any) -> None:
        self.ns = ns
        self.allowed: set[bytes] = set()
        self.loop = asyncio.new_event_loop()
        self.speaker = sp.Speaker(self._answering, netns=ns.name, **options)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"speaker:{ns.name}")

    def _answering(self, packed: bytes) -> bool:
        return packed in self.allowed

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self.speaker.run())
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            self.loop.close()

    def start(self, addresses: Iterable[IPAddress], interface: str = "eth0") -> SpeakerThread:
        self.speaker.set_addresses(interface, addresses)
        self._thread.start()
        return self

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` on the speaker's loop, its result here."""
        done: Future[T] = Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except Exception as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(timeout=5)

    def wait_serving(self, interface: str = "eth0") -> None:
        eventually(
            lambda: self.call(lambda: self.speaker.serving(interface)),
            timeout=10, message=f"the speaker in {self.ns.name} serving {interface}",
        )  # fmt: skip

    def allow(self, *addresses: IPAddress) -> None:
        self.allowed |= {a.packed for a in addresses}

    def deny(self, *addresses: IPAddress) -> None:
        self.allowed -= {a.packed for a in addresses}

    def take_over(self, *addresses: IPAddress) -> None:
        """What the Lease loop does after a successful Acquire: fence open, then announce."""
        self.allow(*addresses)
        for address in addresses:
            assert self.call(lambda a=address: self.speaker.announce(a))  # type: ignore[misc]

    @property
    def counters(self) -> sp.Counters:
        return self.speaker.counters

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.speaker.stop)
            self._thread.join(timeout=10)
        if self.error is not None:
            raise AssertionError(f"the speaker in {self.ns.name} failed: {self.error!r}")


# ------------------------------------------------------------------ capture


@dataclass(frozen=True)
class Answer:
    """An ARP reply or Neighbor Advertisement seen on the bridge: for which address, from
    which MAC (the ARP sender or the Target Link-Layer Address), as what."""

    address: IPAddress
    mac: str
    kind: str  # "arp-reply", "garp-request", "garp-reply", "na", "na-unsolicited"
    to: str  # Ethernet destination


@dataclass
class Capture:
    """Every frame entering the bridge from a port, from start until `stop`."""

    bridge: Namespace
    frames: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # wall clock (time.time()) per frame
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Capture:
        def make() -> socket.socket:
            return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))

        self._sock = run_in_netns(self.bridge.name, make)
        # Room for a whole flood (3 000 frames of about 1 KiB each in the kernel's accounting),
        # so that the capture itself loses nothing: `stop` checks.
        self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        self._sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._read, name="capture", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._sock is not None
        while not self._stopped.is_set():
            try:
                frame, (ifname, _, pkttype, *_) = self._sock.recvfrom(65536)
            except TimeoutError:
                continue
            # Each frame once: where it entered the bridge, not where it leaves or reaches br0.
            if pkttype != PACKET_OUTGOING and ifname != "br0":
                self.times.append(time.time())
                self.frames.append(frame)

    def stop(self) -> list[bytes]:
        """The frames captured; fails if the kernel dropped any of them (the capture would
        not be the whole story)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            stats = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            self._sock.close()
            lost = struct.unpack("@II", stats)[1]
            assert lost == 0, f"the capture lost {lost} frames"
        return list(self.frames)

    def answers(self) -> list[Answer]:
        return [a for _, a in self.timed_answers()]

    def timed_answers(self) -> list[tuple[float, Answer]]:
        """The answers with the wall-clock time each frame was read (within milliseconds of
        its arrival: the reader does nothing else)."""
        count = len(self.frames)
        pairs = zip(self.times[:count], self.frames[:count], strict=True)
        return [(t, a) for t, frame in pairs if (a := answer_in(frame)) is not None]


def answer_in(frame: bytes) -> Answer | None:
    """The answer a captured frame carries, or None."""
    to = frame[:6].hex(":")
    if frame[12:14] == b"\x08\x06" and len(frame) >= 42:
        oper, sha, spa, _, tpa = struct.unpack_from("!H6s4s6s4s", frame, 20)
        address = ipaddress.IPv4Address(spa)
        if oper == 2:
            kind = "garp-reply" if spa == tpa else "arp-reply"
            return Answer(address, sha.hex(":"), kind, to)
        if spa == tpa and spa != bytes(4):
            return Answer(address, sha.hex(":"), "garp-request", to)
        return None
    if frame[12:14] == b"\x86\xdd" and len(frame) >= 86 and frame[20] == 58 and frame[54] == 136:
        solicited = bool(frame[58] & 0x40)
        target = ipaddress.IPv6Address(frame[62:78])
        mac = frame[80:86].hex(":")  # the Target Link-Layer Address option
        return Answer(target, mac, "na" if solicited else "na-unsolicited", to)
    return None


def switches(answers: Iterable[Answer], address: IPAddress) -> list[str]:
    """The MACs answering `address`, in the order they took over: a MAC that answers again
    after another one did would appear twice."""
    order: list[str] = []
    for a in answers:
        if a.address == address and (not order or order[-1] != a.mac):
            order.append(a.mac)
    return order


# ------------------------------------------------------------------ the client's tools


def arping(client: Namespace, address: IPAddress, *, count: int = 3, dad: bool = False) -> set[str]:
    """The MACs that answered iputils' arping from the client (``-D``: a DAD probe)."""
    argv = [need("arping"), "-c", str(count), "-w", str(count + 1), "-I", "eth0"]
    done = client.exec(*argv, *(["-D"] if dad else []), str(address), check=False)
    return {m.lower() for m in re.findall(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", done.stdout)}


def neighbour(client: Namespace, address: IPAddress) -> str | None:
    """The client kernel's neighbour entry's MAC for `address`, if it has one. (ndisc6 cannot
    stand in for the kernel: it ignores an advertisement from a link-local source for a
    global target, which is how the speaker answers.)"""
    entries = client.ip_json("neigh", "show", "dev", "eth0", "to", str(address))
    return next((str(e["lladdr"]) for e in entries or [] if "lladdr" in e), None)


def resolve(client: Namespace, address: IPAddress) -> None:
    """Make the client's kernel resolve `address`: a datagram to the discard port."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    sock = run_in_netns(client.name, lambda: socket.socket(family, socket.SOCK_DGRAM))
    with sock:
        sock.sendto(b"resolve", (str(address), 9))


def resolved(client: Namespace, address: IPAddress) -> str | None:
    """`resolve`, then the neighbour entry's MAC: for `eventually`, which resolves again until
    an answer comes (a Node's link-local address is usable only after its DAD)."""
    resolve(client, address)
    time.sleep(0.2)
    return neighbour(client, address)


def flood_arp(client: Namespace, address: ipaddress.IPv4Address, count: int) -> float:
    """`count` broadcast ARP requests for `address` from the client as fast as it can send
    them; returns how long that took."""
    mac = bytes.fromhex(str(client.ip_json("link", "show", "eth0")[0]["address"]).replace(":", ""))
    spa = ipaddress.IPv4Interface(CLIENT_V4).ip.packed
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, spa, bytes(6), address.packed)
    frame = b"\xff" * 6 + mac + b"\x08\x06" + body
    sock = run_in_netns(client.name, lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
    start = time.monotonic()
    with sock:
        sock.bind(("eth0", 0))
        for _ in range(count):
            sock.send(frame)
    return time.monotonic() - start


def group_macs(ns: Namespace) -> set[str]:
    """The link-layer multicast memberships of the Node's eth0 (``ip maddr``)."""
    shown = ns.ip("maddr", "show", "dev", "eth0")
    return set(re.findall(r"link\s+([0-9a-f:]{17})", shown))


def solicited_mac(address: ipaddress.IPv6Address) -> str:
    return next(iter(wire.group_macs([address]))).hex(":")
