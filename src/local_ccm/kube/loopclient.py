"""The asyncio client whose requests and watches run on the event loop (`kube.loophttp`): the
verbs of `kube.client.Client` as coroutines, with its retries, field manager and response
observer, and watches as async iterators of `WatchEvent`s.

`kube.aio.AsyncClient` is the same face over the blocking client, a thread per request and per
watch; `AsyncVerbs` is what both offer, so an API adapter or a list-and-watch takes either.
A controller whose every request waits for the rate limit (node-ipam-controller) uses this one:
no thread hand-over per request and per watch event (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from local_ccm.kube import request as rq
from local_ccm.kube.backoff import RetryPolicy
from local_ccm.kube.client import WATCH_READ_SLACK, WATCH_SILENCE, ResponseObserver
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import ApiError, Transient
from local_ccm.kube.loophttp import LoopStream
from local_ccm.kube.looptransport import LoopTransport
from local_ccm.kube.request import Obj, Request, Response, WatchEvent
from local_ccm.kube.resources import Resource

T = TypeVar("T")


class Watching(Protocol):
    """A watch stream as an async iterator; `is_open` while its connection is up."""

    @property
    def is_open(self) -> bool: ...

    def __aiter__(self) -> AsyncIterator[WatchEvent]: ...
    async def __anext__(self) -> WatchEvent: ...
    def close(self) -> None: ...


class AsyncVerbs(Protocol):
    """The verbs an API adapter uses; keyword arguments are those of the `kube.request`
    builders (and `timeout`)."""

    async def get(self, res: Resource, name: str, **kw: Any) -> Obj: ...
    async def list(self, res: Resource, **kw: Any) -> Obj: ...
    async def create(self, res: Resource, body: Obj, **kw: Any) -> Obj: ...
    async def update(self, res: Resource, body: Obj, **kw: Any) -> Obj: ...
    async def patch(self, res: Resource, name: str, body: Any, **kw: Any) -> Obj: ...
    async def delete(self, res: Resource, name: str, **kw: Any) -> Obj: ...
    async def request(self, method: str, path: str, **kw: Any) -> Any: ...
    def watch(self, res: Resource, **kw: Any) -> Watching: ...
    async def close(self) -> None: ...


class LoopClient:
    """`AsyncVerbs` on the event loop; built and used on one running loop."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        field_manager: str,
        user_agent: str = "local-ccm",
        timeout: float = 15.0,
        retry: RetryPolicy | None = None,
        watch_silence: float = WATCH_SILENCE,
        on_response: ResponseObserver | None = None,
        transport: LoopTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,  # between retries
    ) -> None:
        if not field_manager:
            raise ValueError("a field manager is required")
        self.config, self.field_manager, self.timeout = config, field_manager, timeout
        self.retry = retry or RetryPolicy()
        self.watch_silence, self.on_response, self._sleep = watch_silence, on_response, sleep
        self.host = urlsplit(config.server).netloc or config.server
        self._transport = transport or LoopTransport(config, user_agent=user_agent)

    async def close(self) -> None:
        self._transport.close()

    # ------------------------------------------------------------------ core

    async def _with_retries(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 1
        while True:
            try:
                return await call()
            except ApiError as error:
                if not self.retry.should_retry(method, error, attempt):
                    raise
                await self._sleep(self.retry.delay(error, attempt))
                attempt += 1

    async def send(self, req: Request, *, timeout: float | None = None) -> Any:
        """Send a built request with retries; the decoded 2xx body."""

        async def once() -> Any:
            return rq.parse_response(await self._observed(req, timeout or self.timeout), req)

        return await self._with_retries(req.method, once)

    async def _observed(self, req: Request, timeout: float) -> Response:
        if self.on_response is None:
            return await self._transport.send(req, timeout)
        start, code = time.monotonic(), "<error>"
        try:
            response = await self._transport.send(req, timeout)
            code = str(response.status)
            return response
        finally:
            self.on_response(req.method, self.host, code, time.monotonic() - start)

    async def _obj(self, req: Request, timeout: float | None) -> Obj:
        value = await self.send(req, timeout=timeout)
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise Transient(0, "BadResponse", f"expected a JSON object, got {kind}")
        return value

    # ------------------------------------------------------------------ verbs

    async def get(self, res: Resource, name: str, *, timeout: float | None = None,
                  **kw: Any) -> Obj:  # fmt: skip
        return await self._obj(rq.get_request(res, name, **kw), timeout)

    async def list(self, res: Resource, *, timeout: float | None = None, **kw: Any) -> Obj:
        return await self._obj(rq.list_request(res, **kw), timeout)

    async def create(self, res: Resource, body: Obj, *, timeout: float | None = None,
                     **kw: Any) -> Obj:  # fmt: skip
        req = rq.create_request(res, body, field_manager=self.field_manager, **kw)
        return await self._obj(req, timeout)

    async def update(self, res: Resource, body: Obj, *, timeout: float | None = None,
                     **kw: Any) -> Obj:  # fmt: skip
        req = rq.update_request(res, body, field_manager=self.field_manager, **kw)
        return await self._obj(req, timeout)

    async def patch(self, res: Resource, name: str, body: Any, *, timeout: float | None = None,
                    **kw: Any) -> Obj:  # fmt: skip
        req = rq.patch_request(res, name, body, field_manager=self.field_manager, **kw)
        return await self._obj(req, timeout)

    async def delete(self, res: Resource, name: str, *, timeout: float | None = None,
                     **kw: Any) -> Obj:  # fmt: skip
        return await self._obj(rq.delete_request(res, name, **kw), timeout)

    async def request(self, method: str, path: str, *, timeout: float | None = None,
                      **kw: Any) -> Any:  # fmt: skip
        """Any path (``/version``, ``/readyz``); JSON answers decode, others come back as text."""
        return await self.send(rq.raw_request(method, path, **kw), timeout=timeout)

    def watch(self, res: Resource, **kw: Any) -> LoopWatch:
        """One watch stream (opened when first iterated), as `kube.client.Client.watch`."""
        req = rq.watch_request(res, **kw)
        seconds = kw.get("timeout_seconds")
        silence = seconds + WATCH_READ_SLACK if seconds else self.watch_silence

        async def open_stream() -> LoopStream:
            return await self._with_retries("GET", lambda: self._stream(req, silence))

        return LoopWatch(open_stream)

    async def _stream(self, req: Request, silence: float) -> LoopStream:
        code = "<error>"
        try:
            stream = await self._transport.stream(req, silence, silence)
            code = "200"
            return stream
        except ApiError as error:
            code = str(error.status or "<error>")
            raise
        finally:
            if self.on_response is not None:
                self.on_response(req.method, self.host, code, None)


class LoopWatch:
    """One watch stream: iterate for events; an ERROR event raises (410/Expired → `Gone`), a
    broken or silent connection raises `Transient`, the server's end of the stream ends the
    iteration; `close()` (or cancelling the consumer) closes the connection."""

    def __init__(self, open_stream: Callable[[], Awaitable[LoopStream]]) -> None:
        self._open = open_stream
        self._stream: LoopStream | None = None
        self._closed = False

    @property
    def is_open(self) -> bool:
        return self._stream is not None and self._stream.is_open and not self._closed

    def __aiter__(self) -> LoopWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        try:
            while not self._closed:
                event = await self._next()
                if event is not None:
                    return event
        except (OSError, TimeoutError) as exc:
            if not self._closed:
                self.close()
                raise Transient(0, "StreamBroken", str(exc) or type(exc).__name__) from exc
        except BaseException:
            self.close()
            raise
        raise StopAsyncIteration

    async def _next(self) -> WatchEvent | None:
        """The next event; None for a blank line, or once the stream ended (then closed)."""
        if self._stream is None:
            self._stream = await self._open()
            if self._closed:  # closed while it was opening
                self._stream.close()
                return None
        line = await self._stream.readline()
        if not line:
            self.close()
            return None
        event = rq.parse_watch_line(line)
        if event is not None and event.type == "ERROR":
            raise rq.watch_error(event)
        return event

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.close()

    async def aclose(self) -> None:
        self.close()
