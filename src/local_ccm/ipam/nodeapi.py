"""The API seam of node-ipam-controller: a Protocol and its adapter on `local_ccm.kube`.

Errors stay `local_ccm.kube.errors` kinds (NotFound, Conflict, Invalid, Forbidden, Transient…);
the loop has one policy per kind. The adapter counts every request in
`api_requests_total{verb,resource,code}` and applies the client-side rate limit
(`--kube-api-qps`, `--kube-api-burst`) to writes and reads alike; the lists and watches of the
Informers (`list_watch`) are neither counted nor limited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar

from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.errors import ApiError, NotFound
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.request import access_review, review_allowed
from local_ccm.kube.resources import (
    CLUSTER_CIDRS,
    EVENTS,
    NODES,
    SELF_SUBJECT_ACCESS_REVIEWS,
    Resource,
)

Obj = dict[str, Any]
T = TypeVar("T")
Watched = Literal["nodes", "clustercidrs"]
RequestCounter = Callable[[str, str, str], None]  # (verb, resource, code)


class IpamApi(Protocol):
    """Everything node-ipam-controller does with the API server."""

    async def cluster_cidrs_served(self) -> bool:
        """Discovery: is `networking.x-k8s.io/v1 clustercidrs` served?"""
        ...

    def list_watch(self, what: Watched) -> ListWatch:
        """The paged LIST and the WATCH of Nodes or ClusterCIDRs, for an Informer."""
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
    ) -> None:
        self._client = client
        self._count = count or (lambda verb, resource, code: None)
        self._limiter = limiter

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

    def list_watch(self, what: Watched) -> ListWatch:
        return KubeListWatch(self._client, NODES if what == "nodes" else CLUSTER_CIDRS)

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
