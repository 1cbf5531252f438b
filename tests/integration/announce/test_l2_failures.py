"""L2 announcement when something fails (docs/l2-announcement.md, "Failover"): the same world
as tests/integration/announce/test_l2_scenarios.py — real agents in Node namespaces on a bridge,
the real apiserver and service-lb-ipam, a capture on the bridge.

L2-05 the holder's link to the bridge is cut (the bridge's port set down) while its agent runs
and reaches the API server: its interface loses its carrier, so it is no longer eligible and
releases; another Node takes over and the client's entry moves within the published bound;
with the link back, exactly one MAC answers. L2-06 an IPv6-only pool and Service: the client
kernel's NDP resolves the address to the holder's MAC, and a killed holder's address moves.
L2-07 SIGTERM to the holder's agent: it releases, another Node takes over well under a second
after the release (measured, printed). L2-08 the holder's relay to the API server is stopped,
its link up: it stops answering by its renew deadline after its last successful renewal
(self-fencing, from the capture), another Node takes over after lease duration + skew margin,
and no one answers again after the next one did. In each the capture on the bridge shows no
address answered by a MAC again after another one took over.
"""

from __future__ import annotations

import ipaddress
import signal
import time
from urllib.parse import urlsplit

import pytest

from local_ccm.announce.core.hold import Timings
from tests.integration.announce.conftest import L2, Asker, LeaseHistory, Node, kill
from tests.integration.announce.test_l2_scenarios import (
    POOL4,
    POOL6,
    PUBLISHED_BOUND,
    TEST_BOUND,
    addresses,
    answered_by,
    moved_from,
    moves,
    no_address_answered_twice,
)
from tests.netns.announce.segment import arping, resolve
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(300)
TIMINGS = Timings()
# The agent reads its interfaces every 5 s: a cut link is seen within that, then the holder
# releases and the next candidate takes over within a rank step (the cut Node usually ranks
# first, and the others still count it) plus the watch latency and a write.
LINK_POLL = 5.0
LINK_BOUND = LINK_POLL + TIMINGS.rank_step
SLACK = 2.0  # for the watch latency, a write and a loaded test machine


def test_l2_05_a_cut_link_moves_the_address_and_one_mac_answers_when_it_is_back(
    world: L2,
) -> None:
    world.pool(POOL4, POOL6)
    world.space.service("cut", ipFamilies=["IPv4"])
    (vip,) = addresses(world, "cut", 1)
    holder = answered_by(world, vip)
    eventually(
        lambda: moved_from(world, vip, None) is holder, timeout=10, message="the client's entry"
    )
    with LeaseHistory(world, vip) as history:
        start = time.monotonic()
        world.segment.set_port(holder.ns, "down")
        moved, took = moves(world, vip, holder, start)
        print(
            f"\nL2-05 link cut: the client's entry for {vip} moved from {holder.name} to "
            f"{moved.name} after {took:.2f}s (bound {LINK_BOUND:.1f}s + watch and write)"
        )
        assert took <= LINK_BOUND + SLACK
        assert world.holder(vip) == moved.name
        # It let go (an empty holder) rather than being taken over after its Lease expired.
        assert "" in [r.holder for r in history.records]
        world.segment.set_port(holder.ns, "up")
        time.sleep(LINK_POLL + 2)  # the cut Node reads its link again; its DAD ends
    assert arping(world.client, vip, count=3) == {moved.mac}
    assert world.holder(vip) == moved.name  # sticky: the Node that came back does not take it
    no_address_answered_twice(world, vip)


def test_l2_06_ipv6_only_resolved_by_ndp_and_taken_over(world: L2) -> None:
    world.space.pool([POOL6], l2Announcement={})
    world.space.service("six", ipFamilyPolicy="SingleStack", ipFamilies=["IPv6"])
    (vip,) = addresses(world, "six", 1)
    assert isinstance(vip, ipaddress.IPv6Address)
    holder = answered_by(world, vip)  # the client kernel's NDP
    start = time.monotonic()
    kill(holder)
    moved, took = moves(world, vip, holder, start)
    print(
        f"\nL2-06 IPv6-only takeover of {vip}: the client's entry moved to {moved.name} after "
        f"{took:.2f}s (published bound {PUBLISHED_BOUND:.0f}s + watch latency + a write)"
    )
    assert took <= PUBLISHED_BOUND + TIMINGS.renew_period + SLACK
    assert world.holder(vip) == moved.name
    time.sleep(3)  # the new holder's announcement rounds
    no_address_answered_twice(world, vip)


