"""The agent's view of the Kubernetes API: its own Node, Events and access reviews.

:class:`NodeApi` is the seam the loop is written against; :class:`KubeNodeApi` is the adapter
over ``local_ccm.kube``. Errors are translated here into the few kinds the loop has a policy
for: conflict (409, or a JSON Patch whose ``test`` failed: the apiserver answers that
with a bare 422), invalid, forbidden, not found, unauthorized, expired and transient.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from local_ccm.agent.core.plan import Patch
from local_ccm.kube import errors as ke
from local_ccm.kube import resources as r
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.informer import WATCH_TIMEOUT, ErrorKinds, Page
from local_ccm.kube.request import WatchEvent, access_review, review_allowed

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")


# ------------------------------------------------------------------ error kinds
class NodeApiError(Exception):
    """Base of the translated errors; ``status`` is the HTTP status (0 for transport)."""

    kind = "error"

    def __init__(self, message: str, *, status: int = 0, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after


class ConflictError(NodeApiError):
    """409, or a JSON Patch that could not be applied (a failed ``test``): re-read."""

    kind = "conflict"


class InvalidError(NodeApiError):
    """422/400 other than a failed test: the same write will fail again."""

    kind = "invalid"


class ForbiddenError(NodeApiError):
    kind = "forbidden"


class NotFoundError(NodeApiError):
    kind = "not_found"


class UnauthorizedError(NodeApiError):
    kind = "unauthorized"


class ExpiredError(NodeApiError):
    """410 Gone / ``Expired``: the watch's resourceVersion was compacted; relist."""

    kind = "gone"


class TransientError(NodeApiError):
    """429, 5xx, timeouts, connection errors: back off (honouring ``retry_after``)."""

    kind = "transient"


_KINDS: tuple[tuple[type[ke.ApiError], type[NodeApiError]], ...] = (
    (ke.Conflict, ConflictError),
    (ke.Invalid, InvalidError),
    (ke.Forbidden, ForbiddenError),
    (ke.NotFound, NotFoundError),
    (ke.Unauthorized, UnauthorizedError),
    (ke.Gone, ExpiredError),
    (ke.Transient, TransientError),
)


def translate(error: ke.ApiError) -> NodeApiError:
    """The agent's kind for a ``local_ccm.kube`` error (unknown statuses are transient)."""
    cls = next((mine for theirs, mine in _KINDS if isinstance(error, theirs)), TransientError)
    return cls(str(error), status=error.status, retry_after=error.retry_after)


# ------------------------------------------------------------------ the seam
@dataclass(frozen=True)
class NodeList:
    """The Node named by the field selector (None when absent) and the list's RV."""

    node: Obj | None
    resource_version: str


@dataclass(frozen=True)
class NodeEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    node: Obj


class NodeApi(Protocol):
    async def list_node(self, name: str) -> NodeList:
        """LIST /api/v1/nodes?fieldSelector=metadata.name=<name> (a consistent read)."""
        ...

    def watch_node(self, name: str, resource_version: str) -> AsyncIterator[NodeEvent]:
        """One watch stream from ``resource_version``; ends when the server ends it."""
        ...

    async def patch_node(self, name: str, patch: Patch) -> Obj:
        """The JSON Patch on the Node or its status; returns the stored Node."""
        ...

    async def create_event(self, namespace: str, body: Obj) -> None: ...

    async def can_i(
        self, verb: str, resource: str, *, subresource: str = "", namespace: str = ""
    ) -> bool:
        """SelfSubjectAccessReview for the agent's own identity."""
        ...


#: The informer's policy in the agent's kinds: 410 relists, every other failure is retried.
INFORMER_ERRORS = ErrorKinds(gone=(ExpiredError,), retried=(NodeApiError,))


class OwnNode:
    """The Informer's ``ListWatch`` of the agent's own Node (field selector) over a NodeApi."""

    def __init__(self, api: NodeApi, name: str) -> None:
        self._api, self._name = api, name

    async def list_page(self, continue_token: str | None) -> Page:
        listed = await self._api.list_node(self._name)
        return Page([] if listed.node is None else [listed.node], listed.resource_version)

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        async for event in self._api.watch_node(self._name, resource_version):
            yield WatchEvent(event.type, event.node)


# ------------------------------------------------------------------ the adapter
RequestObserver = Callable[[str, str, str, float | None], None]  # verb, resource, code, seconds


def _no_observer(verb: str, resource: str, code: str, seconds: float | None) -> None:
    return None


class KubeNodeApi:
    """:class:`NodeApi` over :class:`AsyncClient`; ``observe`` feeds the request metrics."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        observe: RequestObserver = _no_observer,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._observe = observe
        self._rng = rng or random.Random()

    async def _call(self, verb: str, resource: str, make: Callable[[], Awaitable[T]]) -> T:
        start = time.monotonic()
        try:
            result = await make()
        except ke.ApiError as exc:
            self._observe(verb, resource, str(exc.status or "error"), time.monotonic() - start)
            raise translate(exc) from exc
        self._observe(verb, resource, "200", time.monotonic() - start)
        return result

    async def list_node(self, name: str) -> NodeList:
        selector = f"metadata.name={name}"
        page = await self._call(
            "LIST", "nodes", lambda: self._client.list(r.NODES, field_selector=selector)
        )
        items = page.get("items") or []
        rv = str((page.get("metadata") or {}).get("resourceVersion", ""))
        node = items[0] if items else None
        if node is not None:  # list items carry no kind/apiVersion
            node = {"apiVersion": "v1", "kind": "Node", **node}
        return NodeList(node, rv)

    async def watch_node(self, name: str, resource_version: str) -> AsyncIterator[NodeEvent]:
        stream = self._client.watch(
            r.NODES,
            field_selector=f"metadata.name={name}",
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
            raise translate(exc) from exc
        finally:
            stream.close()
            self._observe("WATCH", "nodes", code, None)

    async def patch_node(self, name: str, patch: Patch) -> Obj:
        resource = "nodes/status" if patch.subresource else "nodes"
        return await self._call(
            "PATCH",
            resource,
            lambda: self._client.patch(
                r.NODES, name, patch.body(), patch_type="json", subresource=patch.subresource
            ),
        )

    async def create_event(self, namespace: str, body: Obj) -> None:
        await self._call(
            "POST", "events", lambda: self._client.create(r.EVENTS, body, namespace=namespace)
        )

    async def can_i(
        self, verb: str, resource: str, *, subresource: str = "", namespace: str = ""
    ) -> bool:
        body = access_review(verb, resource, subresource=subresource, namespace=namespace)
        review = await self._call(
            "POST",
            "selfsubjectaccessreviews",
            lambda: self._client.create(r.SELF_SUBJECT_ACCESS_REVIEWS, body),
        )
        return review_allowed(review)
