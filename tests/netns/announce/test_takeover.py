"""Ownership moving between two Nodes' speakers, and the rate limit, with real frames: the
client's neighbour entries follow the gratuitous ARP and unsolicited advertisements, and the
capture on the bridge never shows two MACs answering one address."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from local_ccm.announce.core.wire import RateLimit
from tests.netns.announce.segment import (
    VIP4,
    VIP6,
    Capture,
    Segment,
    SpeakerThread,
    arping,
    flood_arp,
    neighbour,
    resolved,
    switches,
)
from tests.support.waiting import eventually

Speakers = Callable[..., SpeakerThread]


def test_ownership_moves_to_the_second_speaker_and_the_client_follows(
    segment: Segment, speakers: Speakers
) -> None:
    (node1, mac1), (node2, mac2), (node3, mac3) = segment.node(), segment.node(), segment.node()
    client = segment.client()
    capture = Capture(segment.bridge).start()
    first, second, third = (speakers(n).start([VIP4, VIP6]) for n in (node1, node2, node3))
    for speaker in (first, second, third):
        speaker.wait_serving()
    first.take_over(VIP4, VIP6)
    assert eventually(lambda: resolved(client, VIP4), timeout=10) == mac1
    assert eventually(lambda: resolved(client, VIP6), timeout=10, interval=0.5) == mac1
    eventually(lambda: first.counters.announcements[("eth0", "ipv4")] == 6, timeout=5)

    asking = threading.Event()

    def ask() -> None:  # requests all along the move: answers from both would show in them
        while not asking.is_set():
            arping(client, VIP4, count=1)

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        time.sleep(1)
        first.deny(VIP4, VIP6)  # the first one's fence closes (it released, or lost the Lease)
        second.take_over(VIP4, VIP6)  # then the second wins the Lease and announces
        eventually(lambda: neighbour(client, VIP4) == mac2, timeout=5, message="IPv4 moved")
        eventually(lambda: neighbour(client, VIP6) == mac2, timeout=5, message="IPv6 moved")
        time.sleep(2.5)  # the rest of the rounds
    finally:
        asking.set()
        asker.join()
    capture.stop()

    answers = capture.answers()
    assert switches(answers, VIP4) == [mac1, mac2]
    assert switches(answers, VIP6) == [mac1, mac2]
    assert mac3 not in {a.mac for a in answers}
    from_second = [(a.address, a.kind) for a in answers if a.mac == mac2]
    for kind in ("garp-request", "garp-reply"):
        assert from_second.count((VIP4, kind)) == 3  # one of each form per round
    assert from_second.count((VIP6, "na-unsolicited")) == 3
    assert second.counters.announcements[("eth0", "ipv4")] == 6
    assert second.counters.announcements[("eth0", "ipv6")] == 3


def test_announcing_stops_when_the_fence_closes_between_rounds(
    segment: Segment, speakers: Speakers
) -> None:
    node, mac = segment.node()
    segment.client()
    speaker = speakers(node).start([VIP4])
    speaker.wait_serving()
    capture = Capture(segment.bridge).start()

    speaker.take_over(VIP4)
    eventually(lambda: speaker.counters.announcements[("eth0", "ipv4")] == 2, timeout=5)
    speaker.deny(VIP4)  # before the round at 1 s
    time.sleep(3)
    capture.stop()

    garps = [a for a in capture.answers() if a.mac == mac and a.kind.startswith("garp")]
    assert sorted(a.kind for a in garps) == ["garp-reply", "garp-request"]
    assert speaker.counters.announcements[("eth0", "ipv4")] == 2


def test_the_rate_limit_holds_under_a_flood_of_requests(
    segment: Segment, speakers: Speakers
) -> None:
    node, mac = segment.node()
    client = segment.client()
    speaker = speakers(node, limit=RateLimit(rate=20.0, burst=10.0)).start([VIP4])
    speaker.allow(VIP4)
    assert eventually(lambda: arping(client, VIP4, count=1), timeout=10) == {mac}
    time.sleep(1)  # the bucket fills up again
    capture = Capture(segment.bridge).start()
    before = speaker.counters.replies[("eth0", "ipv4")]

    start = time.monotonic()
    flood_arp(client, VIP4, 3000)
    time.sleep(1)
    elapsed = time.monotonic() - start
    capture.stop()

    replies = [a for a in capture.answers() if a.kind == "arp-reply" and a.mac == mac]
    assert 10 <= len(replies) <= 10 + 20 * elapsed + 1
    assert speaker.counters.replies[("eth0", "ipv4")] - before == len(replies)
    # The flood reached the speaker: what it did not answer, its limiter or the kernel (its
    # socket's queue full) dropped; generous, as a loaded machine may lose frames on the way.
    dropped = speaker.counters.dropped
    assert dropped[("eth0", "rate_limit")] + dropped[("eth0", "overrun")] + len(replies) >= 2000
    assert dropped[("eth0", "rate_limit")] >= 100


def test_the_first_round_waits_for_a_socket_still_opening(
    segment: Segment, speakers: Speakers
) -> None:
    """The Lease loop announces as soon as its write succeeded, which for the first address
    on an interface is while that interface's socket is still opening: the first round goes
    out once it is open, not a round later."""
    node, mac = segment.node()
    segment.client()
    capture = Capture(segment.bridge).start()
    speaker = speakers(node).start([VIP4])
    started = time.time()
    speaker.take_over(VIP4)  # no wait_serving: the socket is being opened
    eventually(lambda: speaker.counters.announcements[("eth0", "ipv4")] >= 2, timeout=0.8,
               interval=0.02, message="the first round, before the second's time")  # fmt: skip
    capture.stop()
    first = min(t for t, a in capture.timed_answers() if a.address == VIP4 and a.mac == mac)
    assert first - started < 0.8
    assert speaker.counters.dropped[("eth0", "send_error")] == 0