def test_l2_07_sigterm_hands_over_well_under_a_second(world: L2) -> None:
    world.pool(POOL4, POOL6)
    world.space.service("term", ipFamilies=["IPv4"])
    (vip,) = addresses(world, "term", 1)
    holder = answered_by(world, vip)
    resolve(world.client, vip)
    with LeaseHistory(world, vip, interval=0.02) as history:
        signalled = time.time()
        holder.agent.signal(signal.SIGTERM)
        moved = eventually(
            lambda: moved_from(world, vip, holder),
            timeout=TEST_BOUND,
            interval=0.05,
            message=f"{vip} handed over by {holder.name}",
        )
        eventually(lambda: history.first_after(holder.name), timeout=5, message="the new record")
    assert holder.agent.wait(timeout=10) == 0
    released = next(r for r in history.records if r.holder == "")
    taken = history.first_after(holder.name)
    assert taken is not None
    assert taken.holder == moved.name
    assert released.renewed is not None
    assert taken.acquired is not None
    after_release = taken.acquired - released.renewed  # both written by the agents' clocks
    first_new = min(
        t for t, a in world.capture.timed_answers() if a.address == vip and a.mac == moved.mac
    )
    print(
        f"\nL2-07 SIGTERM to {holder.name}: released {released.renewed - signalled:.3f}s "
        f"after the signal; {moved.name} took {vip} over {after_release:.3f}s after the "
        f"release and announced it {first_new - signalled:.3f}s after the signal"
    )
    assert 0 <= after_release < 1.0
    time.sleep(3)
    no_address_answered_twice(world, vip)


def test_l2_08_cut_off_from_the_api_server_the_holder_fences_itself(world: L2) -> None:
    world.pool(POOL4, POOL6)
    world.space.service("fence", ipFamilies=["IPv4"])
    (vip,) = addresses(world, "fence", 1)
    assert isinstance(vip, ipaddress.IPv4Address)
    holder = answered_by(world, vip)
    with LeaseHistory(world, vip) as history, Asker(world, vip) as asker:
        time.sleep(1)
        cut = time.time()
        cut_off(holder)
        eventually(
            lambda: history.first_after(holder.name),
            timeout=TEST_BOUND,
            message=f"another Node takes {vip} over",
        )
        time.sleep(3)  # the new holder answers the asker for a while
    last_renewal = history.last_of(holder.name).renewed
    taken = history.first_after(holder.name)
    assert last_renewal is not None
    assert taken is not None
    answers = [(t, a.mac) for t, a in world.capture.timed_answers() if a.address == vip]
    last_reply = max(t for t, mac in answers if mac == holder.mac)
    first_new = min(t for t, mac in answers if mac != holder.mac)
    print(
        f"\nL2-08 {holder.name} cut off from the API server {cut - last_renewal:.2f}s after "
        f"its last renewal: its last reply {last_reply - last_renewal:.2f}s after it (renew "
        f"deadline {TIMINGS.renew_deadline:.0f}s); {taken.holder} answered "
        f"{first_new - last_renewal:.2f}s after it (lease duration + skew margin "
        f"{TIMINGS.lease_duration + TIMINGS.skew_margin:.0f}s)"
    )
    # Self-fencing: silent by the renew deadline (a renewal is decided a little before its
    # write is sent, renewTime is written at the decision), while the client kept asking.
    assert last_reply <= last_renewal + TIMINGS.renew_deadline + 0.5
    assert max(asker.sent) >= last_reply + 2
    # The next one answers only after lease duration + skew margin: never two at once.
    assert first_new >= last_renewal + TIMINGS.lease_duration + TIMINGS.skew_margin - 0.5
    assert first_new - last_reply >= 2
    assert arping(world.client, vip, count=2) == {world.by_name(taken.holder).mac}
    restore_api(holder)
    time.sleep(TIMINGS.lease_duration)  # it reads the Lease again: someone else holds it
    assert world.holder(vip) == taken.holder
    assert arping(world.client, vip, count=2) == {world.by_name(taken.holder).mac}
    no_address_answered_twice(world, vip)


def cut_off(node: Node) -> None:
    """Stop the relay between the Node's namespace and the API server: open connections are
    cut, new ones refused; the agent and its link stay up."""
    assert node.agent.relay is not None
    node.agent.relay.close()
    node.agent.relay = None


def restore_api(node: Node) -> None:
    assert node.agent.api_url is not None
    port = urlsplit(node.agent.api_url).port
    assert port is not None
    node.agent.relay = LoopbackRelay(node.ns.name, ("127.0.0.1", port))
