"""The speaker answers ARP and NDP with real frames on a bridged segment, as the client's real
tools see it: iputils' arping, and the client kernel's own resolution and DAD."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.netns.announce.segment import (
    OTHER4,
    OTHER6,
    VIP4,
    VIP6,
    Capture,
    Segment,
    SpeakerThread,
    arping,
    group_macs,
    neighbour,
    resolve,
    resolved,
    solicited_mac,
)
from tests.support.waiting import eventually

Speakers = Callable[..., SpeakerThread]


def test_the_client_resolves_both_families_to_the_speakers_mac(
    segment: Segment, speakers: Speakers
) -> None:
    node, mac = segment.node()
    client = segment.client()
    speaker = speakers(node).start([VIP4, VIP6])
    speaker.allow(VIP4, VIP6)

    assert eventually(lambda: arping(client, VIP4, count=1), timeout=10) == {mac}
    assert arping(client, VIP4, count=2) == {mac}
    resolve(client, VIP4)

    assert eventually(lambda: resolved(client, VIP6), timeout=10, interval=0.5) == mac
    assert eventually(lambda: neighbour(client, VIP4), timeout=5) == mac
    assert speaker.counters.replies[("eth0", "ipv4")] >= 3
    assert speaker.counters.replies[("eth0", "ipv6")] >= 1


def test_addresses_not_served_or_not_allowed_are_not_answered(
    segment: Segment, speakers: Speakers
) -> None:
    node, mac = segment.node()
    client = segment.client()
    capture = Capture(segment.bridge).start()
    speaker = speakers(node).start([VIP4, VIP6, OTHER4])  # OTHER4 served, its fence closed
    speaker.allow(VIP4, VIP6, OTHER6)  # OTHER6 allowed, but not served on eth0
    assert eventually(lambda: arping(client, VIP4, count=1), timeout=10) == {mac}

    assert arping(client, OTHER4, count=2) == set()
    for _ in range(3):
        resolve(client, OTHER6)
        time.sleep(1)
    assert neighbour(client, OTHER6) is None

    capture.stop()
    assert {a.address for a in capture.answers()} <= {VIP4, VIP6}
    assert speaker.counters.dropped[("eth0", "not_answered")] >= 3


def test_duplicate_address_detection_probes_are_answered(
    segment: Segment, speakers: Speakers
) -> None:
    node, mac = segment.node()
    client = segment.client()
    capture = Capture(segment.bridge).start()
    speaker = speakers(node).start([VIP4, VIP6])
    speaker.allow(VIP4, VIP6)

    # RFC 5227: arping -D probes from 0.0.0.0 and fails (exit 1) on a reply; the kernel's
    # own DAD for an address the client adds marks it dadfailed when our advertisement comes.
    assert eventually(lambda: arping(client, VIP4, count=1, dad=True), timeout=10) == {mac}

    assert eventually(lambda: resolved(client, VIP6), timeout=10, interval=0.5) == mac
    client.sysctl("net.ipv6.conf.eth0.accept_dad=1")
    client.add_address("eth0", f"{VIP6}/64", nodad=False)

    def dad_failed() -> bool:
        shown = client.ip_json("addr", "show", "dev", "eth0")[0]["addr_info"]
        return any(a["local"] == str(VIP6) and a.get("dadfailed") for a in shown)

    eventually(dad_failed, timeout=10, message="the client's DAD failing")

    capture.stop()
    dad_answers = [a for a in capture.answers() if a.address == VIP6]
    assert dad_answers
    assert {(a.mac, a.kind, a.to) for a in dad_answers} >= {
        (mac, "na-unsolicited", "33:33:00:00:00:01")  # S clear, to all nodes (RFC 4861 7.2.4)
    }


def test_solicited_node_groups_are_joined_for_served_ipv6_addresses(
    segment: Segment, speakers: Speakers
) -> None:
    node, _ = segment.node()
    group = solicited_mac(VIP6)
    speaker = speakers(node).start([VIP4, VIP6])

    eventually(lambda: group in group_macs(node), timeout=10, message=f"{group} joined")
    speaker.call(lambda: speaker.speaker.set_addresses("eth0", [VIP4]))
    eventually(lambda: group not in group_macs(node), timeout=5, message=f"{group} left")
    speaker.call(lambda: speaker.speaker.set_addresses("eth0", [VIP4, VIP6]))
    eventually(lambda: group in group_macs(node), timeout=5, message=f"{group} joined again")
    speaker.stop()
    assert group not in group_macs(node)  # the membership ends with the socket
