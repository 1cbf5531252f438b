"""The API seam of node-ipam-controller: a Protocol and its adapter on `local_ccm.kube`.

Errors stay `local_ccm.kube.errors` kinds (NotFound, Conflict, Invalid, Forbidden, Transient…);
the loop has one policy per kind. The adapter counts every request in
`api_requests_total{verb,resource,code}` and applies the client-side rate limit
(`--kube-api-qps`, `--kube-api-burst`) to writes and reads alike; watches are not limited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal, Protocol, TypeVar

from local_ccm.ipam.readiness import WatchStatus
from local_ccm.kube.aio import AsyncClient, ThreadedIterator
from local_ccm.kube.client import Client, WatchStream
from local_ccm.kube.errors import ApiError, NotFound
from local_ccm.kube.request import WatchEvent, access_review, review_allowed
from local_ccm.kube.resources import (
    CLUSTER_CIDRS,
    EVENTS,
    NODES,
    SELF_SUBJECT_ACCESS_REVIEWS,
    Resource,
)
from local_ccm.kube.watch import RETRIED, Watcher, WatchOptions

Obj = dict[str, Any]
T = TypeVar("T")
Watched = Literal["nodes", "clustercidrs"]
RequestCounter = Callable[[str, str, str], None]  # (verb, resource, code)


class IpamApi(Protocol):
    """Everything node-ipam-controller does with the API server."""

    async def cluster_cidrs_served(self) -> bool:
        """Discovery: is `networking.x-k8s.io/v1 clustercidrs` served?"""
        ...

    def watch(self, what: Watched) -> AsyncIterator[WatchEvent]:
        """Resumable list+watch: ADDED…, SYNCED, then events (relists re-send SYNCED)."""
        ...

    def watch_status(self, what: Watched) -> WatchStatus:
        """Is the watch's stream open, being re-established, or failing? (readyz)"""
        ...

    async def get_node(self, name: str) -> Obj:
        """A quorum read (no resourceVersion)."""
        ...

    async def patch_node(self, name: str, ops: list[Obj]) -> Obj:
        """JSON Patch on the Node's main resource."""
        ...

    async def patch_cluster_cidr(self, name: str, ops: list[Obj]) -> Obj:
        """JSON Patch (finalizers)."""
        ...

    async def patch_cluster_cidr_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        """Merge patch on /status."""
        ...

    async def create_event(self, namespace: str, body: Obj) -> Obj: ...

    async def allowed(
        self,
        verb: str,
        group: str,
        resource: str,
        *,
        namespace: str = "",
        subresource: str = "",
        name: str = "",
    ) -> bool:
        """SelfSubjectAccessReview."""
        ...  # fmt: skip


class TokenBucket:
    """Client-side rate limit: `qps` tokens per second, at most `burst` stored."""

    def __init__(self, qps: float, burst: int, now: Callable[[], float] = time.monotonic) -> None:
        self._qps, self._burst, self._now = qps, max(1, burst), now
        self._tokens = float(self._burst)
        self._stamp = now()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._now()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._qps)
        self._stamp = now

    async def take(self) -> None:
        async with self._lock:
            self._refill()
            while self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self._qps)
                self._refill()
            self._tokens -= 1


