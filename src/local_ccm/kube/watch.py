"""A resumable list+watch: the ``Watcher`` (a synchronous iterator of WatchEvents).

What it yields, in order:

1. a snapshot from a paged LIST: ``ADDED`` for each object, then ``SYNCED`` (object:
   ``{"metadata": {"resourceVersion": <list RV>}}``);
2. the watch events from that resourceVersion (``ADDED``/``MODIFIED``/``DELETED``);
   ``BOOKMARK`` events only advance the remembered resourceVersion and are not yielded;
3. when the server ends the stream or the connection breaks (``Transient``), it
   re-watches from the last seen resourceVersion (after a backoff for errors);
4. on ``410 Gone``/``Expired`` it relists and yields a diff against what it had seen:
   ``ADDED`` for new keys, ``MODIFIED`` for changed ones (resourceVersion differs),
   ``DELETED`` with a tombstone (metadata name/namespace/uid/resourceVersion only) for
   keys that vanished, then ``SYNCED`` again. ``relists`` counts these.

Forbidden and Unauthorized are retried with the same backoff (``RETRIED``): a restarted API
server answers 403 until its authorizer has synced its RBAC caches, and RBAC or credentials
can be mended while the process runs (client-go's reflector retries them too). Invalid and
NotFound are raised to the caller.
``stop()`` (from any thread) ends the iteration promptly. To stay flat in memory it
remembers only ``key -> (uid, resourceVersion)``, never whole objects.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Protocol

from local_ccm.kube.backoff import Backoff, Rng
from local_ccm.kube.errors import Forbidden, Gone, Transient, Unauthorized
from local_ccm.kube.request import Obj, WatchEvent
from local_ccm.kube.resources import Resource

log = logging.getLogger(__name__)

SYNCED = "SYNCED"
WATCH_BACKOFF = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.2)
#: Errors a list or watch is retried after (with backoff) rather than raised.
RETRIED = (Transient, Forbidden, Unauthorized)


class WatchStreamLike(Protocol):
    def __iter__(self) -> Iterator[WatchEvent]: ...
    def close(self) -> None: ...


class ListWatchApi(Protocol):
    """The part of ``Client`` a Watcher uses (a fake implements it in unit tests)."""

    def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Obj: ...

    def watch(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> WatchStreamLike: ...


def object_key(obj: Obj) -> str:
    """``namespace/name`` or ``name``, as client-go's MetaNamespaceKeyFunc."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def _identity(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))


def tombstone(key: str, uid: str, resource_version: str) -> Obj:
    ns, _, name = key.rpartition("/")
    meta: Obj = {"name": name, "uid": uid, "resourceVersion": resource_version}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta}


def diff_snapshot(
    known: dict[str, tuple[str, str]], items: list[Obj]
) -> tuple[list[WatchEvent], dict[str, tuple[str, str]]]:
    """Pure: the events that turn ``known`` into the listed ``items``, and the new map."""
    events: list[WatchEvent] = []
    fresh: dict[str, tuple[str, str]] = {}
    for obj in items:
        key = object_key(obj)
        fresh[key] = _identity(obj)
        before = known.get(key)
        if before is None or before[0] != fresh[key][0]:
            if before is not None:  # same name, new object: the old one was deleted
                events.append(WatchEvent("DELETED", tombstone(key, *before)))
            events.append(WatchEvent("ADDED", obj))
        elif before[1] != fresh[key][1]:
            events.append(WatchEvent("MODIFIED", obj))
    events.extend(
        WatchEvent("DELETED", tombstone(key, *ident))
        for key, ident in known.items()
        if key not in fresh
    )
    return events, fresh


@dataclass(frozen=True)
class WatchOptions:
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    page_size: int = 500
    min_timeout: int = 300  # watch timeoutSeconds is random in [min, max] to spread renewals
    max_timeout: int = 600


class Watcher:
    """Iterate it once (see the module docstring); not restartable."""

    def __init__(
        self,
        api: ListWatchApi,
        res: Resource,
        options: WatchOptions | None = None,
        *,
        backoff: Backoff = WATCH_BACKOFF,
        sleep: Callable[[float], object] | None = None,
        rng: Rng | None = None,
    ) -> None:
        self._api, self._res = api, res
        self._opts = options or WatchOptions()
        self._backoff = backoff
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._rng: Rng = rng or random.Random()
        self._known: dict[str, tuple[str, str]] = {}
        self._stream: WatchStreamLike | None = None
        self._lock = threading.Lock()
        self.resource_version = ""
        self.relists = 0

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def __iter__(self) -> Iterator[WatchEvent]:
        need_list, failures = True, 0
        while not self._stop.is_set():
            try:
                if need_list:
                    yield from self._relist()
                    need_list = False
                if (yield from self._watch_once()):
                    failures = 0
                elif not self._stop.is_set():  # empty stream: do not spin if ended at once
                    self._sleep(self._backoff.next_delay(failures, None, self._rng))
                    failures += 1
            except Gone as exc:
                log.info("watch of %s expired (%s); relisting", self._res.plural, exc.message)
                need_list = True
            except RETRIED as exc:
                delay = self._backoff.next_delay(failures, exc.retry_after, self._rng)
                log.warning("watch of %s failed (%s); retry in %.1fs", self._res.plural, exc, delay)
                failures += 1
                self._sleep(delay)

    def _list_all(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            page = self._api.list(
                self._res,
                namespace=self._opts.namespace,
                label_selector=self._opts.label_selector,
                field_selector=self._opts.field_selector,
                limit=self._opts.page_size,
                continue_token=token,
            )
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                return items, str(meta.get("resourceVersion", ""))

    def _relist(self) -> Iterator[WatchEvent]:
        # A 410 on a continue token (the list outlived compaction) propagates as Gone
        # and the loop lists again from the start.
        items, rv = self._list_all()
        first = not self._known and self.resource_version == ""
        events, self._known = diff_snapshot(self._known, items)
        if not first:
            self.relists += 1
        self.resource_version = rv
        yield from events
        yield WatchEvent(SYNCED, {"metadata": {"resourceVersion": rv}})

    def _watch_once(self) -> Generator[WatchEvent, None, bool]:
        """One stream; returns True if it delivered anything (resets the backoff)."""
        span = self._opts.max_timeout - self._opts.min_timeout
        stream = self._api.watch(
            self._res,
            namespace=self._opts.namespace,
            label_selector=self._opts.label_selector,
            field_selector=self._opts.field_selector,
            resource_version=self.resource_version,
            timeout_seconds=self._opts.min_timeout + int(span * self._rng.random()),
            allow_bookmarks=True,
        )
        with self._lock:
            self._stream = stream
        if self._stop.is_set():
            stream.close()
        delivered = False
        try:
            for event in stream:
                delivered = True
                yield from self._apply(event)
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        return delivered

    def _apply(self, event: WatchEvent) -> Iterator[WatchEvent]:
        uid, rv = _identity(event.object)
        if rv:
            self.resource_version = rv
        if event.type == "BOOKMARK":
            return
        key = object_key(event.object)
        if event.type == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = (uid, rv)
        yield event
