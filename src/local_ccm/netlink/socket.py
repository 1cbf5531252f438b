"""The rtnetlink adapter: the only module that opens netlink sockets.

Every request here is a read (RTM_GETROUTE, RTM_GETADDR / RTM_GETLINK dumps) or a multicast
group subscription, so no capability is needed. With ``netns=<name>`` the socket is created on
a short-lived thread inside ``/run/netns/<name>`` and then used from the calling thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import socket
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Self

from local_ccm.netlink import messages as m
from local_ccm.netlink.messages import Message
from local_ccm.netlink.model import (
    Address,
    Change,
    IPAddress,
    Link,
    MalformedMessageError,
    NetlinkError,
    Route,
)
from local_ccm.netlink.netns import run_in_netns

log = logging.getLogger(__name__)

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
RECV_BUFSIZE = 65536  # >= the kernel's largest dump skb (32 KiB), so nothing is truncated
REQUEST_TIMEOUT = 10.0  # the kernel answers at once; this only guards against a lost reply
DUMP_ATTEMPTS = 3  # NLM_F_DUMP_INTR: the table changed during the dump, so dump again
MONITOR_MAX_READS = 256  # bounded drain per read_events(), so one burst cannot starve a loop


class _DumpInterruptedError(Exception):
    pass


class NetlinkSocket:
    """A NETLINK_ROUTE socket with request/response bookkeeping (sequence numbers, multipart)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._seq = random.randrange(1, 1 << 30)
        self._portid: int = sock.getsockname()[0]

    @classmethod
    def open(cls, *, netns: str | None = None) -> NetlinkSocket:
        """A bound socket for requests."""
        return cls(_open(netns, 0, None, REQUEST_TIMEOUT))

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_seq(self) -> int:
        self._seq = self._seq % 0x7FFFFFFF + 1
        return self._seq

    def recv(self) -> bytes:
        """One datagram; a non-blocking socket raises BlockingIOError when nothing is queued."""
        try:
            data, _, msg_flags, _ = self._sock.recvmsg(RECV_BUFSIZE)
        except TimeoutError:
            raise NetlinkError(errno.ETIMEDOUT, "netlink: no reply from the kernel") from None
        if msg_flags & socket.MSG_TRUNC:
            raise NetlinkError(errno.EMSGSIZE, "netlink message truncated")
        return data

    def request(self, data: bytes, seq: int) -> list[Message]:
        """Send one request; return the reply messages (every part of a dump, without DONE)."""
        self._sock.sendto(data, (0, 0))
        replies: list[Message] = []
        while True:
            for msg in m.parse_messages(self.recv()):
                if msg.seq != seq or msg.pid not in (0, self._portid):
                    continue  # a stale reply to an earlier, abandoned request
                if msg.flags & m.NLM_F_DUMP_INTR and msg.type != m.NLMSG_ERROR:
                    raise _DumpInterruptedError  # may be set on any part, DONE included
                if msg.type in (m.NLMSG_DONE, m.NLMSG_ERROR):
                    _raise_if_error(msg)
                    return replies
                replies.append(msg)
                if not msg.flags & m.NLM_F_MULTI:
                    return replies

    def dump(self, build: Callable[[int], bytes]) -> list[Message]:
        """Run a request built by ``build(seq)``, retrying a dump the kernel reports interrupted."""
        for attempt in range(1, DUMP_ATTEMPTS + 1):
            seq = self.next_seq()
            try:
                return self.request(build(seq), seq)
            except _DumpInterruptedError:
                log.debug("netlink dump interrupted by a concurrent change (attempt %d)", attempt)
        raise NetlinkError(errno.EAGAIN, "netlink dump kept being interrupted by changes")

    def get_route(self, dst: IPAddress, *, oif: int | None, mark: int | None) -> Route:
        try:
            replies = self.dump(lambda seq: m.build_route_get(dst, seq, oif=oif, mark=mark))
        except NetlinkError as exc:
            if exc.errno in m.NO_ROUTE_ERRNOS:
                raise m.no_route_error(dst, exc.errno) from None
            raise
        routes = [m.parse_route(r.payload) for r in replies if r.type == m.RTM_NEWROUTE]
        if not routes:
            raise NetlinkError(errno.EPROTO, f"no RTM_NEWROUTE in the reply for {dst}")
        return routes[0]

    def get_link(self, index: int) -> Link:
        replies = self.dump(lambda seq: m.build_link_request(seq, index))
        links = [m.parse_link(r.payload) for r in replies if r.type == m.RTM_NEWLINK]
        if not links:
            raise NetlinkError(errno.ENODEV, f"no link with index {index}")
        return links[0]

    def links(self) -> list[Link]:
        replies = self.dump(m.build_link_request)
        return [m.parse_link(r.payload) for r in replies if r.type == m.RTM_NEWLINK]

    def addresses(self, family: int | None) -> list[Address]:
        replies = self.dump(lambda seq: m.build_addr_dump(seq, family))
        return [m.parse_address(r.payload) for r in replies if r.type == m.RTM_NEWADDR]


