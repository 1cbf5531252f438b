"""One list and watch of a resource, served to several informers in the same process.

The controller manager runs the lifecycle and IPAM controllers side by side; each keeps its own
`Informer` (its projection, its handlers, its cache), but their `ListWatch` is a view of one
shared informer: a LIST answers from the shared cache once it is synced, a WATCH is fed by the
shared informer's changes. When the shared watch relists, every view's stream ends with 410 Gone,
so the consumers relist from the shared cache (no request to the API server); while it only
reconnects (timeout, closed, error: it resumes from the same version) the views stay open. A view
stream reports `watch_status` from the shared watch, so readiness follows the real stream: an
API server outage is "failing" for every consumer.

A view may accept only some objects (a consumer's label selector, which its own watch would ask
the API server for): it lists those and sees their changes as the API server's watch cache
serves a selector, an object that starts matching as ADDED and one that stops as DELETED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from local_ccm.clock import Clock
from local_ccm.kube.backoff import Rng
from local_ccm.kube.errors import Gone
from local_ccm.kube.informer import Change, Informer, ListWatch, Page, StreamEnd, WatchStatus
from local_ccm.kube.request import Obj, WatchEvent

_END = None  # a stream's end marker in its queue
Match = Callable[[Obj], bool]  # which objects a view accepts


class SharedWatch:
    """`run()` for one leadership term; `view()` for each consumer."""

    def __init__(self, source: ListWatch, clock: Clock, rng: Rng, name: str) -> None:
        self._source, self._clock, self._rng, self.name = source, clock, rng, name
        self.informer: Informer[Obj] | None = None
        self._started = asyncio.Event()
        self._streams: set[_Stream] = set()

    def view(self, matches: Match | None = None) -> ListWatch:
        """A consumer's view: of every object, or of those `matches` accepts."""
        return _View(self, matches)

    async def run(self, context: object = None) -> None:
        informer: Informer[Obj] = Informer(self._source, dict, clock=self._clock, rng=self._rng,
                                           name=self.name, on_end=self._ended)  # fmt: skip
        informer.add_handler(self._changed)
        self.informer = informer
        self._started.set()
        try:
            await informer.run()
        finally:
            self._started.clear()
            self.informer = None
            self._end_all()

    async def synced(self) -> Informer[Obj]:
        while True:
            await self._started.wait()
            informer = self.informer
            if informer is not None:
                await informer.wait_synced()
                return informer

    def _changed(self, change: Change[Obj]) -> None:
        if change.type == "SYNCED":  # a relist: the consumers relist from the new cache
            self._end_all()
            return
        informer = self.informer
        if change.type == "BOOKMARK" and informer is not None:
            rv = {"metadata": {"resourceVersion": informer.resource_version}}
            change = Change("BOOKMARK", new=rv)
        for stream in list(self._streams):
            event = seen_by(change, stream.matches)
            if event is not None:
                stream.queue.put_nowait(event)

    def _ended(self, end: StreamEnd) -> None:
        if end.reason == "gone":
            self._end_all()

    def _end_all(self) -> None:
        for stream in list(self._streams):
            stream.queue.put_nowait(_END)
        self._streams.clear()


def seen_by(change: Change[Obj], matches: Match | None) -> WatchEvent | None:
    """The event a view accepting what `matches` accepts gets for `change`, if any: the
    transitions of a label-selector watch (into the selection ADDED, out of it DELETED)."""
    old, new = change.old, change.new
    if matches is None or change.type == "BOOKMARK":
        return WatchEvent(change.type, (new if new is not None else old) or {})
    was = old is not None and matches(old)
    now = new is not None and matches(new)
    if now:
        return WatchEvent("MODIFIED" if was else "ADDED", new or {})
    if was:
        return WatchEvent("DELETED", (new if new is not None else old) or {})
    return None


class _View:
    def __init__(self, shared: SharedWatch, matches: Match | None) -> None:
        self._shared, self._matches = shared, matches

    async def list_page(self, continue_token: str | None) -> Page:
        informer = await self._shared.synced()
        items = [o for o in informer.cache.values() if self._matches is None or self._matches(o)]
        return Page(items, informer.resource_version)

    def watch(self, resource_version: str, timeout_seconds: int | None) -> _Stream:
        return _Stream(self._shared, resource_version, self._matches)


class _Stream:
    """One consumer's stream: Gone at once when the shared watch moved past its version."""

    def __init__(self, shared: SharedWatch, resource_version: str, matches: Match | None) -> None:
        self._shared, self._version, self.matches = shared, resource_version, matches
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self._joined = False

    def watch_status(self) -> WatchStatus:
        informer = self._shared.informer
        return "reconnecting" if informer is None else informer.status()

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> WatchEvent:
        if not self._joined:
            self._joined = True
            informer = self._shared.informer
            if informer is None or informer.resource_version != self._version:
                raise Gone(410, "Expired", "the shared watch has moved on")
            self._shared._streams.add(self)
        try:
            event = await self.queue.get()
        except BaseException:
            self._shared._streams.discard(self)
            raise
        if event is _END:
            raise Gone(410, "Expired", "the shared watch relisted or reconnects")
        return event
