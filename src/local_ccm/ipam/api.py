"""What node-ipam-controller adds to the Node API adapter: ClusterCIDRs and the Informers'
lists and watches. Errors stay `local_ccm.kube.errors` kinds.

Every request goes through the client-side rate limit (`--kube-api-qps`,
`--kube-api-burst`) and may be counted (`count`); the lists and watches of the Informers
(`list_watch`) are neither counted nor limited. The process's metrics count every HTTP request
at the client (`rest_client_requests_total`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from local_ccm.kube.aio import KubeListWatch
from local_ccm.kube.errors import NotFound
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.loopclient import AsyncVerbs
from local_ccm.kube.nodes import KubeNodeApi, Obj, TokenBucket
from local_ccm.kube.resources import CLUSTER_CIDRS, NODES

__all__ = ["IpamApi", "KubeIpamApi", "Obj", "TokenBucket", "Watched"]

Watched = Literal["nodes", "clustercidrs"]
RequestCounter = Callable[[str, str, str], None]  # (verb, resource, code)
_VERBS = {"GET": "get", "PATCH": "patch", "POST": "create", "DELETE": "delete", "LIST": "list"}


class IpamApi(Protocol):
    """Everything node-ipam-controller does with the API server."""

    async def cluster_cidrs_served(self) -> bool:
        """Discovery: is `networking.x-k8s.io/v1 clustercidrs` served?"""
        ...

    def list_watch(self, what: Watched) -> ListWatch:
        """The paged LIST and the WATCH of Nodes or ClusterCIDRs, for an Informer."""
        ...

    async def get_node(self, name: str) -> Obj: ...
    async def patch_node(self, name: str, operations: Sequence[Obj]) -> Obj: ...

    async def patch_cluster_cidr(self, name: str, ops: list[Obj]) -> Obj:
        """JSON Patch (finalizers)."""
        ...

    async def patch_cluster_cidr_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        """Merge patch on /status."""
        ...

    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


class KubeIpamApi(KubeNodeApi):
    """`IpamApi` on the project's REST client; `count` gets API verbs, 201 for a create;
    every write gives up after `write_timeout` (None: the client's timeout)."""

    def __init__(
        self,
        client: AsyncVerbs,
        *,
        count: RequestCounter | None = None,
        limiter: TokenBucket | None = None,
        write_timeout: float | None = None,
    ) -> None:
        counter = count or (lambda verb, resource, code: None)

        def observe(verb: str, resource: str, code: str, seconds: float | None) -> None:
            ok = "201" if verb == "POST" and code == "200" else code
            counter(_VERBS.get(verb, verb.lower()), resource, ok)

        super().__init__(client, observe=observe, limiter=limiter, write_timeout=write_timeout)

    async def cluster_cidrs_served(self) -> bool:
        path = f"/apis/{CLUSTER_CIDRS.group}/{CLUSTER_CIDRS.version}"
        try:
            listing = await self.client.request("GET", path)
        except NotFound:
            return False
        resources = listing.get("resources") if isinstance(listing, dict) else None
        return any(r.get("name") == CLUSTER_CIDRS.plural for r in resources or ())

    def list_watch(self, what: Watched) -> ListWatch:
        return KubeListWatch(self.client, NODES if what == "nodes" else CLUSTER_CIDRS)

    def _patch(self, name: str, body: Any, **kw: Any) -> Awaitable[Obj]:
        res = CLUSTER_CIDRS
        return self.call("PATCH", res.plural, lambda: self.client.patch(
            res, name, body, timeout=self._write_timeout, **kw))  # fmt: skip

    async def patch_cluster_cidr(self, name: str, ops: list[Obj]) -> Obj:
        return await self._patch(name, ops, patch_type="json")

    async def patch_cluster_cidr_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        body = {"status": dict(status)}
        return await self._patch(name, body, patch_type="merge", subresource="status")
