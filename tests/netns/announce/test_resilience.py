"""The speaker survives its interface going down or away, and says what is missing when it
may not open a packet socket."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from tests.netns.announce.segment import VIP4, Segment, SpeakerThread, arping
from tests.support.waiting import eventually

Speakers = Callable[..., SpeakerThread]


def test_an_interface_that_goes_away_and_comes_back_is_served_again(
    segment: Segment, speakers: Speakers
) -> None:
    node, _ = segment.node()
    client = segment.client()
    speaker = speakers(node).start([VIP4])
    speaker.allow(VIP4)
    speaker.wait_serving()

    node.ip("link", "del", "eth0")  # ENETDOWN on the socket, then no interface to reopen on
    eventually(lambda: speaker.counters.reopens["eth0"] >= 2, timeout=10, message="retries")
    mac = segment.attach(node)  # a new eth0: a new index and MAC

    assert eventually(lambda: arping(client, VIP4, count=1), timeout=15) == {mac}


def test_a_link_going_down_and_up_is_served_again(segment: Segment, speakers: Speakers) -> None:
    node, mac = segment.node()
    client = segment.client()
    speaker = speakers(node).start([VIP4])
    speaker.allow(VIP4)
    speaker.wait_serving()

    node.ip("link", "set", "eth0", "down")
    eventually(lambda: speaker.counters.reopens["eth0"] >= 1, timeout=10, message="a reopen")
    node.ip("link", "set", "eth0", "up")

    assert eventually(lambda: arping(client, VIP4, count=1), timeout=15) == {mac}


WITHOUT_NET_RAW = r"""
import asyncio, ipaddress, sys
from local_ccm.announce.packetsocket import capability_problem
from local_ccm.announce.speaker import PacketCapabilityError, Speaker

print("problem:", capability_problem())
speaker = Speaker(lambda packed: True)
speaker.set_addresses("eth0", [ipaddress.ip_address("192.0.2.50")])
try:
    asyncio.run(asyncio.wait_for(speaker.run(), 10))
except PacketCapabilityError as exc:
    print("error:", exc)
"""


def test_without_cap_net_raw_the_reason_is_given_not_retried(segment: Segment) -> None:
    node, _ = segment.node()
    argv = ["ip", "netns", "exec", node.name, "setpriv", "--inh-caps=-net_raw",
            "--bounding-set=-net_raw", sys.executable, "-c", WITHOUT_NET_RAW]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)

    assert done.returncode == 0, done.stderr
    problem, error = done.stdout.splitlines()
    assert "needs CAP_NET_RAW" in problem
    assert "add NET_RAW to the agent container's capabilities" in problem
    assert error.startswith("error: answering ARP and NDP on eth0 needs a packet socket")
    assert "Traceback" not in done.stderr
