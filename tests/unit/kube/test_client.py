"""Client verbs over a fake Transport: field manager, retries, watch streams."""

from __future__ import annotations

import json

import pytest

from local_ccm.kube.backoff import Backoff, RetryPolicy
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import Conflict, Gone, Transient
from local_ccm.kube.resources import LEASES, NODES
from tests.fakes.transport import FakeStream, FakeTransport, json_response, text_response

CONFIG = ClusterConfig(server="https://127.0.0.1:6443")


class FixedRng:
    def random(self) -> float:
        return 0.5


def make_client(transport: FakeTransport, max_attempts: int = 3) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    policy = RetryPolicy(
        max_attempts=max_attempts,
        backoff=Backoff(initial=1.0, cap=10.0, jitter=0.0),
        sleep=sleeps.append,
        rng=FixedRng(),
    )
    client = Client(CONFIG, field_manager="fm", retry=policy, transport=transport, timeout=7.0)
    return client, sleeps


def test_every_write_carries_the_field_manager() -> None:
    fake = FakeTransport([json_response(200, {})] * 4)
    client, _ = make_client(fake)
    client.create(LEASES, {"metadata": {"name": "l", "namespace": "ns"}})
    client.update(LEASES, {"metadata": {"name": "l", "namespace": "ns"}})
    client.patch(NODES, "n1", {"metadata": {}}, patch_type="merge")
    client.patch(NODES, "n1", {}, patch_type="apply", force=True)
    assert all("fieldManager=fm" in r.path for r in fake.sent)


def test_per_call_timeout_overrides_default() -> None:
    fake = FakeTransport([json_response(200, {})] * 2)
    client, _ = make_client(fake)
    client.get(NODES, "n1")
    client.get(NODES, "n1", timeout=2.0)
    assert fake.timeouts == [7.0, 2.0]


def test_get_is_retried_on_transient_with_backoff() -> None:
    fake = FakeTransport(
        [Transient(0, "Timeout", "t"), Transient(503, "x", "y"), json_response(200, {"ok": 1})]
    )
    client, sleeps = make_client(fake)
    assert client.get(NODES, "n1") == {"ok": 1}
    assert sleeps == [1.0, 2.0]


def test_retry_after_is_honoured() -> None:
    fake = FakeTransport([json_response(429, {}, retry_after="4"), json_response(200, {})])
    client, sleeps = make_client(fake)
    client.patch(NODES, "n1", [])
    assert sleeps == [4.0]


def test_ambiguous_write_failure_is_not_resent() -> None:
    fake = FakeTransport([Transient(0, "Timeout", "t", request_sent=True)])
    client, sleeps = make_client(fake)
    with pytest.raises(Transient):
        client.patch(NODES, "n1", [])
    assert (len(fake.sent), sleeps) == (1, [])


def test_write_is_retried_when_never_sent() -> None:
    fake = FakeTransport(
        [
            Transient(0, "ConnectionError", "refused", request_sent=False),
            json_response(201, {"created": True}),
        ]
    )
    client, sleeps = make_client(fake)
    assert client.create(LEASES, {"metadata": {"name": "l"}}, namespace="ns") == {"created": True}
    assert sleeps == [1.0]


def test_retries_give_up_after_max_attempts() -> None:
    fake = FakeTransport([Transient(500, "a", "b")] * 2)
    client, sleeps = make_client(fake, max_attempts=2)
    with pytest.raises(Transient):
        client.get(NODES, "n1")
    assert sleeps == [1.0]


def test_conflict_is_raised_without_retry() -> None:
    fake = FakeTransport([json_response(409, {"reason": "Conflict", "message": "stale"})])
    client, sleeps = make_client(fake)
    with pytest.raises(Conflict, match="stale"):
        client.update(NODES, {"metadata": {"name": "n1", "resourceVersion": "1"}})
    assert sleeps == []


def test_request_escape_hatch_returns_text() -> None:
    fake = FakeTransport([json_response(200, {"gitVersion": "v1"}), text_response("ok")])
    client, _ = make_client(fake)
    assert client.request("GET", "/version") == {"gitVersion": "v1"}
    assert client.request("GET", "/readyz") == "ok"


def _line(kind: str, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_watch_yields_events_and_skips_blank_lines() -> None:
    stream = FakeStream(
        [
            _line("ADDED", {"metadata": {"name": "a"}}),
            b"\n",
            _line("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
        ]
    )
    fake = FakeTransport(streams=[stream])
    client, _ = make_client(fake)
    events = list(client.watch(NODES, resource_version="5", timeout_seconds=30))
    assert [e.type for e in events] == ["ADDED", "BOOKMARK"]
    assert "allowWatchBookmarks=true" in fake.sent[0].path
    assert fake.timeouts == [90.0]  # server timeout + read slack


def test_watch_error_event_410_raises_gone() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    fake = FakeTransport(streams=[FakeStream([_line("ERROR", status)])])
    client, _ = make_client(fake)
    with pytest.raises(Gone):
        list(client.watch(NODES, resource_version="1"))


def test_watch_open_is_retried_on_transient() -> None:
    fake = FakeTransport(streams=[Transient(0, "ConnectionError", "x"), FakeStream([])])
    client, sleeps = make_client(fake)
    assert list(client.watch(NODES)) == []
    assert sleeps == [1.0]


def test_watch_closed_before_start_reads_nothing() -> None:
    stream = FakeStream([_line("ADDED", {"metadata": {"name": "a"}})])
    client, _ = make_client(FakeTransport(streams=[stream]))
    watch = client.watch(NODES)
    watch.close()
    assert list(watch) == []
    assert stream.closed


def test_field_manager_is_required() -> None:
    with pytest.raises(ValueError, match="field manager"):
        Client(CONFIG, field_manager="", transport=FakeTransport())
