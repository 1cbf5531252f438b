"""What the packet adapter sends and how fast: the per-interface rate limit, the frames and
rounds of a takeover, the solicited-node groups to join. Pure, no I/O: time is an argument.

The rate limit is a token bucket per interface over every frame sent. A reply takes a token
only when a whole one is there and is dropped otherwise: a reply sent later would go out after
its fence was checked, so it is never queued. A takeover announcement reserves its token
instead, into debt if need be, and waits until the token is earned: the announcements of a
takeover are few (a round is one or two frames per address) and are what moves the clients,
so a flood of requests must not starve them; while the bucket is in debt no reply is sent,
and the total stays within the limit.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

from local_ccm.announce.core import packets
from local_ccm.records import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class RateLimit:
    """Frames sent per second on one interface, and how many may go at once. 100 a second is
    a hundred clients asking at the same moment, far above what a segment's clients ask of
    one Node in normal operation (each asks once per cache lifetime, tens of seconds), and
    little enough that a flood of requests cannot make the Node flood the segment."""

    rate: float = 100.0
    burst: float = 100.0

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1):
            raise ValueError(f"rate must be > 0 and burst >= 1: {self}")


DEFAULT_LIMIT: Final = RateLimit()


@dataclass(frozen=True)
class Bucket:
    """Tokens at local monotonic time `at`; below zero while reservations are being repaid."""

    tokens: float
    at: float


def full(limit: RateLimit, now: float) -> Bucket:
    """A bucket that may send a whole burst at once."""
    return Bucket(limit.burst, now)


def refill(bucket: Bucket, limit: RateLimit, now: float) -> Bucket:
    """The bucket at `now`: earned tokens added, never above the burst. A clock that seems to
    go back (it cannot, but the caller may pass a stale `now`) earns nothing."""
    earned = max(0.0, now - bucket.at) * limit.rate
    return Bucket(min(limit.burst, bucket.tokens + earned), max(now, bucket.at))


def take(bucket: Bucket, limit: RateLimit, now: float) -> tuple[bool, Bucket]:
    """A reply's token: (sent, bucket after). Without a whole token the reply is dropped."""
    bucket = refill(bucket, limit, now)
    if bucket.tokens < 1.0:
        return False, bucket
    return True, Bucket(bucket.tokens - 1.0, bucket.at)


def reserve(bucket: Bucket, limit: RateLimit, now: float) -> tuple[float, Bucket]:
    """An announcement's token: (seconds to wait before sending it, bucket after). Always
    granted; the wait is how long the bucket takes to earn it."""
    bucket = refill(bucket, limit, now)
    tokens = bucket.tokens - 1.0
    return max(0.0, -tokens / limit.rate), Bucket(tokens, bucket.at)


# ------------------------------------------------------------------ takeover


def rounds(started: float, announce_at: Iterable[float]) -> tuple[float, ...]:
    """The local monotonic times of a takeover's rounds, in order."""
    return tuple(sorted(started + offset for offset in announce_at))


def round_size(address: bytes) -> int:
    """Frames per takeover round for a packed address: two for IPv4, one for IPv6."""
    return 2 if len(address) == 4 else 1


def takeover_frames(address: bytes, link: packets.Link) -> tuple[bytes, ...]:
    """One round of a takeover for a packed address: both gratuitous ARP frames for IPv4, one
    unsolicited Neighbor Advertisement for IPv6."""
    if len(address) == 4:
        return packets.gratuitous_arp(address, link.mac)
    return (packets.unsolicited_advertisement(address, link),)


def family(address: bytes) -> str:
    """The metric label of a packed address's family."""
    return "ipv4" if len(address) == 4 else "ipv6"


# ------------------------------------------------------------------ solicited-node groups


def group_macs(addresses: Iterable[IPAddress]) -> frozenset[bytes]:
    """The Ethernet group MACs of the solicited-node groups of the IPv6 addresses (RFC 2464 7);
    addresses that share their low 24 bits share one."""
    return frozenset(
        packets.solicited_node(a)[1] for a in addresses if isinstance(a, ipaddress.IPv6Address)
    )


@dataclass(frozen=True)
class GroupChange:
    """The group MACs to join and to leave to go from `joined` to what the addresses need."""

    join: frozenset[bytes]
    leave: frozenset[bytes]


def plan_groups(joined: frozenset[bytes], addresses: Iterable[IPAddress]) -> GroupChange:
    """What to join and leave so that exactly the addresses' groups are joined."""
    wanted = group_macs(addresses)
    return GroupChange(join=wanted - joined, leave=joined - wanted)
