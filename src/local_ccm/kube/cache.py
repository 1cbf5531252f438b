"""A list+watch cache that keeps only a projection of each object.

``ListWatchCache(project)`` applies the events of a ``Watcher`` and stores
``project(obj)`` per key: a small frozen dataclass chosen by the component (name, uid,
taints, Ready condition, addresses...), never the whole object, so a controller stays
flat in memory at thousands of Nodes. A key counts as changed only when its projection
changes, so status heartbeats that touch no projected field wake nobody.
Thread-safe: one thread (or the event loop) applies, any thread reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from local_ccm.kube.request import Obj, WatchEvent
from local_ccm.kube.watch import SYNCED, object_key

T = TypeVar("T")


class ListWatchCache(Generic[T]):
    def __init__(
        self,
        project: Callable[[Obj], T],
        key: Callable[[Obj], str] = object_key,
    ) -> None:
        self._project, self._key = project, key
        self._lock = threading.Lock()
        self._items: dict[str, T] = {}
        self._changed: dict[str, None] = {}  # insertion-ordered set of changed keys
        self._handlers: list[Callable[[str, T | None, T | None], None]] = []
        self._synced = threading.Event()
        self.resource_version = ""

    # ------------------------------------------------------------------ reading

    @property
    def synced(self) -> bool:
        """True once a full snapshot (the first SYNCED) has been applied."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._items.get(key)

    def snapshot(self) -> dict[str, T]:
        with self._lock:
            return dict(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    # ------------------------------------------------------------------ changes

    def add_handler(self, handler: Callable[[str, T | None, T | None], None]) -> None:
        """``handler(key, old, new)`` after each change; handlers should only enqueue."""
        self._handlers.append(handler)

    def drain_changed(self) -> list[str]:
        """Keys changed since the last drain, oldest first, each once."""
        with self._lock:
            keys = list(self._changed)
            self._changed.clear()
        return keys

    # ------------------------------------------------------------------ applying

    def apply(self, event: WatchEvent) -> str | None:
        """Apply one event; the key if its projection changed, else None."""
        meta = event.object.get("metadata") or {}
        if event.type == SYNCED:
            self.resource_version = str(meta.get("resourceVersion", ""))
            self._synced.set()
            return None
        if event.type == "BOOKMARK" or event.type not in {"ADDED", "MODIFIED", "DELETED"}:
            return None
        key = self._key(event.object)
        new = None if event.type == "DELETED" else self._project(event.object)
        with self._lock:
            if meta.get("resourceVersion"):
                self.resource_version = str(meta["resourceVersion"])
            old = self._items.get(key)
            if new is None:
                self._items.pop(key, None)
            else:
                self._items[key] = new
            if old == new:
                return None
            self._changed[key] = None
        for handler in self._handlers:
            handler(key, old, new)
        return key

    def run(self, events: Iterable[WatchEvent]) -> None:
        """Apply events until the iterable ends (e.g. a Watcher is stopped)."""
        for event in events:
            self.apply(event)
