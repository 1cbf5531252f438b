"""The node-lifecycle-controller's view of the Kubernetes API: Nodes, VolumeAttachments,
Events and access reviews.

:class:`NodeApi` is the seam the loop is written against; :class:`KubeNodeApi` is the adapter
over ``local_ccm.kube``. Errors are the kinds of ``local_ccm.kube.errors`` (NotFound,
Conflict, Forbidden, Unauthorized, Invalid, Gone, Transient), which the loop has one policy
for each. Every write carries ``write_timeout`` (at most lease duration − renew deadline, so a
deposed leader's write cannot land after a successor could have acquired the lease).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from local_ccm.kube import errors as ke
from local_ccm.kube import resources as r
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.informer import WATCH_TIMEOUT
from local_ccm.kube.request import access_review, review_allowed
from local_ccm.lifecycle.core.model import slim_node

Obj = dict[str, Any]
T = TypeVar("T")

VOLUME_ATTACHMENTS = r.Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
PAGE_SIZE = 500


@dataclass(frozen=True)
class NodeList:
    """One page of a LIST; `continue_token` asks for the next one."""

    items: tuple[Obj, ...]
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True)
class NodeEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    node: Obj

    @property
    def resource_version(self) -> str:
        return str((self.node.get("metadata") or {}).get("resourceVersion", ""))


@dataclass(frozen=True)
class Access:
    """One permission the controller needs, checked with a SelfSubjectAccessReview at start-up."""

    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {what}{f'/{self.name}' if self.name else ''}{where}"


class NodeApi(Protocol):
    async def list_nodes(self, selector: str | None, continue_token: str | None = None) -> NodeList:
        """One page of the Nodes matching the label selector, slimmed."""
        ...

    def watch_nodes(self, selector: str | None, resource_version: str) -> AsyncIterator[NodeEvent]:
        """One watch stream from `resource_version`, with bookmarks and a `timeoutSeconds` in
        `WATCH_TIMEOUT`; ends when the server ends it; raises Gone when the version is too old."""
        ...

    async def get_node(self, name: str) -> Obj:
        """A quorum read (no cache); NotFound when absent."""
        ...

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool
    ) -> None:
        """DELETE with uid and resourceVersion preconditions (409 → Conflict)."""
        ...

    async def patch_node(self, name: str, operations: Sequence[Obj]) -> Obj:
        """A JSON Patch (a failed `test` → Conflict); the stored Node."""
        ...

    async def count_volume_attachments(self, node_name: str) -> int: ...

    async def create_event(self, namespace: str, body: Obj) -> None: ...

    async def can_i(self, access: Access) -> bool:
        """SelfSubjectAccessReview for the controller's own identity."""
        ...


RequestObserver = Callable[[str, str, str], None]  # verb, resource, code


def _no_observer(verb: str, resource: str, code: str) -> None:
    return None


class KubeNodeApi:
    """:class:`NodeApi` over :class:`AsyncClient`; `observe` feeds `api_requests_total`."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        write_timeout: float | None = None,
        observe: RequestObserver = _no_observer,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._write_timeout = write_timeout
        self._observe = observe
        self._rng = rng or random.Random()

    async def _call(self, verb: str, resource: str, make: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await make()
        except ke.ApiError as exc:
            self._observe(verb, resource, str(exc.status or "error"))
            raise
        self._observe(verb, resource, "200")
        return result

    async def list_nodes(self, selector: str | None, continue_token: str | None = None) -> NodeList:
        page = await self._call("LIST", "nodes", lambda: self._client.list(
            r.NODES, label_selector=selector or None, limit=PAGE_SIZE,
            continue_token=continue_token,
        ))  # fmt: skip
        items = tuple(slim_node(item) for item in page.get("items") or ())
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        return NodeList(items, str(meta.get("resourceVersion", "")), token)

    async def watch_nodes(
        self, selector: str | None, resource_version: str
    ) -> AsyncIterator[NodeEvent]:
        stream = self._client.watch(
            r.NODES,
            label_selector=selector or None,
            resource_version=resource_version or None,
            timeout_seconds=self._rng.randint(*WATCH_TIMEOUT),
            allow_bookmarks=True,
        )
        code = "200"
        try:
            async for event in stream:
                yield NodeEvent(event.type, event.object)
        except ke.ApiError as exc:
            code = str(exc.status or "error")
            raise
        finally:
            stream.close()
            self._observe("WATCH", "nodes", code)

    async def get_node(self, name: str) -> Obj:
        return await self._call("GET", "nodes", lambda: self._client.get(r.NODES, name))

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool
    ) -> None:
        await self._call("DELETE", "nodes", lambda: self._client.delete(
            r.NODES, name, uid=uid, resource_version=resource_version, dry_run=dry_run,
            timeout=self._write_timeout,
        ))  # fmt: skip

    async def patch_node(self, name: str, operations: Sequence[Obj]) -> Obj:
        return await self._call("PATCH", "nodes", lambda: self._client.patch(
            r.NODES, name, list(operations), patch_type="json", timeout=self._write_timeout,
        ))  # fmt: skip

    async def count_volume_attachments(self, node_name: str) -> int:
        listed = await self._call(
            "LIST", "volumeattachments", lambda: self._client.list(VOLUME_ATTACHMENTS)
        )
        return sum(
            1
            for item in listed.get("items") or ()
            if (item.get("spec") or {}).get("nodeName") == node_name
        )

    async def create_event(self, namespace: str, body: Obj) -> None:
        await self._call("POST", "events", lambda: self._client.create(
            r.EVENTS, body, namespace=namespace, timeout=self._write_timeout,
        ))  # fmt: skip

    async def can_i(self, access: Access) -> bool:
        body = access_review(
            access.verb, access.resource, group=access.group, namespace=access.namespace,
            name=access.name,
        )  # fmt: skip
        review = await self._call(
            "POST",
            "selfsubjectaccessreviews",
            lambda: self._client.create(r.SELF_SUBJECT_ACCESS_REVIEWS, body),
        )
        return review_allowed(review)


def required_access(
    *, event_namespace: str, lease_namespace: str, lease_name: str | None, out_of_service: bool
) -> tuple[Access, ...]:
    """What the controller needs; `lease_name` None when leader election is off."""
    needed = [Access(verb, "nodes") for verb in ("get", "list", "watch", "delete")]
    needed.append(Access("create", "events", namespace=event_namespace))
    if lease_name is not None:
        needed += [
            Access("get", "leases", "coordination.k8s.io", lease_namespace, lease_name),
            Access("create", "leases", "coordination.k8s.io", lease_namespace),
            Access("update", "leases", "coordination.k8s.io", lease_namespace, lease_name),
        ]
    if out_of_service:
        needed.append(Access("patch", "nodes"))
        needed.append(Access("list", "volumeattachments", "storage.k8s.io"))
    return tuple(needed)
