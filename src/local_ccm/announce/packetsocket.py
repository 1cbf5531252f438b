"""The packet socket of one interface, and what the speaker needs to know about the interface.

One ``AF_PACKET`` raw socket per interface, bound to it for every protocol (``ETH_P_ALL``)
behind a classic BPF filter that lets through only ARP and ICMPv6 Neighbor Solicitations
without extension headers, so the rest of the Node's traffic never reaches Python. Frames the
Node sends itself are skipped (``PACKET_OUTGOING``). Solicited-node groups are joined on the
socket (``PACKET_ADD_MEMBERSHIP``, ``PACKET_MR_MULTICAST``): the NIC's filter then passes
those solicitations up, and the membership ends with the socket.

The interface's index, MAC and IPv6 link-local address come from rtnetlink
(`local_ccm.netlink`). Opening the socket needs CAP_NET_RAW; without it
`PacketCapabilityError` says so in words an operator can act on.
"""

from __future__ import annotations

import array
import errno
import socket
import struct
from typing import Final, Self

from local_ccm.announce.core import packets
from local_ccm.netlink import NetlinkError, dump_addresses, dump_links, run_in_netns
from local_ccm.records import dataclass

ETH_P_ALL: Final = 0x0003
SOL_PACKET: Final = 263
PACKET_ADD_MEMBERSHIP: Final = 1
PACKET_DROP_MEMBERSHIP: Final = 2
PACKET_MR_MULTICAST: Final = 0
PACKET_OUTGOING: Final = 4  # sll_pkttype of a frame this host sent
PACKET_STATISTICS: Final = 6
SO_ATTACH_FILTER: Final = 26
SNAPLEN: Final = 2048  # an ARP packet or a solicitation with its options fits many times over
_MREQ = struct.Struct("@iHH8s")  # struct packet_mreq: ifindex, type, address length, address
_STATS = struct.Struct("@II")  # struct tpacket_stats: packets, drops (both reset when read)
_FPROG = struct.Struct("@HP")  # struct sock_fprog: instruction count, pointer to them
_INSN = struct.Struct("@HBBI")  # struct sock_filter: code, jump if true, jump if false, k
# Classic BPF (linux/filter.h): ldh/ldb absolute, jeq immediate, ret immediate.
_LDH, _LDB, _JEQ, _RET = 0x28, 0x30, 0x15, 0x06
# Accept ARP, or IPv6 whose next header is ICMPv6 (58) and whose ICMPv6 type is a Neighbor
# Solicitation (135, at byte 54 = 14 Ethernet + 40 IPv6); drop everything else. Jumps count
# instructions from the next one.
FILTER: Final = (
    (_LDH, 0, 0, 12),
    (_JEQ, 5, 0, packets.ETH_P_ARP),
    (_JEQ, 0, 5, packets.ETH_P_IPV6),
    (_LDB, 0, 0, 20),
    (_JEQ, 0, 3, packets.ICMPV6),
    (_LDB, 0, 0, 54),
    (_JEQ, 0, 1, packets.NS),
    (_RET, 0, 0, SNAPLEN),
    (_RET, 0, 0, 0),
)


class PacketCapabilityError(Exception):
    """The process may not open a packet socket: CAP_NET_RAW is missing. Not an OSError, so
    that no retry loop mistakes it for a passing failure; its text is the remedy."""


def capability_message(interface: str) -> str:
    return (
        f"answering ARP and NDP on {interface} needs a packet socket, and opening one needs "
        "CAP_NET_RAW, which this process lacks: add NET_RAW to the agent container's "
        "capabilities (securityContext.capabilities.add), or turn L2 announcement off"
    )


@dataclass(frozen=True)
class Interface:
    """An interface as the speaker answers on it. `link.link_local` is
    `packets.UNSPECIFIED` while the interface has no usable IPv6 link-local address (none yet,
    or still tentative): IPv6 is not answered until it has one."""

    name: str
    index: int
    link: packets.Link

    @property
    def has_link_local(self) -> bool:
        return self.link.link_local != packets.UNSPECIFIED