def route_get(
    dst: IPAddress, *, netns: str | None = None, oif: int | None = None, mark: int | None = None
) -> Route:
    """The kernel's route to ``dst`` (like ``ip route get``): nothing is sent to ``dst``.

    Raises NoRouteError when there is no usable route, including routes of type blackhole,
    unreachable, prohibit or throw (reported with the errno IPv4 would give for them).
    """
    with NetlinkSocket.open(netns=netns) as nl:
        route = nl.get_route(dst, oif=oif, mark=mark)
        if route.type in m.ROUTE_TYPE_ERRNO:
            err = m.ROUTE_TYPE_ERRNO[route.type]
            raise m.no_route_error(dst, err, f" [route type {route.type}]")
        ifname = nl.get_link(route.oif).name if route.oif else None
    return replace(route, ifname=ifname)


def dump_addresses(*, family: int | None = None, netns: str | None = None) -> list[Address]:
    """Every address (of IP version ``family`` 4 or 6, or all), with its interface name."""
    with NetlinkSocket.open(netns=netns) as nl:
        names = {link.index: link.name for link in nl.links()}
        addresses = nl.addresses(family)
    return [replace(a, ifname=names.get(a.ifindex, a.ifname)) for a in addresses]


def dump_links(*, netns: str | None = None) -> list[Link]:
    with NetlinkSocket.open(netns=netns) as nl:
        return nl.links()


class Monitor(NetlinkSocket):
    """A non-blocking socket subscribed to link, address and route changes."""

    def __init__(
        self, *, groups: int = m.DEFAULT_GROUPS, netns: str | None = None, rcvbuf: int | None = None
    ) -> None:
        super().__init__(_open(netns, groups, rcvbuf, 0))

    def read_events(self) -> list[Change]:
        """Changes queued so far; a ``resync`` Change when the kernel dropped some (ENOBUFS)."""
        changes: list[Change] = []
        for _ in range(MONITOR_MAX_READS):
            try:
                data = self.recv()
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                log.info("netlink monitor overrun: events were lost, a full re-read is needed")
                changes.append(Change("resync"))
                continue
            changes.extend(_changes(data))
        return changes

    async def changes(
        self, loop: asyncio.AbstractEventLoop | None = None
    ) -> AsyncGenerator[list[Change], None]:
        """Yield each non-empty batch of changes as it arrives (``loop.add_reader``)."""
        loop = loop or asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(self.fileno(), readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                batch = self.read_events()
                if batch:
                    yield batch
        finally:
            loop.remove_reader(self.fileno())


def _changes(data: bytes) -> list[Change]:
    changes = []
    for msg in m.parse_messages(data):
        try:
            change = m.parse_change(msg)
        except MalformedMessageError as exc:
            log.warning("ignoring malformed netlink notification type %d: %s", msg.type, exc)
            continue
        if change is not None:
            changes.append(change)
    return changes


def _open(netns: str | None, groups: int, rcvbuf: int | None, timeout: float) -> socket.socket:
    """A bound socket; ``timeout=0`` makes it non-blocking (for monitors)."""

    def make() -> socket.socket:
        kind = socket.SOCK_RAW | socket.SOCK_CLOEXEC
        return socket.socket(socket.AF_NETLINK, kind, NETLINK_ROUTE)

    sock = make() if netns is None else run_in_netns(netns, make)
    try:
        _configure(sock, groups, rcvbuf, timeout)
    except OSError:
        sock.close()
        raise
    return sock


def _configure(sock: socket.socket, groups: int, rcvbuf: int | None, timeout: float) -> None:
    # Extended ACKs give readable error text; capped ACKs keep the request out of the reply.
    for option in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
        try:
            sock.setsockopt(SOL_NETLINK, option, 1)
        except OSError as exc:  # kernels before 4.12 lack these; not needed for correctness
            log.debug("netlink socket option %d unavailable: %s", option, exc)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.bind((0, groups))


def _raise_if_error(msg: Message) -> None:
    err, text = m.parse_error(msg)
    if err:
        detail = f": {text}" if text else ""
        raise NetlinkError(err, f"netlink: {os.strerror(err)} ({m.error_name(err)}){detail}")
