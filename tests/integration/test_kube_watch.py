"""Watches against the real kube-apiserver: selectors, bookmarks, 410 Gone and relist.

About 410: every watch is served by the apiserver's watch cache, which answers 410 for a
resourceVersion older than its window (the version it listed at start, until events fall
out of its ring buffer). etcd compaction does not matter for watches. The Node cache of
a fresh test apiserver starts at a tiny version, so "1" is not too old for Nodes; a
custom resource created by the test gets a cache that starts at the current version,
so a watch from "1" gets the same 410 a client gets after a long disconnection.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable

import pytest

from local_ccm.kube.aio import AsyncClient, KubeListWatch, ThreadedIterator
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Gone
from local_ccm.kube.informer import Page
from local_ccm.kube.request import WatchEvent
from tests.support.informers import Running
from tests.support.resources import CUSTOM_RESOURCE_DEFINITIONS, NODES, Resource
from tests.support.waiting import eventually

SYNCED = "SYNCED"

Track = Callable[..., None]
WAIT = 30.0


def make_node(kube: Client, track: Track, name: str, labels: dict[str, str]) -> Obj:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    track(NODES, name)
    return kube.create(NODES, body)


def touch(kube: Client, res: Resource, name: str, value: str) -> Obj:
    patch = {"metadata": {"annotations": {"test.local-ccm.io/touch": value}}}
    return kube.patch(res, name, patch, patch_type="merge")


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


@pytest.fixture
def probes(kube: Client, track: Track, test_labels: dict[str, str]) -> Resource:
    """A fresh cluster-scoped custom resource (its own watch cache), deleted at teardown."""
    group = f"w{secrets.token_hex(3)}.test.local-ccm.io"
    names = {"plural": "probes", "singular": "probe", "kind": "Probe", "listKind": "ProbeList"}
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    version = {"name": "v1", "served": True, "storage": True, "schema": schema}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"probes.{group}", "labels": test_labels},
        "spec": {"group": group, "scope": "Cluster", "names": names, "versions": [version]},
    }
    track(CUSTOM_RESOURCE_DEFINITIONS, f"probes.{group}")
    kube.create(CUSTOM_RESOURCE_DEFINITIONS, crd)
    res = Resource(group, "v1", "probes", "Probe", namespaced=False)
    eventually(lambda: kube.list(res), timeout=WAIT, message="custom resource served")
    return res


def make_probe(kube: Client, res: Resource, name: str, labels: dict[str, str]) -> Obj:
    body = {
        "apiVersion": res.api_version,
        "kind": res.kind,
        "metadata": {"name": name, "labels": labels},
    }
    return kube.create(res, body)


class Collector:
    """Runs an event iterator in a thread; the test waits on a queue, never sleeps."""

    def __init__(self, events: Iterable[WatchEvent]) -> None:
        self.queue: queue.Queue[WatchEvent | BaseException] = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(events,), daemon=True)
        self.thread.start()

    def _run(self, events: Iterable[WatchEvent]) -> None:
        try:
            for event in events:
                self.queue.put(event)
        except BaseException as exc:  # surfaced by wait_for
            self.queue.put(exc)

    def wait_for(
        self, predicate: Callable[[WatchEvent], bool], timeout: float = WAIT
    ) -> list[WatchEvent]:
        """Events up to and including the first matching one."""
        seen: list[WatchEvent] = []
        deadline = time.monotonic() + timeout
        while True:
            item = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(item, BaseException):
                raise item
            seen.append(item)
            if predicate(item):
                return seen


def named(kind: str, name: str) -> Callable[[WatchEvent], bool]:
    return lambda e: e.type == kind and e.object.get("metadata", {}).get("name") == name


def test_field_selector_watch_sees_only_that_node(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    mine, other = unique_name, f"{unique_name}-other"
    start = make_node(kube, track, mine, test_labels)["metadata"]["resourceVersion"]
    make_node(kube, track, other, test_labels)
    with kube.watch(
        NODES, field_selector=f"metadata.name={mine}", resource_version=start, timeout_seconds=30
    ) as stream:
        collector = Collector(stream)
        touch(kube, NODES, other, "1")
        touch(kube, NODES, mine, "1")  # later than the change to `other`
        seen = collector.wait_for(named("MODIFIED", mine))
    names = {e.object["metadata"].get("name") for e in seen if e.type != "BOOKMARK"}
    assert names == {mine}


def test_watch_ends_when_the_server_timeout_passes(kube: Client, unique_name: str) -> None:
    listed = kube.list(NODES, limit=1)
    events = list(
        kube.watch(
            NODES,
            resource_version=listed["metadata"]["resourceVersion"],
            label_selector=f"test.local-ccm.io/none={unique_name}",
            timeout_seconds=1,
        )
    )
    assert all(e.type == "BOOKMARK" for e in events)


def test_bookmark_carries_a_newer_version_than_any_matching_event(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    """The apiserver sends a bookmark 2 s before the watch's deadline when its cache has
    moved past the client's version (here: a change to a Node the selector excludes)."""
    make_node(kube, track, unique_name, test_labels)
    start = kube.list(NODES, limit=1)["metadata"]["resourceVersion"]
    stream = kube.watch(
        NODES,
        resource_version=start,
        timeout_seconds=5,
        label_selector=f"test.local-ccm.io/none={unique_name}",
    )
    with stream:
        collector = Collector(stream)
        eventually(lambda: stream.is_open, timeout=WAIT, message="watch open")
        moved = int(touch(kube, NODES, unique_name, "1")["metadata"]["resourceVersion"])
        seen = collector.wait_for(lambda e: e.type == "BOOKMARK", timeout=10.0)
    assert int(seen[-1].object["metadata"]["resourceVersion"]) >= moved
    assert [e.type for e in seen] == ["BOOKMARK"]