def read_interface(name: str, *, netns: str | None = None) -> Interface:
    """The interface's index, MAC and link-local address, read through rtnetlink. Raises
    NetlinkError(ENODEV) when there is no such interface or it has no Ethernet MAC."""
    link = next((link for link in dump_links(netns=netns) if link.name == name), None)
    if link is None or link.mac is None or len(link.mac) != 6:
        raise NetlinkError(errno.ENODEV, f"no Ethernet interface {name}")
    local = packets.UNSPECIFIED
    for address in dump_addresses(family=6, netns=netns):
        ip = address.address.ip
        usable = not address.flags & {"tentative", "dadfailed"}
        if address.ifindex == link.index and ip.is_link_local and usable:
            local = ip.packed
            break
    return Interface(name, link.index, packets.Link(link.mac, local))


class PacketSocket:
    """A non-blocking packet socket bound to one interface, filtered to ARP and solicitations."""

    def __init__(self, sock: socket.socket, interface: Interface) -> None:
        self._sock = sock
        self.interface = interface

    @classmethod
    def open(cls, interface: Interface, *, netns: str | None = None) -> Self:
        """Opened in `netns` (a socket keeps the namespace it was made in), filtered before it
        is bound, so that no unfiltered frame is ever queued."""
        try:
            sock = _make() if netns is None else run_in_netns(netns, _make)
        except PermissionError as exc:
            raise PacketCapabilityError(capability_message(interface.name)) from exc
        try:
            _attach_filter(sock)
            sock.setblocking(False)
            sock.bind((interface.name, ETH_P_ALL))
        except OSError:
            sock.close()
            raise
        return cls(sock, interface)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()

    def receive(self, limit: int) -> list[bytes]:
        """Up to `limit` frames queued now, the Node's own outgoing ones left out. Raises the
        socket's error (ENETDOWN when the interface went down or away)."""
        frames: list[bytes] = []
        for _ in range(limit):
            try:
                frame, address = self._sock.recvfrom(SNAPLEN)
            except BlockingIOError:
                break
            if address[2] != PACKET_OUTGOING:
                frames.append(frame)
        return frames

    def overruns(self) -> int:
        """Frames the kernel dropped since the last call because the socket's queue was full
        (a flood faster than the speaker reads); reading resets the kernel's count."""
        stats = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size)
        return int(_STATS.unpack(stats)[1])

    def send(self, frame: bytes) -> None:
        """One frame out of this interface, as it is (the kernel adds no header)."""
        self._sock.send(frame)

    def join(self, group_mac: bytes) -> None:
        self._membership(PACKET_ADD_MEMBERSHIP, group_mac)

    def leave(self, group_mac: bytes) -> None:
        self._membership(PACKET_DROP_MEMBERSHIP, group_mac)

    def _membership(self, option: int, group_mac: bytes) -> None:
        mreq = _MREQ.pack(self.interface.index, PACKET_MR_MULTICAST, len(group_mac), group_mac)
        self._sock.setsockopt(SOL_PACKET, option, mreq)


def capability_problem(*, netns: str | None = None) -> str:
    """Why this process cannot answer ARP and NDP ("" when it can): for a check at start-up,
    before anything else runs, so that the process can exit with the reason."""
    try:
        sock = _make() if netns is None else run_in_netns(netns, _make)
    except PermissionError:
        return capability_message("any interface")
    sock.close()
    return ""


def _make() -> socket.socket:
    # Protocol 0: the socket receives nothing until it is bound, after the filter is on.
    return socket.socket(socket.AF_PACKET, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)


def _attach_filter(sock: socket.socket) -> None:
    program = array.array("B", b"".join(_INSN.pack(*insn) for insn in FILTER))
    address, _ = program.buffer_info()  # the kernel copies the program during the call
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _FPROG.pack(len(FILTER), address))
