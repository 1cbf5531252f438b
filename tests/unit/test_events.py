"""The one Event recorder and outbox: bodies, the budget, the queue and its drop policy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from local_ccm.kube.errors import Transient
from local_ccm.runtime import events as ev
from local_ccm.runtime.outbox import EventOutbox
from tests.fakes.clock import START_WALL, FakeClock, settle

Obj = dict[str, Any]
WARNING = ev.EventSpec("Warning", "Broken", "it broke")
NODE = ev.node("n1", "u1")


def test_the_body_names_the_subject_the_reporter_and_the_time() -> None:
    pool = ev.Subject("ClusterCIDR", "p", "u2", "networking.x-k8s.io/v1")
    body = ev.event_body(
        WARNING, pool, ev.Reporter("ipam", "pod-1"), namespace="ns", now=START_WALL
    )
    assert body["metadata"] == {"generateName": "p.", "namespace": "ns"}
    assert body["involvedObject"] == {
        "apiVersion": "networking.x-k8s.io/v1", "kind": "ClusterCIDR", "name": "p", "uid": "u2",
    }  # fmt: skip
    assert body["source"] == {"component": "ipam"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("ipam", "pod-1")
    assert body["firstTimestamp"] == body["lastTimestamp"] == ev.rfc3339(START_WALL)
    assert (body["type"], body["reason"], body["count"]) == ("Warning", "Broken", 1)


def test_an_agent_names_its_host_and_long_messages_are_clipped() -> None:
    long = ev.EventSpec("Normal", "Long", "x" * 2000)
    body = ev.event_body(
        long, NODE, ev.Reporter("agent", "n1", host="n1"), namespace="d", now=START_WALL
    )
    assert body["source"] == {"component": "agent", "host": "n1"}
    assert len(body["message"]) == ev.MAX_MESSAGE
    assert body["message"].endswith("…")


def test_the_same_key_waits_ten_minutes_and_forget_resets_it() -> None:
    budget, ok = ev.admit(ev.EventBudget(), "k", 0.0)
    assert ok
    assert not ev.admit(budget, "k", 599.0)[1]
    assert ev.admit(budget, "other", 1.0)[1]
    assert ev.admit(budget, "k", 600.0)[1]
    assert ev.admit(ev.forget(budget, "k"), "k", 1.0)[1]


def test_a_per_minute_budget_caps_bursts() -> None:
    budget = ev.EventBudget(per_minute=2)
    for key in ("a", "b"):
        budget, ok = ev.admit(budget, key, 10.0)
        assert ok
    assert not ev.admit(budget, "c", 69.0)[1]
    assert ev.admit(budget, "c", 70.0)[1]


class FakeSink:
    def __init__(self, fail: int = 0) -> None:
        self.bodies: list[Obj] = []
        self.fail = fail

    async def create_event(self, namespace: str, body: Obj) -> None:
        if self.fail:
            self.fail -= 1
            raise Transient(503, "ServiceUnavailable", "busy")
        self.bodies.append(body)


def outbox(sink: FakeSink, **options: Any) -> tuple[EventOutbox, list[str]]:
    dropped: list[str] = []
    box = EventOutbox(
        sink, FakeClock(), ev.Reporter("c", "i"), namespace="ns",
        on_drop=lambda: dropped.append("x"), **options,
    )  # fmt: skip
    return box, dropped


def test_emit_queues_and_run_posts_in_order() -> None:
    async def main() -> None:
        sink = FakeSink()
        box, dropped = outbox(sink)
        assert box.emit(WARNING, NODE)
        assert box.emit(ev.EventSpec("Normal", "Fine", "ok"), NODE)
        task = asyncio.create_task(box.run())
        await settle()
        task.cancel()
        assert [b["reason"] for b in sink.bodies] == ["Broken", "Fine"]
        assert dropped == []

    asyncio.run(main())


def test_a_full_queue_or_a_failed_post_drops_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        sink = FakeSink(fail=1)
        box, dropped = outbox(sink, capacity=1)
        assert box.emit(WARNING, NODE)
        assert not box.emit(WARNING, NODE)  # full
        await box.flush(1.0)
        assert dropped == ["x", "x"]  # full, then the failed POST
        assert sink.bodies == []

    asyncio.run(main())
    assert "Event Broken not sent" in caplog.text


def test_a_budget_and_once_keep_repeats_out() -> None:
    async def main() -> None:
        sink = FakeSink()
        box, _ = outbox(sink, budget=ev.EventBudget())
        assert box.emit(WARNING, NODE)
        assert not box.emit(WARNING, NODE)
        assert box.emit(WARNING, ev.node("n2", "u2"))
        for generation in ("1", "1", "2"):
            box.once(ev.EventSpec("Normal", "Seen", generation), NODE, generation)
        await box.flush(1.0)
        assert [b["reason"] for b in sink.bodies] == ["Broken", "Broken", "Seen", "Seen"]

    asyncio.run(main())
