"""The synchronous, thread-safe Kubernetes client: verbs over request building + transport.

Every write carries the client's field manager; retries follow ``RetryPolicy``
(see ``local_ccm.kube.backoff`` for which failures are retried and why).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from local_ccm.kube import request as rq
from local_ccm.kube.backoff import RetryPolicy
from local_ccm.kube.config import ClusterConfig, load_kubeconfig
from local_ccm.kube.errors import ApiError, Transient
from local_ccm.kube.request import Obj, Request, Response, WatchEvent
from local_ccm.kube.resources import Resource

__all__ = ["Client", "Obj", "Stream", "Transport", "WatchEvent", "WatchStream"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# A watch read timeout beyond the timeoutSeconds asked for: a silent half-open connection is
# noticed instead of hanging forever.
WATCH_READ_SLACK = 60.0
# With no timeoutSeconds (the informers' way), the API server sends a bookmark about once a
# minute to a watch that asked for them: three missed ones mean a dead connection.
WATCH_SILENCE = 180.0

# Told of every HTTP request sent (each retry too): the method, the apiserver's host[:port],
# the status code ("<error>" when no answer came) and the seconds it took (None for a watch,
# whose stream lasts): what client-go's rest_client_* metrics count.
ResponseObserver = Callable[[str, str, str, float | None], None]


class Stream(Protocol):
    def lines(self) -> Iterator[bytes]: ...
    def close(self) -> None: ...


class Transport(Protocol):
    def send(self, req: Request, timeout: float) -> Response: ...
    def stream(self, req: Request, timeout: float) -> Stream: ...
    def close(self) -> None: ...


class WatchStream:
    """One raw watch stream: iterate for events; ``close()`` from any thread stops it.

    An ERROR event raises (410/Expired → ``Gone``); a broken connection raises
    ``Transient``; the server ending the stream (timeoutSeconds) ends the iteration.
    """

    def __init__(self, open_stream: Callable[[], Stream]) -> None:
        self._open = open_stream
        self._lock = threading.Lock()
        self._stream: Stream | None = None
        self._closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        stream = self._open()
        with self._lock:
            if self._closed:
                stream.close()
                return
            self._stream = stream
        try:
            for line in stream.lines():
                event = rq.parse_watch_line(line)
                if event is None:
                    continue
                if event.type == "ERROR":
                    raise rq.watch_error(event)
                yield event
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    @property
    def is_open(self) -> bool:
        """True while the HTTP stream is open (for tests and diagnostics)."""
        with self._lock:
            return self._stream is not None and not self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream = self._stream
        if stream is not None:
            stream.close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    def __init__(
        self,
        config: ClusterConfig,
        *,
        field_manager: str,
        user_agent: str = "local-ccm",
        timeout: float = 15.0,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
        watch_silence: float = WATCH_SILENCE,
        on_response: ResponseObserver | None = None,
    ) -> None:
        if not field_manager:
            raise ValueError("a field manager is required")
        if transport is None:
            from local_ccm.kube.transport import HttpTransport  # noqa: PLC0415

            transport = HttpTransport(config, user_agent=user_agent)
        self.config = config
        self.field_manager = field_manager
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.watch_silence = watch_silence  # see WATCH_SILENCE
        self._transport = transport
        self.on_response = on_response  # see ResponseObserver
        self.host = urlsplit(config.server).netloc or config.server

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str],
        *,
        field_manager: str,
        context: str | None = None,
        **kw: Any,
    ) -> Client:
        return cls(load_kubeconfig(path, context), field_manager=field_manager, **kw)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ core

    def _with_retries(self, method: str, what: str, call: Callable[[], T]) -> T:
        attempt = 1
        while True:
            try:
                return call()
            except ApiError as error:
                if not self.retry.should_retry(method, error, attempt):
                    raise
                delay = self.retry.delay(error, attempt)
                log.info("%s failed (%s); retry %d in %.2fs", what, error, attempt, delay)
                self.retry.sleep(delay)
                attempt += 1

    def send(self, req: Request, *, timeout: float | None = None) -> Any:
        """Send a built request with retries; the decoded 2xx body."""
        what = f"{req.method} {req.path.split('?')[0]}"

        def once() -> Any:
            return rq.parse_response(self._observed_send(req, timeout or self.timeout), req)

        return self._with_retries(req.method, what, once)

    def _observed_send(self, req: Request, timeout: float) -> Response:
        if self.on_response is None:
            return self._transport.send(req, timeout)
        start, code = time.monotonic(), "<error>"
        try:
            response = self._transport.send(req, timeout)
            code = str(response.status)
            return response
        finally:
            self.on_response(req.method, self.host, code, time.monotonic() - start)

    def _observed_stream(self, req: Request, timeout: float) -> Stream:
        if self.on_response is None:
            return self._transport.stream(req, timeout)
        code = "<error>"
        try:
            stream = self._transport.stream(req, timeout)
            code = "200"
            return stream
        except ApiError as error:
            code = str(error.status or "<error>")
            raise
        finally:
            self.on_response(req.method, self.host, code, None)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Any path (``/version``, ``/readyz``); JSON answers decode, others come back as text."""
        req = rq.raw_request(method, path, query=query, body=body, content_type=content_type)
        return self.send(req, timeout=timeout)

    # ------------------------------------------------------------------ verbs
    # Keyword options are those of the matching ``local_ccm.kube.request`` builder; writes
    # get this client's field manager.

    def _obj(self, req: Request, timeout: float | None) -> Obj:
        value = self.send(req, timeout=timeout)
        if not isinstance(value, dict):
            kind = type(value).__name__
            raise Transient(0, "BadResponse", f"expected a JSON object, got {kind}")
        return value

    def get(self, res: Resource, name: str, *, timeout: float | None = None, **kw: Any) -> Obj:
        return self._obj(rq.get_request(res, name, **kw), timeout)

    def list(self, res: Resource, *, timeout: float | None = None, **kw: Any) -> Obj:
        return self._obj(rq.list_request(res, **kw), timeout)

    def create(self, res: Resource, body: Obj, *, timeout: float | None = None, **kw: Any) -> Obj:
        req = rq.create_request(res, body, field_manager=self.field_manager, **kw)
        return self._obj(req, timeout)

    def update(self, res: Resource, body: Obj, *, timeout: float | None = None, **kw: Any) -> Obj:
        req = rq.update_request(res, body, field_manager=self.field_manager, **kw)
        return self._obj(req, timeout)

    def patch(
        self, res: Resource, name: str, body: Any, *, timeout: float | None = None, **kw: Any
    ) -> Obj:
        req = rq.patch_request(res, name, body, field_manager=self.field_manager, **kw)
        return self._obj(req, timeout)

    def delete(self, res: Resource, name: str, *, timeout: float | None = None, **kw: Any) -> Obj:
        return self._obj(rq.delete_request(res, name, **kw), timeout)

    def watch(self, res: Resource, **kw: Any) -> WatchStream:
        """One raw watch stream (opened lazily, when iterated); see WatchStream."""
        req = rq.watch_request(res, **kw)
        seconds = kw.get("timeout_seconds")
        read_timeout = seconds + WATCH_READ_SLACK if seconds else self.watch_silence

        def open_stream() -> Stream:
            return self._with_retries(
                "GET", f"WATCH {res.plural}", lambda: self._observed_stream(req, read_timeout)
            )

        return WatchStream(open_stream)
