"""The Node API adapter over a scripted transport: requests it builds, what it observes,
how it translates errors, and the informer ListWatch over it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.kube import errors as ke
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.backoff import RetryPolicy
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.nodes import Access, KubeNodeApi, NodeListWatch, TokenBucket
from local_ccm.kube.request import Response
from local_ccm.runtime.access import KubeReviews
from tests.fakes.nodes import FakeNodeApi
from tests.fakes.transport import FakeStream, FakeTransport, json_response, node, page

Seen = list[tuple[str, str, str]]


def adapter(fake: FakeTransport, **kw: Any) -> tuple[KubeNodeApi, Seen]:
    seen: Seen = []
    client = Client(
        ClusterConfig("https://h"), field_manager="fm", transport=fake,
        retry=RetryPolicy(max_attempts=1),
    )  # fmt: skip
    api = KubeNodeApi(
        AsyncClient(client), observe=lambda v, res, c, _: seen.append((v, res, c)), **kw
    )
    return api, seen


def test_list_adds_kind_slims_and_observes() -> None:
    fake = FakeTransport([json_response(200, page([{"metadata": {"name": "a"}}], "7", "t"))])
    api, seen = adapter(fake, slim=lambda n: {"kind": n["kind"], "name": n["metadata"]["name"]})
    listed = asyncio.run(api.list_nodes("role=x", fields="metadata.name=a"))
    assert listed.items == ({"kind": "Node", "name": "a"},)
    assert (listed.resource_version, listed.continue_token) == ("7", "t")
    assert "labelSelector=role%3Dx" in fake.sent[0].path
    assert "fieldSelector=metadata.name%3Da" in fake.sent[0].path
    assert seen == [("LIST", "nodes", "200")]


def test_status_patch_and_preconditioned_delete() -> None:
    fake = FakeTransport([json_response(200, node("a", "8")), json_response(200, {})])
    api, seen = adapter(fake, write_timeout=2.5)
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]
    asyncio.run(api.patch_node("a", ops, subresource="status"))
    asyncio.run(api.delete_node("a", uid="u", resource_version="8"))
    patch, delete = fake.sent
    assert patch.path.startswith("/api/v1/nodes/a/status?")
    assert patch.content_type == "application/json-patch+json"
    assert json.loads(delete.body or b"")["preconditions"] == {"uid": "u", "resourceVersion": "8"}
    assert fake.timeouts == [2.5, 2.5]
    assert seen == [("PATCH", "nodes/status", "200"), ("DELETE", "nodes", "200")]


def test_an_answer_of_no_known_kind_becomes_transient() -> None:
    fake = FakeTransport([Response(418, b"teapot")])
    api, seen = adapter(fake)
    with pytest.raises(ke.Transient) as caught:
        asyncio.run(api.get_node("a"))
    assert caught.value.status == 418
    assert seen == [("GET", "nodes", "418")]


def test_known_kinds_pass_through() -> None:
    fake = FakeTransport([json_response(404, {"reason": "NotFound", "message": "gone"})])
    api, _ = adapter(fake)
    with pytest.raises(ke.NotFound):
        asyncio.run(api.get_node("a"))


def test_access_review_and_event() -> None:
    fake = FakeTransport([
        json_response(201, {"status": {"allowed": True}}), json_response(201, {"kind": "Event"}),
    ])  # fmt: skip
    api, seen = adapter(fake)
    reviews = KubeReviews(api.client)
    assert asyncio.run(reviews.allowed(Access("patch", "nodes", subresource="status"))) is True
    asyncio.run(api.create_event("default", {"metadata": {"generateName": "x."}}))
    review = json.loads(fake.sent[0].body or b"")
    assert review["spec"]["resourceAttributes"] == {
        "verb": "patch", "resource": "nodes", "subresource": "status",
    }  # fmt: skip
    assert fake.sent[1].path.startswith("/api/v1/namespaces/default/events?")
    assert (fake.sent[0].method, fake.sent[0].path.split("?")[0]) == (
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    )  # fmt: skip
    assert [s[:2] for s in seen] == [("POST", "events")]


def test_watch_yields_events_and_is_observed_when_it_ends() -> None:
    lines = [json.dumps({"type": "ADDED", "object": node("a", "9")}).encode()]
    fake = FakeTransport(streams=[FakeStream(lines)])
    api, seen = adapter(fake)

    async def collect() -> list[str]:
        return [e.resource_version async for e in api.watch_nodes(None, "8")]

    assert asyncio.run(collect()) == ["9"]
    assert "resourceVersion=8" in fake.sent[0].path
    assert seen == [("WATCH", "nodes", "200")]


def test_the_list_watch_passes_the_selectors() -> None:
    fake_api = FakeNodeApi(nodes=[node("a", "1"), node("b", "1")])
    source = NodeListWatch(fake_api, fields="metadata.name=b")
    listed = asyncio.run(source.list_page(None))
    assert [n["metadata"]["name"] for n in listed.items] == ["b"]


def test_error_kinds_name_the_class() -> None:
    assert (ke.ApiError.kind, ke.NotFound.kind, ke.Transient.kind) == (
        "error", "not_found", "transient",
    )  # fmt: skip


def test_requests_beyond_the_burst_are_spaced_in_order_and_time_pays_back() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=5.0, burst=2, now=lambda: now[0])
    assert [round(bucket.reserve(), 3) for _ in range(5)] == [0.0, 0.0, 0.2, 0.4, 0.6]
    now[0] = 1.0  # five tokens came back, three of them were promised
    assert [round(bucket.reserve(), 3) for _ in range(3)] == [0.0, 0.0, 0.2]


def test_waiting_requests_go_in_groups_at_the_end_of_their_slot() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=5.0, burst=3, now=lambda: now[0], group=3)  # slots of 0.6 s
    delays = [round(bucket.reserve(), 3) for _ in range(9)]
    # tokens due at 0.2, 0.4, 0.6 go at 0.6; those due at 0.8, 1.0, 1.2 at 1.2
    assert delays == [0.0, 0.0, 0.0, 0.6, 0.6, 0.6, 1.2, 1.2, 1.2]
    now[0] = 5.0  # the bucket refilled: a request with a token at hand goes at once
    assert [round(bucket.reserve(), 3) for _ in range(4)] == [0.0, 0.0, 0.0, 0.4]  # 5.2 → 5.4


def test_a_group_is_never_larger_than_the_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=1.0, burst=2, now=lambda: now[0], group=10)  # slots of 2 s
    assert [round(bucket.reserve(), 3) for _ in range(6)] == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0]


@settings(max_examples=300, deadline=None)
@given(
    qps=st.sampled_from([0.5, 1.0, 5.0, 20.0, 50.0]),
    burst=st.integers(1, 12),
    group=st.integers(1, 6),
    gaps=st.lists(st.floats(0.0, 1.5, allow_nan=False), min_size=1, max_size=60),
    start=st.floats(0.0, 1000.0, allow_nan=False),
)
def test_grouped_requests_keep_the_rate_and_wait_less_than_one_slot_longer(
    qps: float, burst: int, group: int, gaps: list[float], start: float
) -> None:
    """Whatever the arrivals: every request goes once its token is there (a token bucket of
    the same rate and burst never runs short at the send times), and less than one slot
    (`group` tokens' time) later than it would alone."""
    arrivals = [start + sum(gaps[: i + 1]) for i in range(len(gaps))]
    now = [start]
    grouped = TokenBucket(qps, burst, now=lambda: now[0], group=group)
    alone = TokenBucket(qps, burst, now=lambda: now[0])
    sends = []
    for t in arrivals:
        now[0] = t
        send, due = t + grouped.reserve(), t + alone.reserve()
        assert due - 1e-9 <= send < due + min(group, burst) / qps
        sends.append(send)
    tokens, last = float(burst), start
    for t in sorted(sends):
        tokens = min(burst, tokens + (t - last) * qps) - 1
        last = t
        assert tokens >= -1e-6


def test_the_rate_limit_spends_the_burst_then_refills_with_time() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=1.0, burst=2, now=lambda: now[0])

    async def takes() -> bool:
        await asyncio.wait_for(bucket.take(), 0.5)
        await asyncio.wait_for(bucket.take(), 0.5)
        now[0] += 1.0  # one second later: one token back
        await asyncio.wait_for(bucket.take(), 0.5)
        try:
            await asyncio.wait_for(bucket.take(), 0.05)
        except TimeoutError:
            return True  # empty: the fourth request waits
        return False

    assert asyncio.run(takes())
