"""The resumable Watcher over an in-memory ListWatchApi (pure logic, no sleeping)."""

from __future__ import annotations

import pytest

from local_ccm.kube.backoff import Backoff
from local_ccm.kube.errors import Forbidden, Gone, Invalid, NotFound, Transient, Unauthorized
from local_ccm.kube.request import WatchEvent
from local_ccm.kube.resources import NODES
from local_ccm.kube.watch import SYNCED, Watcher, WatchOptions, diff_snapshot, object_key
from tests.unit.kube.fakes import FakeListWatch, node, page


class FixedRng:
    def random(self) -> float:
        return 0.5


def run(fake: FakeListWatch, page_size: int = 500) -> tuple[Watcher, list[WatchEvent], list[float]]:
    sleeps: list[float] = []
    watcher = Watcher(
        fake,
        NODES,
        WatchOptions(field_selector="metadata.name=n1", page_size=page_size),
        backoff=Backoff(initial=0.5, cap=30.0, jitter=0.0),
        sleep=sleeps.append,
        rng=FixedRng(),
    )
    fake.on_exhausted = watcher.stop
    return watcher, list(watcher), sleeps


def summary(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [
        (e.type, str(e.object["metadata"].get("name", e.object["metadata"].get("resourceVersion"))))
        for e in events
    ]


def test_initial_paged_list_then_watch_from_its_resource_version() -> None:
    fake = FakeListWatch(
        lists=[page([node("a", "1")], "", cont="c1"), page([node("b", "2")], "10")],
        watches=[[WatchEvent("MODIFIED", node("a", "11"))]],
    )
    watcher, events, _ = run(fake, page_size=1)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b"), (SYNCED, "10"), ("MODIFIED", "a")]
    assert [c["continue_token"] for c in fake.list_calls] == [None, "c1"]
    assert fake.list_calls[0]["limit"] == 1
    assert fake.watch_calls[0]["resource_version"] == "10"
    assert fake.watch_calls[0]["field_selector"] == "metadata.name=n1"
    assert fake.watch_calls[0]["allow_bookmarks"] is True
    assert 300 <= fake.watch_calls[0]["timeout_seconds"] <= 600
    assert watcher.resource_version == "11"
    assert watcher.relists == 0


def test_bookmarks_advance_the_resource_version_and_are_not_yielded() -> None:
    bookmark = WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "50"}})
    fake = FakeListWatch(lists=[page([], "10")], watches=[[bookmark], []])
    _, events, _ = run(fake)
    assert summary(events) == [(SYNCED, "10")]
    assert [c["resource_version"] for c in fake.watch_calls] == ["10", "50", "50"]


def test_transient_error_resumes_from_last_seen_version_with_backoff() -> None:
    fake = FakeListWatch(
        lists=[page([], "10")],
        watches=[
            [WatchEvent("ADDED", node("a", "12")), Transient(0, "StreamBroken", "reset")],
            Transient(503, "ServiceUnavailable", "x"),
            [WatchEvent("DELETED", node("a", "13"))],
        ],
    )
    watcher, events, sleeps = run(fake)
    assert summary(events) == [(SYNCED, "10"), ("ADDED", "a"), ("DELETED", "a")]
    assert [c["resource_version"] for c in fake.watch_calls] == ["10", "12", "12", "13"]
    assert sleeps == [0.5, 1.0]  # the stream that delivered then broke started at attempt 0
    assert watcher.relists == 0


def test_gone_relists_and_reports_a_diff() -> None:
    fake = FakeListWatch(
        lists=[
            page([node("a", "1"), node("b", "2"), node("c", "3")], "10"),
            # after 410: a unchanged, b modified, c gone, d new, e recreated under a new uid
            page([node("a", "1"), node("b", "20"), node("d", "21")], "30"),
        ],
        watches=[[Gone(410, "Expired", "too old")], []],
    )
    watcher, events, _ = run(fake)
    assert summary(events)[4:] == [
        ("MODIFIED", "b"),
        ("ADDED", "d"),
        ("DELETED", "c"),
        (SYNCED, "30"),
    ]
    deleted = events[6].object["metadata"]
    assert deleted == {"name": "c", "uid": "uid-c", "resourceVersion": "3"}
    assert watcher.relists == 1
    assert fake.watch_calls[-1]["resource_version"] == "30"


def test_gone_during_paged_list_restarts_the_list() -> None:
    fake = FakeListWatch(
        lists=[
            page([node("a", "1")], "", cont="c1"),
            Gone(410, "Expired", "continue expired"),
            page([node("a", "1"), node("b", "2")], "9"),
        ],
        watches=[[]],
    )
    _, events, _ = run(fake, page_size=1)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b"), (SYNCED, "9")]


def test_invalid_and_not_found_propagate() -> None:
    for error in (NotFound(404, "NotFound", "no such resource"), Invalid(422, "Invalid", "x")):
        with pytest.raises(type(error)):
            run(FakeListWatch(lists=[error]))


def test_forbidden_and_unauthorized_are_retried_with_backoff() -> None:
    # A restarted API server answers 403 until its RBAC caches are synced; a token may be
    # refreshed meanwhile.
    fake = FakeListWatch(
        lists=[Forbidden(403, "Forbidden", "rbac"), Unauthorized(401, "Unauthorized", "t"),
               page([node("a", "5")], "9")],
        watches=[[]],
    )  # fmt: skip
    _, events, sleeps = run(fake)
    assert summary(events) == [("ADDED", "a"), (SYNCED, "9")]
    assert sleeps[:2] == [0.5, 1.0]


def test_diff_snapshot_replaced_object_is_deleted_then_added() -> None:
    known = {"n1": ("old-uid", "5")}
    events, fresh = diff_snapshot(known, [node("n1", "6", uid="new-uid")])
    assert [(e.type, e.object["metadata"]["uid"]) for e in events] == [
        ("DELETED", "old-uid"),
        ("ADDED", "new-uid"),
    ]
    assert fresh == {"n1": ("new-uid", "6")}


def test_object_key_is_namespace_slash_name() -> None:
    assert object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"
    assert object_key(node("n1", "1")) == "n1"


def test_stop_before_iterating_yields_nothing() -> None:
    fake = FakeListWatch()
    watcher = Watcher(fake, NODES, sleep=lambda _s: None)
    watcher.stop()
    assert list(watcher) == []
