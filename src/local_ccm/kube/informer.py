"""The one list+watch of the project: an ``Informer`` keeps a projected cache of a resource.

What it does, in order:

1. a paged LIST; each listed object is projected at once (``project``: a component's slim
   view), so a page of whole objects is garbage as soon as the next one is asked for;
2. WATCH from the list's resourceVersion with bookmarks and no ``timeoutSeconds``: the API
   server ends the stream after its own ``--min-request-timeout`` (30 to 60 minutes by
   default) and sends a bookmark about once a minute meanwhile, which is the liveness signal
   (the client's read timeout, ``client.WATCH_SILENCE``, notices a dead connection); every
   event moves the remembered resourceVersion, so an ended or broken stream resumes from
   there without a LIST;
3. ``410 Gone``/``Expired`` relists and applies the difference against what it had: new keys
   are ``ADDED``, changed ones (uid or resourceVersion) ``MODIFIED``, vanished ones ``DELETED``
   (the old projection as a tombstone), then ``SYNCED`` again;
4. errors back off with jitter (one policy, ``WATCH_BACKOFF``), honouring Retry-After. Forbidden
   and Unauthorized are retried like Transient: a restarted API server answers 403 until its
   authorizer has synced its RBAC caches (client-go's reflector retries them too). Invalid and
   NotFound end ``run()`` with the error.

Every stream's start is reported (``on_watch``), and its end (``on_end``, counted in ``ends``)
with its reason: ``timeout`` (the server ended it after the shortest timeout asked for, or
after ``SERVER_TIMEOUT_FLOOR`` when none was asked), ``closed`` (sooner: a server or proxy hung
up), ``gone``, ``error``, ``stopped``. Handlers see
``Change``s on the event loop and should only record and wake; one event loop, no locks. Time
and randomness are injected.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Generic, Literal, Protocol, TypeVar

from local_ccm.clock import Clock
from local_ccm.kube.backoff import Backoff, Rng
from local_ccm.kube.errors import Forbidden, Gone, Transient, Unauthorized
from local_ccm.kube.request import Obj, WatchEvent
from local_ccm.records import dataclass

log = logging.getLogger(__name__)
T = TypeVar("T")

WATCH_BACKOFF = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.2)
# timeoutSeconds asked for: none; a test may ask a (low, high) range (random in it)
WATCH_TIMEOUT: tuple[int, int] | None = None
SERVER_TIMEOUT_FLOOR = 60.0  # a clean end sooner than this, with no timeout asked: "closed"
EndReason = Literal["timeout", "closed", "gone", "error", "stopped"]
ChangeType = Literal["ADDED", "MODIFIED", "DELETED", "SYNCED", "BOOKMARK"]
WatchStatus = Literal["connected", "reconnecting", "failing"]


@dataclass(frozen=True)
class Page:
    items: Sequence[Obj]
    resource_version: str
    continue_token: str | None = None


class ListWatch(Protocol):
    """One resource, selectors bound: what an Informer reads (a fake implements it in tests)."""

    async def list_page(self, continue_token: str | None) -> Page: ...

    def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        """One stream; ends when the server ends it; raises Gone when the version is too old.
        An iterator with an ``is_open`` attribute tells when its connection is up, one with a
        ``watch_status()`` method (a view of a shared watch) tells the status itself."""
        ...


@dataclass(frozen=True)
class ErrorKinds:
    """Which exceptions mean "relist" and which "back off and retry"; the rest are raised."""

    gone: tuple[type[BaseException], ...] = (Gone,)
    retried: tuple[type[BaseException], ...] = (Transient, Forbidden, Unauthorized)


DEFAULT_ERRORS = ErrorKinds()


@dataclass(frozen=True)
class Change(Generic[T]):
    type: ChangeType
    key: str = ""
    old: T | None = None
    new: T | None = None


@dataclass(frozen=True)
class StreamEnd:
    reason: EndReason
    error: BaseException | None = None
    delay: float = 0.0  # seconds until the next attempt


def object_key(obj: Obj) -> str:
    """``namespace/name`` or ``name``, as client-go's MetaNamespaceKeyFunc."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def identity(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))