class KubeIpamApi:
    """`IpamApi` on the project's REST client."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        count: RequestCounter | None = None,
        limiter: TokenBucket | None = None,
        on_relist: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._streams: dict[str, _StreamTracker] = {}
        self._count = count or (lambda verb, resource, code: None)
        self._limiter = limiter
        self._on_relist = on_relist

    async def _call(self, verb: str, res: Resource, call: Callable[[], Awaitable[T]], ok: str) -> T:
        if self._limiter is not None:
            await self._limiter.take()
        try:
            result = await call()
        except ApiError as exc:
            self._count(verb, res.plural, str(exc.status or "error"))
            raise
        self._count(verb, res.plural, ok)
        return result

    async def cluster_cidrs_served(self) -> bool:
        path = f"/apis/{CLUSTER_CIDRS.group}/{CLUSTER_CIDRS.version}"
        try:
            listing = await self._client.request("GET", path)
        except NotFound:
            return False
        resources = listing.get("resources") if isinstance(listing, dict) else None
        return any(r.get("name") == CLUSTER_CIDRS.plural for r in resources or ())

    def watch(self, what: Watched) -> AsyncIterator[WatchEvent]:
        res = NODES if what == "nodes" else CLUSTER_CIDRS
        tracker = self._streams[what] = _StreamTracker(self._client.client)
        watcher = Watcher(tracker, res, WatchOptions())
        stream = ThreadedIterator(watcher, watcher.stop, f"watcher-{res.plural}")
        return self._counted(stream, res.plural)

    def watch_status(self, what: Watched) -> WatchStatus:
        tracker = self._streams.get(what)
        return tracker.status() if tracker is not None else "reconnecting"

    async def _counted(
        self, stream: ThreadedIterator[WatchEvent], plural: str
    ) -> AsyncIterator[WatchEvent]:
        syncs = 0
        try:
            async for event in stream:
                if event.type == "SYNCED":
                    syncs += 1
                    if syncs > 1 and self._on_relist is not None:
                        self._on_relist(plural)
                yield event
        finally:
            await stream.aclose()

    async def get_node(self, name: str) -> Obj:
        return await self._call("get", NODES, lambda: self._client.get(NODES, name), "200")

    async def patch_node(self, name: str, ops: list[Obj]) -> Obj:
        return await self._call(
            "patch", NODES, lambda: self._client.patch(NODES, name, ops, patch_type="json"), "200"
        )

    async def patch_cluster_cidr(self, name: str, ops: list[Obj]) -> Obj:
        res = CLUSTER_CIDRS
        return await self._call(
            "patch", res, lambda: self._client.patch(res, name, ops, patch_type="json"), "200"
        )

    async def patch_cluster_cidr_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        res, body = CLUSTER_CIDRS, {"status": dict(status)}

        def call() -> Awaitable[Obj]:
            return self._client.patch(res, name, body, patch_type="merge", subresource="status")

        return await self._call("patch", res, call, "200")

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return await self._call(
            "create", EVENTS, lambda: self._client.create(EVENTS, body, namespace=namespace), "201"
        )

    async def allowed(
        self, verb: str, group: str, resource: str, *, namespace: str = "",
        subresource: str = "", name: str = "",
    ) -> bool:  # fmt: skip
        body = access_review(
            verb, resource, group=group, namespace=namespace, subresource=subresource, name=name
        )
        res = SELF_SUBJECT_ACCESS_REVIEWS
        review = await self._call("create", res, lambda: self._client.create(res, body), "201")
        return review_allowed(review)


class _StreamTracker:
    """The client as a Watcher's `ListWatchApi`, remembering the stream it opened last and
    whether the last list or stream failed, so `/readyz` can tell a connected watch from one
    being re-established (a stream renewal, a relist) and from one failing."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._stream: WatchStream | None = None
        self._failed = False  # written by the watcher thread, read by the loop

    def list(self, res: Resource, **kw: Any) -> Obj:
        try:
            page = self._client.list(res, **kw)
        except RETRIED:
            self._failed = True
            raise
        self._failed = False
        return page

    def watch(self, res: Resource, **kw: Any) -> _TrackedStream:
        self._stream = stream = self._client.watch(res, **kw)
        return _TrackedStream(stream, self)

    def failed(self) -> None:
        self._failed = True

    def status(self) -> WatchStatus:
        stream = self._stream
        if stream is not None and stream.is_open:
            self._failed = False
            return "connected"
        return "failing" if self._failed else "reconnecting"


class _TrackedStream:
    """A watch stream that reports a failure the Watcher retries (`RETRIED`) to its tracker."""

    def __init__(self, stream: WatchStream, tracker: _StreamTracker) -> None:
        self._stream, self._tracker = stream, tracker

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            yield from self._stream
        except RETRIED:
            self._tracker.failed()
            raise

    def close(self) -> None:
        self._stream.close()
