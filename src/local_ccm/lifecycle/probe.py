"""Reachability probes over real sockets: the prober adapter.

ICMP sockets come from icmplib, raw (`privileged=True`, needs CAP_NET_RAW) or datagram
(`privileged=False`, needs the process group inside `net.ipv4.ping_group_range`). icmplib's
ping matches replies on identifier and sequence only and hides the errno of a failed send, so
this module matches itself: a reply counts only from the probed address, with our sequence and
random token (and, on raw sockets, our identifier: datagram sockets get the kernel's). Each
probe run opens its own socket, so a permission error shows at once as an `error` outcome.

TCP probes connect once; SYN-ACK and RST both prove a live kernel.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import secrets
import socket
import struct
from collections.abc import Sequence
from ipaddress import ip_address
from typing import Literal, Protocol

import icmplib

from local_ccm.lifecycle.core.model import (
    Family,
    IPAddress,
    OutcomeKind,
    ProbeKind,
    ProbeOutcome,
    family_of,
)
from local_ccm.records import dataclass

log = logging.getLogger(__name__)

IcmpMode = Literal["auto", "raw", "datagram"]
SocketMode = Literal["raw", "datagram"]
PING_GROUP_RANGE = "/proc/sys/net/ipv4/ping_group_range"
_ECHO = {4: (8, 0), 6: (128, 129)}  # (request, reply) ICMP types per IP version
_TOKEN_BYTES = 16


class Prober(Protocol):
    async def probe(
        self, addresses: Sequence[IPAddress], kinds: Sequence[ProbeKind]
    ) -> tuple[ProbeOutcome, ...]:
        """Probe every (address, kind) concurrently. The first `reply` ends the run and
        cancels the rest; the outcomes of the probes that completed are returned."""
        ...


@dataclass(frozen=True)
class ProbeConfig:
    count: int = 3  # ICMP echoes per run (--ping-count > 0; 0 means icmp is not configured)
    interval: float = 1.0  # --ping-interval
    timeout: float = 5.0  # --ping-timeout: upper bound of one probe of one address
    concurrency: int = 64  # --probe-concurrency


# ------------------------------------------------------------------ capabilities
@dataclass(frozen=True)
class Capability:
    """Whether one (kind, family) works here; `mode` is the ICMP socket type chosen."""

    kind: Literal["icmp", "tcp"]
    family: Family
    usable: bool
    mode: SocketMode | None = None
    problem: str = ""


@dataclass(frozen=True)
class Capabilities:
    entries: tuple[Capability, ...]

    def get(self, kind: Literal["icmp", "tcp"], family: Family) -> Capability | None:
        return next((c for c in self.entries if (c.kind, c.family) == (kind, family)), None)

    @property
    def any_usable(self) -> bool:
        return any(c.usable for c in self.entries)

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(c.problem for c in self.entries if not c.usable)


def detect_capabilities(
    kinds: Sequence[ProbeKind], families: Sequence[Family], icmp_mode: IcmpMode
) -> Capabilities:
    """Open a test socket per configured (kind, family). `auto` uses raw when permitted, else
    datagram; `raw` and `datagram` never fall back. The unusable ones are reported by the
    caller, in one line (`capability_report`)."""
    names = sorted({k.name for k in kinds})
    entries = tuple(
        _icmp_capability(family, icmp_mode) if name == "icmp" else _tcp_capability(family)
        for name in names
        for family in families
    )
    for entry in entries:
        if entry.usable:
            log.info("probe %s over %s usable (%s)", entry.kind, entry.family, entry.mode or "")
    return Capabilities(entries)


@dataclass(frozen=True)
class CapabilityReport:
    """What start-up says about the probes: `blocking` when nothing configured is usable (the
    controller then runs not ready, every verdict `unknown`, no Node deleted), else a warning
    about the unusable (kind, family) pairs, or nothing."""

    blocking: bool
    message: str  # "" when every configured (kind, family) is usable


def capability_report(capabilities: Capabilities) -> CapabilityReport:
    """One line listing every problem, worded for the operator."""
    problems = "; ".join(capabilities.problems)
    if not capabilities.entries or not problems:
        return CapabilityReport(False, "")
    if capabilities.any_usable:
        return CapabilityReport(False, f"some probes are unusable, their verdicts are unknown: "
                                       f"{problems}")  # fmt: skip
    return CapabilityReport(True, "no configured probe is usable, so every verdict is unknown "
                                  f"and no Node is deleted until this is fixed and the "
                                  f"controller restarted: {problems}")  # fmt: skip


def _icmp_capability(family: Family, mode: IcmpMode) -> Capability:
    tried: tuple[SocketMode, ...] = ("raw", "datagram") if mode == "auto" else (mode,)
    problems = []
    for socket_mode in tried:
        icmp = _open_icmp(family, socket_mode)
        if isinstance(icmp, str):
            problems.append(icmp)
            continue
        icmp.close()
        return Capability("icmp", family, True, socket_mode)
    return Capability("icmp", family, False, problem="; ".join(problems))


def _permission_remedy(family: Family, mode: SocketMode) -> str:
    if mode == "raw":
        return (
            f"raw ICMP socket for {family} not permitted: CAP_NET_RAW is missing "
            "(add NET_RAW to the container's capabilities, or use --icmp-mode=datagram)"
        )
    groups = sorted({os.getgid(), *os.getgroups()})
    return (
        f"datagram ICMP socket for {family} not permitted: no group of this process "
        f"({', '.join(map(str, groups))}) is inside net.ipv4.ping_group_range "
        f"({_read_ping_group_range()}); widen ping_group_range, use --icmp-mode=raw with "
        "NET_RAW, or narrow --probe-families"
    )


def _read_ping_group_range() -> str:
    try:
        with open(PING_GROUP_RANGE, encoding="ascii") as handle:
            return " ".join(handle.read().split())
    except OSError as err:
        return f"unreadable: {err.strerror}"


def _tcp_capability(family: Family) -> Capability:
    try:
        socket.socket(_address_family(family), socket.SOCK_STREAM).close()
    except OSError as err:
        problem = f"TCP socket for {family} failed ({err.strerror}); narrow --probe-families"
        return Capability("tcp", family, False, problem=problem)
    return Capability("tcp", family, True)


def _address_family(family: Family) -> socket.AddressFamily:
    return socket.AF_INET if family == "ipv4" else socket.AF_INET6


def _open_icmp(
    family: Family, mode: SocketMode
) -> icmplib.ICMPv4Socket | icmplib.ICMPv6Socket | str:
    """The socket, or why it cannot be opened here and its remedy."""
    cls = icmplib.ICMPv4Socket if family == "ipv4" else icmplib.ICMPv6Socket
    try:
        return cls(privileged=mode == "raw")
    except icmplib.SocketPermissionError:
        return _permission_remedy(family, mode)
    except (icmplib.ICMPSocketError, OSError) as err:
        return f"{mode} ICMP socket for {family} failed ({err}); narrow --probe-families"


# ------------------------------------------------------------------ echo packets
def echo_request(version: int, ident: int, sequence: int, token: bytes) -> bytes:
    """An ICMP(v6) echo request. The ICMPv6 checksum, and the identifier and checksum of a
    datagram socket, are filled in by the kernel."""
    header = struct.pack("!BBHHH", _ECHO[version][0], 0, 0, ident, sequence)
    if version == 6:
        return header + token
    checksum = _checksum(header + token)
    return struct.pack("!BBHHH", _ECHO[version][0], 0, checksum, ident, sequence) + token


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def parse_echo_reply(
    packet: bytes, version: int, *, ip_header: bool
) -> tuple[int, int, bytes] | None:
    """(identifier, sequence, payload) of an echo reply, or None for anything else. Raw IPv4
    sockets deliver the IP header first; raw ICMPv6 and datagram sockets do not."""
    if ip_header and version == 4:
        if not packet:
            return None
        packet = packet[(packet[0] & 0x0F) * 4 :]
    if len(packet) < 8 or packet[0] != _ECHO[version][1]:
        return None
    ident, sequence = struct.unpack("!HH", packet[4:8])
    return ident, sequence, packet[8:]


# ------------------------------------------------------------------ the prober
def errno_outcome(code: int | None) -> tuple[OutcomeKind, str]:
    """The outcome of a local socket error: no route is `no_route`, failed neighbour resolution or
    an ICMP unreachable is `no_reply`, anything else (EPERM, EACCES, ...) is `error`."""
    name = errno.errorcode.get(code or 0, str(code))
    if code == errno.ENETUNREACH:
        return "no_route", name
    if code in (errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ETIMEDOUT):
        return "no_reply", name
    return "error", name


class SocketProber:
    """The real `Prober`: at most `config.concurrency` probes at once, FIFO."""

    def __init__(self, config: ProbeConfig, capabilities: Capabilities) -> None:
        self.config = config
        self.capabilities = capabilities
        self._slots = asyncio.Semaphore(config.concurrency)
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Probes running now (the `probes_in_flight` gauge)."""
        return self._in_flight

    async def probe(
        self, addresses: Sequence[IPAddress], kinds: Sequence[ProbeKind]
    ) -> tuple[ProbeOutcome, ...]:
        tasks = [asyncio.create_task(self._bounded(a, k)) for a in addresses for k in kinds]
        done: list[ProbeOutcome] = []
        try:
            for next_done in asyncio.as_completed(tasks):
                done.append(await next_done)
                if done[-1].outcome == "reply":
                    break  # any reply of any kind from any address wins
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return tuple(done)

    async def _bounded(self, address: IPAddress, kind: ProbeKind) -> ProbeOutcome:
        async with self._slots:
            self._in_flight += 1
            try:
                return await self.probe_one(address, kind)
            finally:
                self._in_flight -= 1

    async def probe_one(self, address: IPAddress, kind: ProbeKind) -> ProbeOutcome:
        """One (address, kind) probe, bounded by `config.timeout`; never raises except on
        cancellation."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            outcome, detail = await self._dispatch(address, kind)
        except Exception as err:
            outcome, detail = "error", f"{type(err).__name__}: {err}"
        return ProbeOutcome(address, kind, outcome, detail, loop.time() - started)

    async def _dispatch(self, address: IPAddress, kind: ProbeKind) -> tuple[OutcomeKind, str]:
        capability = self.capabilities.get(kind.name, family_of(address))
        if capability is None or not capability.usable:
            return "error", capability.problem if capability else "probe kind not configured"
        if kind.name == "tcp":
            assert kind.port is not None
            return await self._tcp(address, kind.port)
        assert capability.mode is not None
        return await _IcmpRun(address, capability.mode, self.config).run()

    async def _tcp(self, address: IPAddress, port: int) -> tuple[OutcomeKind, str]:
        loop = asyncio.get_running_loop()
        try:
            sock = socket.socket(_address_family(family_of(address)), socket.SOCK_STREAM)
        except OSError as err:
            return "error", f"socket: {err.strerror}"
        with sock:
            sock.setblocking(False)
            try:
                async with asyncio.timeout(self.config.timeout):
                    await loop.sock_connect(sock, (str(address), port))
            except TimeoutError:
                return "no_reply", "timeout"
            except ConnectionRefusedError:
                return "reply", "connection refused"  # an RST: the kernel is alive
            except OSError as err:
                return errno_outcome(err.errno)
        return "reply", "connected"


class _IcmpRun:
    """One ICMP probe run of one address: `count` echoes `interval` apart, all of it within
    `timeout`; lives for one `run()` call."""

    def __init__(self, address: IPAddress, mode: SocketMode, config: ProbeConfig) -> None:
        self.address, self.mode, self.config = address, mode, config
        self.ident = secrets.randbelow(0x10000)
        self.tokens: dict[int, bytes] = {}
        self.soft_error = ""

    async def run(self) -> tuple[OutcomeKind, str]:
        icmp = _open_icmp(family_of(self.address), self.mode)
        if isinstance(icmp, str):
            return "error", icmp
        try:
            sock = icmp.sock
            sock.setblocking(False)
            return await self._exchange(sock)
        finally:
            icmp.close()

    async def _exchange(self, sock: socket.socket) -> tuple[OutcomeKind, str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout
        for sequence in range(self.config.count):
            failed = await self._send(sock, sequence)
            if failed is not None:
                return failed
            last = sequence == self.config.count - 1
            until = deadline if last else min(deadline, loop.time() + self.config.interval)
            if await self._await_reply(sock, until):
                return "reply", "echo reply"
            if loop.time() >= deadline:
                break
        return "no_reply", self.soft_error or "timeout"

    async def _send(self, sock: socket.socket, sequence: int) -> tuple[OutcomeKind, str] | None:
        token = secrets.token_bytes(_TOKEN_BYTES)
        self.tokens[sequence] = token
        packet = echo_request(self.address.version, self.ident, sequence, token)
        try:
            await asyncio.get_running_loop().sock_sendto(sock, packet, (str(self.address), 0))
        except OSError as err:
            outcome, name = errno_outcome(err.errno)
            if outcome != "no_reply":
                return outcome, f"send: {name}"
            self.soft_error = name
        return None

    async def _await_reply(self, sock: socket.socket, until: float) -> bool:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            try:
                async with asyncio.timeout_at(until):
                    packet, source = await loop.sock_recvfrom(sock, 2048)
            except TimeoutError:
                return False
            except OSError as err:  # an ICMP error queued on a datagram socket
                self.soft_error = errno_outcome(err.errno)[1]
                continue
            if self._matches(packet, source[0]):
                return True
        return False

    def _matches(self, packet: bytes, source: str) -> bool:
        try:
            if ip_address(source.split("%", 1)[0]) != self.address:
                return False
        except ValueError:
            return False
        raw = self.mode == "raw"
        parsed = parse_echo_reply(packet, self.address.version, ip_header=raw)
        if parsed is None:
            return False
        ident, sequence, payload = parsed
        if raw and ident != self.ident:
            return False
        token = self.tokens.get(sequence)
        return token is not None and payload.startswith(token)