def test_watch_from_a_too_old_version_raises_gone(
    kube: Client, probes: Resource, test_labels: dict[str, str]
) -> None:
    make_probe(kube, probes, "a", test_labels)
    with pytest.raises(Gone) as info:
        list(kube.watch(probes, resource_version="1", timeout_seconds=5))
    assert info.value.status == 410


class StaleOnce:
    """An Informer's ListWatch on the real client, except that the next watch after
    ``arm()`` starts from RV 1."""

    def __init__(self, kube: Client, res: Resource) -> None:
        self.inner = KubeListWatch(AsyncClient(kube), res)
        self.armed = threading.Event()

    def arm(self) -> None:
        self.armed.set()

    async def list_page(self, continue_token: str | None) -> Page:
        return await self.inner.list_page(continue_token)

    def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        if self.armed.is_set():
            self.armed.clear()
            resource_version = "1"
        return self.inner.watch(resource_version, timeout_seconds)


def test_watcher_relists_after_410_and_keeps_delivering(
    kube: Client, probes: Resource, test_labels: dict[str, str]
) -> None:
    make_probe(kube, probes, "a", test_labels)
    api = StaleOnce(kube, probes)
    # Short server timeouts end each stream within ~2 s, so the armed watch comes soon.
    running = Running(api, timeouts=(2, 2))
    watcher = running.informer
    collector = Collector(running)
    try:
        collector.wait_for(lambda e: e.type == SYNCED)
        api.arm()
        # Changes around the 410: `a` goes away, `b` appears.
        kube.delete(probes, "a")
        make_probe(kube, probes, "b", test_labels)
        seen = collector.wait_for(lambda e: e.type == SYNCED and watcher.relists == 1)
        assert any(named("DELETED", "a")(e) for e in seen)
        assert any(named("ADDED", "b")(e) for e in seen)
        touch(kube, probes, "b", "2")
        collector.wait_for(named("MODIFIED", "b"))
    finally:
        running.stop()
        collector.thread.join(timeout=WAIT)
    assert not collector.thread.is_alive()
    assert watcher.relists == 1


def test_cancelling_an_async_watch_stops_its_reader_thread_promptly(
    kube: Client, unique_name: str
) -> None:
    stream = kube.watch(NODES, label_selector=f"test.local-ccm.io/none={unique_name}")
    events = ThreadedIterator(stream, stream.close, "test-watch")

    async def consume() -> None:
        async for _event in events:
            pass

    async def main() -> bool:
        task = asyncio.create_task(consume())
        deadline = time.monotonic() + WAIT
        while not stream.is_open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # poll until the reader thread blocks on the socket
        assert stream.is_open
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await asyncio.to_thread(events.join, 5.0)

    assert asyncio.run(main())


def test_async_client_watcher_delivers_a_snapshot(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    make_node(kube, track, unique_name, test_labels)
    source = KubeListWatch(AsyncClient(kube), NODES, label_selector=selector(test_labels))
    running = Running(source)
    names: list[str] = []
    try:
        for event in running:
            if event.type == SYNCED:
                break
            names.append(event.object["metadata"]["name"])
    finally:
        running.stop()
    assert names == [unique_name]
