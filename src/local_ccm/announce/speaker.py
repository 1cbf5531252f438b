"""The speaker: answers ARP and NDP for the addresses this Node holds, on the event loop.

The caller (the Lease loop) says which addresses each interface serves (`set_addresses`:
the solicited-node groups of its IPv6 ones are joined at once, so a takeover need not wait for
them) and supplies `answering`, the fence: a packed address is answered only while
``answering(packed)`` is true, asked for the address a request names immediately before its
reply is built and sent, never cached. After a takeover it calls `announce`: gratuitous ARP or
an unsolicited advertisement at the rounds of ``Timings.announce_at``, each round and each
frame sent only while the fence still allows it.

Frames are read in the event loop's reader callback (a non-blocking socket, no thread) and
answered there: a reply is never queued, so no reply leaves after its fence was checked.
Every frame sent goes through the interface's token bucket (`core.wire`). A socket error
(interface down or gone) is logged and the interface reopened after a backoff; a missing
CAP_NET_RAW ends `run` with `PacketCapabilityError`, whose text is the operator's remedy.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from local_ccm.announce.core import packets, wire
from local_ccm.announce.core.hold import Timings
from local_ccm.announce.packetsocket import (
    Interface,
    PacketCapabilityError,
    PacketSocket,
    read_interface,
)
from local_ccm.clock import Clock, SystemClock, race
from local_ccm.kube.backoff import Backoff
from local_ccm.logs import V4, kv

__all__ = ["Answering", "Counters", "PacketCapabilityError", "Speaker"]

log = logging.getLogger(__name__)
Answering = Callable[[bytes], bool]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
REOPEN: Backoff = Backoff(initial=0.5, cap=30.0)
LINK_LOCAL_RETRY = 1.0  # seconds between re-reads while an interface has no usable link-local
OPEN_WAIT = 1.0  # seconds the last takeover round waits for a socket still opening
READS_PER_WAKE = 256  # frames handled per reader callback, so one flood cannot starve the loop


@dataclass
class Counters:
    """Plain counters for the caller's metrics, keyed by interface: replies and announcement
    frames sent per family, frames not answered per reason, and socket reopens.

    Reasons: ``not_a_request`` (ARP replies, malformed or invalid solicitations: what the
    parsers drop), ``not_answered`` (a request for an address not answered now on this
    interface, or to another host), ``rate_limit``, ``send_error``, ``no_link_local`` (a
    solicitation on an interface that has no usable IPv6 link-local address yet), ``overrun``
    (the kernel dropped them: the socket's queue was full, a flood faster than it is read)."""

    replies: Counter[tuple[str, str]] = field(default_factory=Counter)
    announcements: Counter[tuple[str, str]] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)
    reopens: Counter[str] = field(default_factory=Counter)


class _Fenced:
    """The `owned` container `packets.answer` asks: the interface's addresses, each only while
    the fence allows it, asked at the moment the request is checked."""

    __slots__ = ("addresses", "answering")

    def __init__(self, addresses: frozenset[bytes], answering: Answering) -> None:
        self.addresses, self.answering = addresses, answering

    def __contains__(self, packed: object) -> bool:
        return packed in self.addresses and self.answering(packed)


