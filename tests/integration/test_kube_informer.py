"""The Informer on the real kube-apiserver: resuming after a dropped connection, bookmarks,
and a 403 that becomes an answer once RBAC allows it (as after an API server restart, whose
authorizer refuses until its RBAC caches have synced). The 410 relist is in
tests/integration/test_kube_watch.py."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable

from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.config import load_kubeconfig
from local_ccm.kube.errors import Forbidden
from local_ccm.kube.informer import Page
from local_ccm.kube.request import WatchEvent
from tests.support.controlplane import ControlPlane
from tests.support.informers import Running
from tests.support.resources import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, NODES
from tests.support.waiting import eventually

Track = Callable[..., None]
WAIT = 30.0


class Recording:
    """The real ListWatch, remembering every page asked for and every stream opened."""

    def __init__(self, inner: KubeListWatch) -> None:
        self.inner = inner
        self.lists: list[str | None] = []
        self.watches: list[str] = []
        self.streams: list[AsyncIterator[WatchEvent]] = []
        self.lock = threading.Lock()

    async def list_page(self, continue_token: str | None) -> Page:
        self.lists.append(continue_token)
        return await self.inner.list_page(continue_token)

    def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        stream = self.inner.watch(resource_version, timeout_seconds)
        with self.lock:
            self.watches.append(resource_version)
            self.streams.append(stream)
        return stream

    def open_stream(self) -> bool:
        with self.lock:
            return bool(self.streams) and bool(getattr(self.streams[-1], "is_open", False))


def make_node(kube: Client, track: Track, name: str, labels: dict[str, str]) -> Obj:
    track(NODES, name)
    return kube.create(NODES, {"metadata": {"name": name, "labels": labels}})


def touch(kube: Client, name: str, value: str) -> Obj:
    patch = {"metadata": {"annotations": {"test.local-ccm.io/touch": value}}}
    return kube.patch(NODES, name, patch, patch_type="merge")


def annotation(running: Running, name: str) -> str | None:
    node = running.informer.cache.get(name)
    return (
        None
        if node is None
        else node["metadata"].get("annotations", {}).get("test.local-ccm.io/touch")
    )


def test_a_dropped_connection_resumes_from_the_last_version_without_a_list(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    make_node(kube, track, unique_name, test_labels)
    source = Recording(
        KubeListWatch(AsyncClient(kube), NODES, field_selector=f"metadata.name={unique_name}")
    )
    running = Running(source)
    try:
        eventually(source.open_stream, timeout=WAIT, message="watch open")
        touch(kube, unique_name, "1")
        eventually(lambda: annotation(running, unique_name) == "1", timeout=WAIT)
        seen = running.informer.resource_version
        close = getattr(source.streams[-1], "close")  # noqa: B009 - the connection drops
        close()
        eventually(lambda: len(source.watches) == 2, timeout=WAIT, message="re-watched")
        touch(kube, unique_name, "2")
        eventually(lambda: annotation(running, unique_name) == "2", timeout=WAIT)
    finally:
        running.stop()
    assert source.lists == [None]
    assert source.watches[1] == seen
    assert running.informer.relists == 0


def test_a_bookmark_moves_the_resource_version_past_every_event(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    """Bookmarks come 2 s before the watch's deadline when the apiserver's cache moved past
    the client's version: here a change to a Node the selector excludes."""
    make_node(kube, track, unique_name, test_labels)
    none = f"test.local-ccm.io/none={unique_name}"
    source = Recording(KubeListWatch(AsyncClient(kube), NODES, label_selector=none))
    running = Running(source, timeouts=(5, 5))
    try:
        eventually(source.open_stream, timeout=WAIT, message="watch open")
        listed = int(running.informer.resource_version)
        moved = int(touch(kube, unique_name, "1")["metadata"]["resourceVersion"])
        eventually(lambda: int(running.informer.resource_version) >= moved, timeout=15,
                   message="a bookmark")  # fmt: skip
    finally:
        running.stop()
    assert moved > listed
    assert dict(running.informer.cache) == {}
    assert source.lists == [None]


def test_forbidden_is_retried_until_rbac_allows_the_list(
    kube: Client, control_plane: ControlPlane, track: Track, unique_name: str,
    test_labels: dict[str, str],
) -> None:  # fmt: skip
    make_node(kube, track, unique_name, test_labels)
    nobody = Client(
        load_kubeconfig(control_plane.user_kubeconfig(unique_name, [])), field_manager="x"
    )
    source = KubeListWatch(AsyncClient(nobody), NODES, label_selector=_selector(test_labels))
    running = Running(source)
    try:
        eventually(lambda: len(running.ends) >= 2, timeout=WAIT, message="refused twice")
        assert all(isinstance(end.error, Forbidden) for end in running.ends)
        _allow_node_reads(kube, track, unique_name)
        eventually(running.informer.has_synced, timeout=WAIT, message="listed once allowed")
        assert set(running.informer.cache) == {unique_name}
    finally:
        running.stop()
        nobody.close()
    assert {end.reason for end in running.ends} <= {"error", "stopped"}


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _allow_node_reads(kube: Client, track: Track, user: str) -> None:
    name = f"test-informer-{user}"[:60]
    rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    track(CLUSTER_ROLES, name)
    kube.create(CLUSTER_ROLES, {"metadata": {"name": name}, "rules": [rule]})
    subject = {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
    ref = {"kind": "ClusterRole", "name": name, "apiGroup": "rbac.authorization.k8s.io"}
    track(CLUSTER_ROLE_BINDINGS, name)
    kube.create(CLUSTER_ROLE_BINDINGS, {"metadata": {"name": name}, "subjects": [subject],
                                        "roleRef": ref})  # fmt: skip
