"""The packet adapter's pure decisions: the token bucket, a takeover's rounds and frames, the
solicited-node groups to join and leave."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.announce.core import packets, wire
from local_ccm.announce.core.wire import Bucket, RateLimit

LIMIT = RateLimit(rate=10.0, burst=5.0)
MAC = bytes.fromhex("525400123402")
LINK = packets.Link(MAC, ipaddress.IPv6Address("fe80::5054:ff:fe12:3402").packed)
V4 = ipaddress.IPv4Address("192.0.2.10")
V6 = ipaddress.IPv6Address("2001:db8::10")


# ------------------------------------------------------------------ the bucket


def test_a_full_bucket_sends_a_burst_then_drops() -> None:
    bucket = wire.full(LIMIT, 100.0)
    sent = []
    for _ in range(7):
        ok, bucket = wire.take(bucket, LIMIT, 100.0)
        sent.append(ok)

    assert sent == [True] * 5 + [False] * 2


def test_tokens_come_back_at_the_rate_and_never_above_the_burst() -> None:
    empty = Bucket(0.0, 100.0)

    assert wire.take(empty, LIMIT, 100.05)[0] is False  # half a token
    assert wire.take(empty, LIMIT, 100.11)[0] is True
    assert wire.refill(empty, LIMIT, 200.0) == Bucket(5.0, 200.0)


def test_a_stale_time_earns_nothing() -> None:
    assert wire.refill(Bucket(1.0, 100.0), LIMIT, 99.0) == Bucket(1.0, 100.0)


def test_a_reservation_waits_for_its_token_and_blocks_replies_meanwhile() -> None:
    bucket = Bucket(0.5, 100.0)

    wait, bucket = wire.reserve(bucket, LIMIT, 100.0)

    assert wait == pytest.approx(0.05)
    assert wire.take(bucket, LIMIT, 100.05)[0] is False  # the earned token is the reservation's
    assert wire.take(bucket, LIMIT, 100.15)[0] is True


def test_reservations_queue_one_after_another() -> None:
    bucket = Bucket(0.0, 100.0)
    waits = []
    for _ in range(3):
        wait, bucket = wire.reserve(bucket, LIMIT, 100.0)
        waits.append(wait)

    assert waits == pytest.approx([0.1, 0.2, 0.3])


@given(st.lists(st.tuples(st.floats(0, 0.5), st.booleans()), max_size=200))
def test_no_more_frames_than_the_burst_and_the_rate_allow(steps: list[tuple[float, bool]]) -> None:
    """Replies and announcements mixed at any times: every frame is sent when its token says
    (a reply at once or never, an announcement after its wait), and over any run the frames
    sent are at most the burst plus the rate times the time taken."""
    now = start = 0.0
    bucket = wire.full(LIMIT, now)
    sent_at: list[float] = []
    for gap, is_reply in steps:
        now += gap
        if is_reply:
            ok, bucket = wire.take(bucket, LIMIT, now)
            sent_at += [now] if ok else []
        else:
            wait, bucket = wire.reserve(bucket, LIMIT, now)
            sent_at.append(now + wait)
    end = max([now, *sent_at])
    assert len(sent_at) <= LIMIT.burst + LIMIT.rate * (end - start) + 1e-6


def test_a_rate_limit_needs_a_rate_and_a_whole_frame_of_burst() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        RateLimit(rate=0.0)
    with pytest.raises(ValueError, match="burst >= 1"):
        RateLimit(burst=0.5)
    assert (wire.DEFAULT_LIMIT.rate, wire.DEFAULT_LIMIT.burst) == (100.0, 100.0)


# ------------------------------------------------------------------ takeovers


def test_rounds_are_the_offsets_after_the_start_in_order() -> None:
    assert wire.rounds(50.0, (2.0, 0.0, 1.0)) == (50.0, 51.0, 52.0)


def test_an_ipv4_round_is_both_gratuitous_arp_frames() -> None:
    frames = wire.takeover_frames(V4.packed, LINK)

    assert frames == packets.gratuitous_arp(V4.packed, MAC)
    assert wire.round_size(V4.packed) == len(frames) == 2
    assert wire.family(V4.packed) == "ipv4"


def test_an_ipv6_round_is_one_unsolicited_advertisement() -> None:
    frames = wire.takeover_frames(V6.packed, LINK)

    assert frames == (packets.unsolicited_advertisement(V6.packed, LINK),)
    assert wire.round_size(V6.packed) == len(frames) == 1
    assert wire.family(V6.packed) == "ipv6"


# ------------------------------------------------------------------ groups


def test_only_ipv6_addresses_have_groups_and_shared_low_bits_share_one() -> None:
    twin = ipaddress.IPv6Address("2001:db8:ffff::10")  # same low 24 bits as V6

    assert wire.group_macs([V4, V6, twin]) == {bytes.fromhex("3333ff000010")}


def test_groups_are_joined_and_left_to_match_the_addresses() -> None:
    other = ipaddress.IPv6Address("2001:db8::20")
    joined = wire.group_macs([V6])

    change = wire.plan_groups(joined, [other, V4])

    assert change.join == wire.group_macs([other])
    assert change.leave == joined
    assert wire.plan_groups(joined, [V6]) == wire.GroupChange(frozenset(), frozenset())
