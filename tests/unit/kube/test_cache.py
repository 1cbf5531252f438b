"""ListWatchCache keeps only projections and reports real changes."""

from __future__ import annotations

from dataclasses import dataclass

from local_ccm.kube.cache import ListWatchCache
from local_ccm.kube.request import Obj, WatchEvent
from local_ccm.kube.watch import SYNCED
from tests.unit.kube.fakes import node


@dataclass(frozen=True)
class Slim:
    name: str
    zone: str | None


def slim(obj: Obj) -> Slim:
    meta = obj["metadata"]
    return Slim(meta["name"], (meta.get("labels") or {}).get("zone"))


def test_stores_projection_only_and_tracks_sync() -> None:
    cache = ListWatchCache(slim)
    cache.run(
        [
            WatchEvent("ADDED", node("a", "1", zone="z1")),
            WatchEvent(SYNCED, {"metadata": {"resourceVersion": "5"}}),
        ]
    )
    assert cache.get("a") == Slim("a", "z1")
    assert cache.synced
    assert cache.resource_version == "5"
    assert len(cache) == 1
    assert "a" in cache


def test_only_projection_changes_are_reported() -> None:
    seen: list[tuple[str, Slim | None, Slim | None]] = []
    cache = ListWatchCache(slim)
    cache.add_handler(lambda k, old, new: seen.append((k, old, new)))
    assert cache.apply(WatchEvent("ADDED", node("a", "1", zone="z1"))) == "a"
    assert cache.apply(WatchEvent("MODIFIED", node("a", "2", zone="z1"))) is None  # heartbeat
    assert cache.apply(WatchEvent("MODIFIED", node("a", "3", zone="z2"))) == "a"
    assert cache.apply(WatchEvent("DELETED", {"metadata": {"name": "a"}})) == "a"
    assert seen == [
        ("a", None, Slim("a", "z1")),
        ("a", Slim("a", "z1"), Slim("a", "z2")),
        ("a", Slim("a", "z2"), None),
    ]
    assert cache.resource_version == "3"
    assert cache.get("a") is None


def test_drain_changed_dedups_in_order() -> None:
    cache = ListWatchCache(slim)
    for name, zone in [("a", "1"), ("b", "1"), ("a", "2")]:
        cache.apply(WatchEvent("MODIFIED", node(name, "1", zone=zone)))
    assert cache.drain_changed() == ["a", "b"]
    assert cache.drain_changed() == []


def test_unknown_events_and_bookmarks_are_ignored() -> None:
    cache = ListWatchCache(slim)
    assert cache.apply(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}})) is None
    assert not cache.synced
    assert cache.snapshot() == {}
