"""The synchronous, thread-safe Kubernetes client: verbs over request building + transport.

Every write carries the client's field manager; retries follow ``RetryPolicy``
(see ``local_ccm.kube.backoff`` for which failures are retried and why).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from local_ccm.kube import request as rq
from local_ccm.kube.backoff import RetryPolicy
from local_ccm.kube.config import ClusterConfig, load_kubeconfig
from local_ccm.kube.errors import ApiError, Transient
from local_ccm.kube.request import Obj, PatchType, Request, Response, WatchEvent
from local_ccm.kube.resources import Resource

__all__ = ["Client", "Obj", "Stream", "Transport", "WatchEvent", "WatchStream"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# A watch read timeout beyond the server's own timeoutSeconds: a silent half-open
# connection is noticed instead of hanging forever.
WATCH_READ_SLACK = 60.0
WATCH_READ_DEFAULT = 330.0


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
        self._events: Iterator[WatchEvent] | None = None

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> WatchEvent:
        if self._events is None:
            self._events = self._run()
        return next(self._events)

    def _run(self) -> Iterator[WatchEvent]:
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
        self._transport = transport

    @classmethod
    def from_kubeconfig(
        cls, path: Path, *, field_manager: str, context: str | None = None, **kw: Any
    ) -> Client:
        return cls(load_kubeconfig(Path(path), context), field_manager=field_manager, **kw)

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
            return rq.parse_response(self._transport.send(req, timeout or self.timeout), req)

        return self._with_retries(req.method, what, once)

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

    def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        req = rq.get_request(res, name, namespace=namespace, subresource=subresource)
        return _obj(self.send(req, timeout=timeout))

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
        timeout: float | None = None,
    ) -> Obj:
        req = rq.list_request(
            res,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
        )
        return _obj(self.send(req, timeout=timeout))

    def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> Obj:
        req = rq.create_request(
            res,
            body,
            field_manager=self.field_manager,
            namespace=namespace,
            name=name,
            subresource=subresource,
            dry_run=dry_run,
        )
        return _obj(self.send(req, timeout=timeout))

    def update(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> Obj:
        req = rq.update_request(
            res,
            body,
            field_manager=self.field_manager,
            namespace=namespace,
            subresource=subresource,
            dry_run=dry_run,
        )
        return _obj(self.send(req, timeout=timeout))

    def patch(
        self,
        res: Resource,
        name: str,
        body: Any,
        *,
        patch_type: PatchType = "json",
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        timeout: float | None = None,
    ) -> Obj:
        req = rq.patch_request(
            res,
            name,
            body,
            field_manager=self.field_manager,
            patch_type=patch_type,
            namespace=namespace,
            subresource=subresource,
            dry_run=dry_run,
            force=force,
        )
        return _obj(self.send(req, timeout=timeout))

    def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> Obj:
        req = rq.delete_request(
            res,
            name,
            namespace=namespace,
            uid=uid,
            resource_version=resource_version,
            propagation_policy=propagation_policy,
            grace_period_seconds=grace_period_seconds,
            dry_run=dry_run,
        )
        return _obj(self.send(req, timeout=timeout))

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
    ) -> WatchStream:
        """One raw watch stream (opened lazily, on the first ``next``); see WatchStream."""
        req = rq.watch_request(
            res,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=allow_bookmarks,
        )
        read_timeout = timeout_seconds + WATCH_READ_SLACK if timeout_seconds else WATCH_READ_DEFAULT

        def open_stream() -> Stream:
            return self._with_retries(
                "GET", f"WATCH {res.plural}", lambda: self._transport.stream(req, read_timeout)
            )

        return WatchStream(open_stream)


def _obj(value: Any) -> Obj:
    if not isinstance(value, dict):
        raise Transient(0, "BadResponse", f"expected a JSON object, got {type(value).__name__}")
    return value
