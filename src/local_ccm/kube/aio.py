"""asyncio face of the client: the same verbs as coroutines, watches as async iterators.

Requests run in worker threads (``asyncio.to_thread``); a watch is read by one daemon thread
per stream, which hands events to the event loop through an ``asyncio.Queue``
(``loop.call_soon_threadsafe``). Cancelling the consuming task, ``aclose()`` or leaving
``async with`` shuts the stream's socket down, so the reader thread ends at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from local_ccm.kube.client import Client, WatchStream
from local_ccm.kube.errors import ApiError
from local_ccm.kube.informer import Page
from local_ccm.kube.request import Obj, WatchEvent
from local_ccm.kube.resources import Resource

if TYPE_CHECKING:  # the loop client is imported by the processes that use it
    from local_ccm.kube.loopclient import AsyncVerbs, Watching

log = logging.getLogger(__name__)
T = TypeVar("T")

_ITEM, _ERROR, _END = 0, 1, 2


# Items read but not yet consumed, at most. A watch can deliver events faster than a loop
# consumes them; without a bound every backlogged Node object sits in the queue and CPython
# keeps the arenas afterwards (measured: 27 -> 42 MiB RSS after 3 000 fast events). With it,
# the reader thread waits and TCP flow control keeps the rest in the kernel.
MAX_PENDING = 16
PAGE_SIZE = 500  # objects per LIST page


class ThreadedIterator(Generic[T]):
    """Consume a blocking iterable from a reader thread as an async iterator, with at most
    `max_pending` items read ahead of the consumer."""

    def __init__(
        self,
        source: Iterable[T],
        stop: Callable[[], None],
        name: str,
        *,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._source, self._stop, self._name = source, stop, name
        self._slots = threading.BoundedSemaphore(max_pending)
        self._queue: asyncio.Queue[tuple[int, Any]] | None = None
        self._thread: threading.Thread | None = None
        self._done = False

    def _start(self) -> asyncio.Queue[tuple[int, Any]]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

        def put(kind: int, value: Any) -> bool:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return False
            return True

        def pump() -> None:
            try:
                for item in self._source:
                    if not self._wait_for_slot() or not put(_ITEM, item):
                        return
            except BaseException as exc:  # handed to the consumer, which re-raises it
                put(_ERROR, exc)
            else:
                put(_END, None)

        self._thread = threading.Thread(target=pump, name=self._name, daemon=True)
        self._thread.start()
        return queue

    def _wait_for_slot(self) -> bool:
        """Block the reader until the consumer has room; False once closed."""
        while not self._slots.acquire(timeout=0.2):
            if self._done:
                return False
        return not self._done

    def __aiter__(self) -> ThreadedIterator[T]:
        return self

    async def __anext__(self) -> T:
        if self._done:
            raise StopAsyncIteration
        if self._queue is None:
            self._queue = self._start()
        try:
            kind, value = await self._queue.get()
        except asyncio.CancelledError:
            self.close()
            raise
        if kind == _ITEM:
            self._slots.release()
            return value  # type: ignore[no-any-return]
        self.close()
        if kind == _ERROR:
            raise value
        raise StopAsyncIteration

    def close(self) -> None:
        """Stop the reader thread (it exits as soon as its blocking read returns)."""
        if not self._done:
            self._done = True
            self._stop()

    async def aclose(self) -> None:
        self.close()

    def join(self, timeout: float | None = None) -> bool:
        """For tests: True when the reader thread has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    async def __aenter__(self) -> ThreadedIterator[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


Observe = Callable[[str, str, str], None]  # (verb, resource, code) of one request


def unobserved(verb: str, resource: str, code: str) -> None:
    return None


async def observed(observe: Observe, verb: str, resource: str, request: Awaitable[Obj]) -> Obj:
    """Await `request`, telling `observe` its code ("200", the error's status or "error")."""
    try:
        answer = await request
    except ApiError as exc:
        observe(verb, resource, str(exc.status or "error"))
        raise
    observe(verb, resource, "200")
    return answer


class ObservedApi:
    """What every controller's API adapter shares: the client, `observe`, told (verb, resource,
    code) of every request but the watches (`_call`), and `write_timeout`, how long each write
    may take (None: the client's timeout; a leader passes the election's, see
    `runtime.host.write_timeout_of`)."""

    def __init__(
        self,
        client: AsyncVerbs,
        observe: Observe = unobserved,
        *,
        write_timeout: float | None = None,
    ) -> None:
        self.client, self.observe, self.write_timeout = client, observe, write_timeout

    async def _call(self, verb: str, resource: str, request: Awaitable[Obj]) -> Obj:
        return await observed(self.observe, verb, resource, request)


class AsyncClient:
    """Wraps a ``Client``; keyword arguments are those of the matching ``Client`` method.

    Requests run in the event loop's default executor, whose threads (min(32, CPUs + 4): 6 on
    2 CPUs) every component of the process shares. A controller that keeps many writes in
    flight at once uses `kube.loopclient.LoopClient` instead (no thread per request)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def _run(self, call: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await asyncio.to_thread(call, *args, **kw)

    async def get(self, res: Resource, name: str, **kw: Any) -> Obj:
        return await self._run(self.client.get, res, name, **kw)

    async def list(self, res: Resource, **kw: Any) -> Obj:
        return await self._run(self.client.list, res, **kw)

    async def create(self, res: Resource, body: Obj, **kw: Any) -> Obj:
        return await self._run(self.client.create, res, body, **kw)

    async def update(self, res: Resource, body: Obj, **kw: Any) -> Obj:
        return await self._run(self.client.update, res, body, **kw)

    async def patch(self, res: Resource, name: str, body: Any, **kw: Any) -> Obj:
        return await self._run(self.client.patch, res, name, body, **kw)

    async def delete(self, res: Resource, name: str, **kw: Any) -> Obj:
        return await self._run(self.client.delete, res, name, **kw)

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        return await self._run(self.client.request, method, path, **kw)

    def watch(self, res: Resource, **kw: Any) -> WatchIterator:
        """One raw watch stream (``Client.watch``) as an async iterator."""
        return WatchIterator(self.client.watch(res, **kw), f"watch-{res.plural}")

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)


class WatchIterator(ThreadedIterator[WatchEvent]):
    """A raw watch stream read by its thread; ``is_open`` while its connection is up."""

    def __init__(self, stream: WatchStream, name: str) -> None:
        super().__init__(stream, stream.close, name)
        self._raw = stream

    @property
    def is_open(self) -> bool:
        return self._raw.is_open


class KubeListWatch:
    """An Informer's ``ListWatch`` of one resource over either client, selectors bound."""

    def __init__(
        self,
        client: AsyncVerbs,
        res: Resource,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self._client, self._res = client, res
        self._selectors = {"label_selector": label_selector, "field_selector": field_selector,
                           "namespace": namespace}  # fmt: skip

    async def list_page(self, continue_token: str | None) -> Page:
        page = await self._client.list(
            self._res, limit=PAGE_SIZE, continue_token=continue_token, **self._selectors
        )
        meta = page.get("metadata") or {}
        rv, token = str(meta.get("resourceVersion", "")), meta.get("continue") or None
        return Page(page.get("items") or [], rv, token)

    def watch(self, resource_version: str, timeout_seconds: int | None) -> Watching:
        return self._client.watch(
            self._res, resource_version=resource_version or None,
            timeout_seconds=timeout_seconds, allow_bookmarks=True, **self._selectors,
        )  # fmt: skip