def watch_end_reason(elapsed: float, shortest_timeout: float) -> Literal["timeout", "closed"]:
    """A stream that ends before the shortest ``timeoutSeconds`` asked for was closed by the
    server (or a proxy); a later end is indistinguishable from the timeout."""
    return "closed" if elapsed < shortest_timeout else "timeout"


class Informer(Generic[T]):
    """``run()`` until cancelled or ``stop()``; read ``cache``; ``add_handler`` for changes."""

    def __init__(
        self,
        source: ListWatch,
        project: Callable[[Obj], T],
        *,
        clock: Clock,
        rng: Rng,
        name: str = "",
        errors: ErrorKinds = DEFAULT_ERRORS,
        on_end: Callable[[StreamEnd], None] | None = None,
        on_watch: Callable[[], None] | None = None,
        backoff: Backoff = WATCH_BACKOFF,
        timeouts: tuple[int, int] | None = WATCH_TIMEOUT,
    ) -> None:
        self._source, self._project, self._clock, self._rng = source, project, clock, rng
        self.name, self._errors, self._on_end, self._on_watch = name, errors, on_end, on_watch
        self._backoff, self._timeouts = backoff, timeouts
        self._items: dict[str, T] = {}
        self._known: dict[str, tuple[str, str]] = {}  # key -> (uid, resourceVersion)
        self._handlers: list[Callable[[Change[T]], None]] = []
        self._stream: object | None = None
        self._primed: AsyncIterator[WatchEvent] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = self._failing = self._delivered = self._listed = False
        self._synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        self.ends: Counter[str] = Counter()

    # ------------------------------------------------------------------ reading
    @property
    def cache(self) -> Mapping[str, T]:
        return MappingProxyType(self._items)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def status(self) -> WatchStatus:
        """``connected`` while a stream is up, else ``failing`` after an error."""
        stream = self._stream
        upstream = getattr(stream, "watch_status", None)  # a view of a shared watch
        if upstream is not None:
            return upstream()  # type: ignore[no-any-return]
        opened = getattr(stream, "is_open", None)  # else: up once it delivered something
        if stream is not None and (self._delivered if opened is None else bool(opened)):
            self._failing = False
            return "connected"
        return "failing" if self._failing else "reconnecting"

    def add_handler(self, handler: Callable[[Change[T]], None]) -> None:
        self._handlers.append(handler)

    def forget(self, key: str) -> None:
        """Drop a key the caller knows is gone (its own DELETE); a later DELETED is a no-op."""
        self._items.pop(key, None)
        self._known.pop(key, None)

    def prime(
        self,
        objs: Iterable[Obj],
        resource_version: str,
        stream: AsyncIterator[WatchEvent] | None = None,
    ) -> None:
        """Start from a LIST the caller made and has already acted on: no handler is told,
        and ``run()`` watches from ``resource_version`` at once, first on ``stream`` when the
        caller read ``objs`` from a watch that is still open (``initial_events``)."""
        self._primed = stream
        items = list(objs)
        self._items = {object_key(obj): self._project(obj) for obj in items}
        self._known = {object_key(obj): identity(obj) for obj in items}
        self.resource_version, self._listed = resource_version, True
        self._synced.set()

    # ------------------------------------------------------------------ running
    def stop(self) -> None:
        """End ``run()`` promptly (its stream is closed); reported as ``stopped``."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()

    async def run(self) -> None:
        self._task = asyncio.current_task()
        failures = 0
        try:
            while not self._stopping:
                end, delivered = await self._attempt()
                failures = 0 if delivered else failures
                if end.reason == "error" or (end.reason == "closed" and not delivered):
                    retry_after = getattr(end.error, "retry_after", None)
                    delay = self._backoff.next_delay(failures, retry_after, self._rng)
                    end, failures = StreamEnd(end.reason, end.error, delay), failures + 1
                self._report(end)
                await self._clock.sleep(end.delay)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            self._report(StreamEnd("stopped"))

    async def _attempt(self) -> tuple[StreamEnd, bool]:
        """One list (when needed) and one stream; why it ended and whether it delivered."""
        self._delivered = False
        try:
            if not self._synced.is_set() or not self.resource_version:
                await self._relist()
            return await self._watch_once(), self._delivered
        except self._errors.gone as exc:
            log.info("watch of %s expired (%s); relisting", self.name, exc)
            self._synced.clear()
            self.resource_version = ""
            return StreamEnd("gone", exc), self._delivered
        except self._errors.retried as exc:
            self._failing = True
            log.warning("watch of %s failed: %s", self.name, exc)
            return StreamEnd("error", exc), self._delivered
        finally:
            self._stream = None

    def _report(self, end: StreamEnd) -> None:
        self.ends[end.reason] += 1
        if self._on_end is not None:
            self._on_end(end)

    async def _watch_once(self) -> StreamEnd:
        timeout, shortest = None, SERVER_TIMEOUT_FLOOR
        if self._timeouts is not None:
            shortest, high = self._timeouts
            timeout = shortest + int((high - shortest) * self._rng.random())
        started = self._clock.monotonic()
        if self._on_watch is not None:
            self._on_watch()
        stream, self._primed = (
            self._primed or self._source.watch(self.resource_version, timeout),
            None,
        )
        self._stream = stream
        async for event in stream:
            self._delivered, self._failing = True, False
            self._apply(event)
        return StreamEnd(watch_end_reason(self._clock.monotonic() - started, shortest))

    # ------------------------------------------------------------------ the cache
    def _apply(self, event: WatchEvent) -> None:
        uid, rv = identity(event.object)
        self.resource_version = rv or self.resource_version
        if event.type == "BOOKMARK":
            self._emit(Change("BOOKMARK"))
            return
        key = object_key(event.object)
        old = self._items.get(key)
        if event.type == "DELETED":
            self._known.pop(key, None)
            if self._items.pop(key, None) is not None:
                self._emit(Change("DELETED", key, old, None))
            return
        new = self._project(event.object)
        self._items[key], self._known[key] = new, (uid, rv)
        self._emit(Change("ADDED" if old is None else "MODIFIED", key, old, new))

    async def _relist(self) -> None:
        """Every page projected as it arrives; the cache replaced at the end, as a diff."""
        fresh: dict[str, tuple[str, str]] = {}
        changed: dict[str, T] = {}
        token: str | None = None
        while True:
            page = await self._source.list_page(token)
            for obj in page.items:
                key, ident = object_key(obj), identity(obj)
                fresh[key] = ident
                if self._known.get(key) != ident or key not in self._items:
                    changed[key] = self._project(obj)
            token = page.continue_token or None
            if token is None:
                break
        self.relists += 1 if self._listed else 0
        self._listed = True
        self._diff(fresh, changed, page.resource_version)

    def _diff(self, fresh: dict[str, tuple[str, str]], changed: dict[str, T], rv: str) -> None:
        gone = [key for key in self._items if key not in fresh]
        for key in gone:
            self._emit(Change("DELETED", key, self._items.pop(key), None))
        for key, new in changed.items():
            old, before = self._items.get(key), self._known.get(key)
            if old is not None and before is not None and before[0] != fresh[key][0]:
                self._emit(Change("DELETED", key, self._items.pop(key), None))
                old = None
            self._items[key] = new
            self._emit(Change("ADDED" if old is None else "MODIFIED", key, old, new))
        self._known, self.resource_version = fresh, rv
        self._synced.set()
        self._emit(Change("SYNCED"))

    def _emit(self, change: Change[T]) -> None:
        for handler in self._handlers:
            handler(change)
