"""The IPAM floor's own logic (tests/bench/floor_ipam.py): watch framing and the rate limit.

The floor is only worth comparing with when it does the same API work as ours for every Node:
each Node without podCIDRs queued once, whatever the chunk boundaries of the watch stream.
"""

from __future__ import annotations

import ipaddress
import json

import pytest

from tests.bench import floor_ipam
from tests.support import ipam_bench

pytestmark = pytest.mark.unit


def _event(kind: str, name: str, cidrs: list[str] | None = None) -> bytes:
    spec = {"podCIDRs": cidrs} if cidrs else {}
    node = {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}
    return json.dumps({"type": kind, "object": node}).encode() + b"\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_events_split_across_chunks_and_reads_are_each_decoded_once() -> None:
    body = _event("ADDED", "a") + _event("ADDED", "b")
    # An event split between two chunks, and the chunks split between two reads.
    stream = _chunk(body[:30]) + _chunk(body[30:])
    watch = floor_ipam.Watch(stream[:7])
    watch.feed(b"")
    assert watch.queue == []
    watch.feed(stream[7:])
    assert watch.queue == [("a", "uid-a"), ("b", "uid-b")]


def test_a_node_is_queued_once_and_not_when_it_holds_cidrs_or_is_deleted() -> None:
    watch = floor_ipam.Watch(b"")
    watch.feed(_chunk(_event("ADDED", "a")) + _chunk(_event("MODIFIED", "a")))
    watch.feed(_chunk(_event("ADDED", "b", ["10.0.0.0/24"])) + _chunk(_event("DELETED", "c")))
    assert watch.queue == [("a", "uid-a")]


def test_the_end_of_the_watch_stops_the_floor() -> None:
    watch = floor_ipam.Watch(b"0\r\n\r\n")
    with pytest.raises(SystemExit, match="watch ended"):
        watch.feed(b"")


def test_bucket_gives_its_burst_then_one_token_per_interval() -> None:
    clock = [100.0]
    bucket = floor_ipam.Bucket(qps=4.0, burst=2.0, now=lambda: clock[0])
    assert [bucket.wait(), bucket.wait()] == [0.0, 0.0]
    assert bucket.wait() == 0.25
    clock[0] += 0.125
    assert bucket.wait() == 0.125
    clock[0] += 0.125
    assert bucket.wait() == 0.0
    clock[0] += 10.0  # refilled up to the burst, not beyond
    assert [bucket.wait(), bucket.wait(), bucket.wait() > 0] == [0.0, 0.0, True]


def test_the_floor_allocates_from_the_benchmarks_pools() -> None:
    """Its copies of the pools (a script run alone cannot import the tests' packages) agree."""
    assert floor_ipam.POOLS == (ipam_bench.POOL_V4, ipam_bench.POOL_V6)
    assert int(ipaddress.ip_network(ipam_bench.POOL_V4).network_address) == floor_ipam.POOL_V4
    assert int(ipaddress.ip_network(ipam_bench.POOL_V6).network_address) == floor_ipam.POOL_V6
    assert floor_ipam.HOST_BITS == ipam_bench.BITS


def _answer(name: str, body: bytes) -> dict[str, object]:
    """The Node as the API server answers the PATCH `body` (its test and two adds)."""
    test, _, cidrs = json.loads(body)
    spec = {"podCIDR": cidrs["value"][0], "podCIDRs": cidrs["value"]}
    return {"metadata": {"name": name, "uid": test["value"]}, "spec": spec}


def test_decisions_mode_allocates_in_order_from_its_ledger_and_caches_the_watched_views() -> None:
    decisions = floor_ipam.Decisions()
    watch = floor_ipam.Watch(b"", decisions)
    watch.feed(_chunk(_event("ADDED", "a")) + _chunk(_event("ADDED", "b")))
    assert watch.queue == [("a", "uid-a"), ("b", "uid-b")]
    answers = []
    for name, _ in watch.queue:
        answers.append(_answer(name, decisions.body(name)))
        decisions.answered(answers[-1])
    assert [a["spec"]["podCIDRs"] for a in answers] == [  # type: ignore[index]
        ["10.128.0.0/24", "fd00:128::/120"], ["10.128.1.0/24", "fd00:128::100/120"],
    ]  # fmt: skip
    assert decisions.needs("MODIFIED", answers[0]) is False  # the watch's echo of the write
    assert decisions.views["a"].pod_cidrs == decisions.written["uid-a"].pod_cidrs
    watch.feed(_chunk(_event("ADDED", "c")))
    assert watch.queue[2:] == [("c", "uid-c")]
    # The pool's ledger holds both: the next Node gets the third block.
    assert json.loads(decisions.body("c"))[1]["value"] == "10.128.2.0/24"