class _Responder:
    """One interface: its socket, its addresses and groups, its bucket and its takeovers."""

    def __init__(self, name: str, speaker: Speaker) -> None:
        self.name, self._speaker = name, speaker
        self._clock, self.counters = speaker.clock, speaker.counters
        self._log = speaker.log
        self._fenced = _Fenced(frozenset(), speaker.answering)
        self._ips: frozenset[IPAddress] = frozenset()
        self._joined: frozenset[bytes] = frozenset()
        self._socket: PacketSocket | None = None
        self._bucket = wire.full(speaker.limit, self._clock.monotonic())
        self._takeovers: dict[bytes, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._failure: OSError | None = None
        self._stop = asyncio.Event()
        self._opened = False
        self._open_now = asyncio.Event()  # set while a socket is open

    # -------------------------------------------------------------- the caller's side
    def set_addresses(self, addresses: frozenset[IPAddress]) -> None:
        self._ips = addresses
        self._fenced.addresses = frozenset(a.packed for a in addresses)
        for packed in set(self._takeovers) - self._fenced.addresses:
            self._takeovers.pop(packed).cancel()
        self._sync_groups()

    def announce(self, packed: bytes) -> None:
        if (running := self._takeovers.pop(packed, None)) is not None:
            running.cancel()
        task = asyncio.get_running_loop().create_task(self._takeover(packed))
        self._takeovers[packed] = task
        task.add_done_callback(lambda done: self._forget(packed, done))

    def serves(self, address: IPAddress) -> bool:
        return address in self._ips

    @property
    def open(self) -> bool:
        return self._socket is not None

    def stop(self) -> None:
        self._stop.set()

    # -------------------------------------------------------------- the socket's life
    async def run(self) -> None:
        """Serve until stopped; reopen after a socket error, with backoff (from the first
        delay again once a socket was open)."""
        attempt = 0
        while not self._stop.is_set():
            self._opened = False
            try:
                await self._serve()
            except OSError as exc:  # never PacketCapabilityError: that one ends `run`
                attempt = 0 if self._opened else attempt
                delay = REOPEN.next_delay(attempt, rng=self._speaker.rng)
                attempt += 1
                self.counters.reopens[self.name] += 1
                self._log.warning("packet socket on %s: %s; reopening in %.1fs", self.name,
                                  exc, delay)  # fmt: skip
                await race(self._clock.sleep(delay), self._stop.wait())
        for task in self._takeovers.values():
            task.cancel()

    async def _serve(self) -> None:
        interface = await asyncio.to_thread(read_interface, self.name, netns=self._speaker.netns)
        sock = await asyncio.to_thread(PacketSocket.open, interface, netns=self._speaker.netns)
        loop = asyncio.get_running_loop()
        self._socket, self._joined, self._failure = sock, frozenset(), None
        self._opened = True
        try:
            self._sync_groups()
            loop.add_reader(sock.fileno(), self._readable)
            self._open_now.set()
            self._log.info("answering ARP and NDP on %s (index %d, MAC %s)", self.name,
                           interface.index, interface.link.mac.hex(":"))  # fmt: skip
            await self._watch(interface)
        finally:
            self._open_now.clear()
            loop.remove_reader(sock.fileno())
            self._socket, self._joined = None, frozenset()
            sock.close()

    async def _watch(self, interface: Interface) -> None:
        """Until stopped or the socket fails; re-reads the interface while it lacks a usable
        link-local address, and fails (to reopen) if it was replaced meanwhile."""
        while not self._stop.is_set():
            self._wake.clear()
            wait = None if interface.has_link_local else LINK_LOCAL_RETRY
            await race(self._sleep_or_forever(wait), self._any_wake())
            if self._failure is not None:
                raise self._failure
            if not interface.has_link_local and not self._stop.is_set():
                interface = await self._refresh(interface)

    async def _refresh(self, interface: Interface) -> Interface:
        fresh = await asyncio.to_thread(read_interface, self.name, netns=self._speaker.netns)
        if fresh.index != interface.index:
            raise OSError(f"{self.name} was replaced (index {interface.index} -> {fresh.index})")
        if self._socket is not None:
            self._socket.interface = fresh
        return fresh

    async def _sleep_or_forever(self, seconds: float | None) -> None:
        if seconds is None:
            await asyncio.Event().wait()
        else:
            await self._clock.sleep(seconds)

    async def _any_wake(self) -> None:
        await race(self._wake.wait(), self._stop.wait())

    def _sync_groups(self) -> None:
        """Join the solicited-node groups of the IPv6 addresses, leave the others. A failure
        is the socket's: the interface is reopened and joins again."""
        sock = self._socket
        if sock is None:
            return
        change = wire.plan_groups(self._joined, self._ips)
        try:
            for mac in change.join:
                sock.join(mac)
                self._joined |= {mac}
            for mac in change.leave:
                sock.leave(mac)
                self._joined -= {mac}
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self._failure = exc
        self._wake.set()

    # -------------------------------------------------------------- frames
    def _readable(self) -> None:
        sock = self._socket
        if sock is None:
            return
        try:
            frames = sock.receive(READS_PER_WAKE)
            if overruns := sock.overruns():
                self.counters.dropped[self.name, "overrun"] += overruns
        except OSError as exc:
            self._fail(exc)
            return
        for frame in frames:
            self._handle(frame, sock.interface)

    def _handle(self, frame: bytes, interface: Interface) -> None:
        if frame[12:14] == b"\x86\xdd" and not interface.has_link_local:
            self.counters.dropped[self.name, "no_link_local"] += 1
            return
        reply = packets.answer(frame, interface.link, self._fenced)  # the fence, asked now
        if reply is None:
            self._not_answered(frame)
            return
        sent, self._bucket = wire.take(self._bucket, self._speaker.limit, self._clock.monotonic())
        if not sent:
            self.counters.dropped[self.name, "rate_limit"] += 1
        elif self._send(reply):
            kind = "ipv4" if reply[12:14] == b"\x08\x06" else "ipv6"
            self.counters.replies[self.name, kind] += 1

    def _not_answered(self, frame: bytes) -> None:
        reason = packets.drop_reason(frame)
        self.counters.dropped[self.name, "not_a_request" if reason else "not_answered"] += 1
        if reason and self._log.isEnabledFor(V4):
            self._log.log(V4, "frame on %s not read: %s", self.name, reason)

    def _send(self, frame: bytes) -> bool:
        sock = self._socket
        try:
            if sock is None:
                raise OSError(f"no socket on {self.name}")
            sock.send(frame)
        except OSError as exc:
            self.counters.dropped[self.name, "send_error"] += 1
            self._log.log(V4, "send on %s failed: %s", self.name, exc)
            return False
        return True

    # -------------------------------------------------------------- takeovers
    async def _takeover(self, packed: bytes) -> None:
        """The rounds of a takeover; each round and each frame only while the fence allows.
        A round that finds the socket still opening (the first address served on this
        interface: the Lease loop announces as soon as its write succeeded) waits for it, until
        the next round's time at most, rather than lose its frames."""
        times = wire.rounds(self._clock.monotonic(), self._speaker.announce_at)
        for index, at in enumerate(times):
            await self._clock.sleep(at - self._clock.monotonic())
            if self._socket is None:
                until = times[index + 1] if index + 1 < len(times) else at + OPEN_WAIT
                await race(self._open_now.wait(), self._clock.sleep(until - at))
            for number in range(wire.round_size(packed)):
                wait, self._bucket = wire.reserve(
                    self._bucket, self._speaker.limit, self._clock.monotonic()
                )
                await self._clock.sleep(wait)
                if packed not in self._fenced:  # the fence, asked immediately before sending
                    self._log.info("announcing stopped on %s: no longer answering", self.name)
                    return
                self._announce(packed, number)

    def _announce(self, packed: bytes, number: int) -> None:
        """Frame `number` of a round, built now: the MAC or link-local may have changed."""
        sock = self._socket
        if sock is None:
            self.counters.dropped[self.name, "send_error"] += 1
        elif len(packed) == 16 and not sock.interface.has_link_local:
            self.counters.dropped[self.name, "no_link_local"] += 1
        elif self._send(wire.takeover_frames(packed, sock.interface.link)[number]):
            self.counters.announcements[self.name, wire.family(packed)] += 1

    def _forget(self, packed: bytes, done: asyncio.Task[None]) -> None:
        if self._takeovers.get(packed) is done:
            del self._takeovers[packed]


class Speaker:
    """Answers ARP and NDP on the interfaces it is given, for the addresses the fence allows.

    - `set_addresses(interface, addresses)`: what `interface` serves from now on (an empty
      set stops serving it and closes its socket);
    - `announce(address)`: a takeover: call it when the fence starts allowing `address`; a
      round that finds the interface's socket closed (not open yet, or reopening) is counted
      as ``send_error`` and the next round tries again;
    - `run()`: serve until `stop()` or cancellation; raises `PacketCapabilityError` when the
      process may not open a packet socket. One run per speaker.

    Every method is called on the event loop `run` runs on.
    """

    def __init__(
        self,
        answering: Answering,
        *,
        netns: str | None = None,
        limit: wire.RateLimit = wire.DEFAULT_LIMIT,
        announce_at: Iterable[float] = Timings().announce_at,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        node: str = "",
    ) -> None:
        self.answering, self.netns, self.limit = answering, netns, limit
        self.announce_at = tuple(announce_at)
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.log = logging.LoggerAdapter(log, kv(node=node))
        self.counters = Counters()
        self._responders: dict[str, _Responder] = {}
        self._tasks: dict[_Responder, asyncio.Task[None]] = {}
        self._done: asyncio.Future[None] | None = None

    def set_addresses(self, interface: str, addresses: Iterable[IPAddress]) -> None:
        """The addresses `interface` serves: answered while the fence allows each one."""
        wanted = frozenset(addresses)
        responder = self._responders.get(interface)
        if not wanted:
            if responder is not None:
                responder.set_addresses(wanted)
                responder.stop()
                del self._responders[interface]
            return
        if responder is None:
            responder = self._responders[interface] = _Responder(interface, self)
            self._start(responder)
        responder.set_addresses(wanted)

    def announce(self, address: IPAddress) -> bool:
        """Start the takeover rounds for `address` on every interface serving it; False when
        none does."""
        serving = [r for r in self._responders.values() if r.serves(address)]
        for responder in serving:
            responder.announce(address.packed)
        return bool(serving)

    def serving(self, interface: str) -> bool:
        """Whether `interface`'s packet socket is open now (for readiness and tests)."""
        responder = self._responders.get(interface)
        return responder is not None and responder.open

    async def run(self) -> None:
        self._done = asyncio.get_running_loop().create_future()
        for responder in self._responders.values():
            self._start(responder)
        try:
            await self._done
        finally:
            self._done = None
            for responder in self._responders.values():
                responder.stop()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def stop(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _start(self, responder: _Responder) -> None:
        if self._done is None or responder in self._tasks:
            return
        task = asyncio.get_running_loop().create_task(responder.run())
        self._tasks[responder] = task
        task.add_done_callback(lambda done: self._ended(responder, done))

    def _ended(self, responder: _Responder, task: asyncio.Task[None]) -> None:
        """A responder's task ended: stopped, or failed (only for want of CAP_NET_RAW, or a
        bug), which ends `run` with its error."""
        del self._tasks[responder]
        error = None if task.cancelled() else task.exception()
        if error is not None and self._done is not None and not self._done.done():
            self._done.set_exception(error)
