"""The Node API adapter: what the components do with Nodes and Events.

:class:`NodeApi` is the seam the components are written against; :class:`KubeNodeApi` is the
adapter over an async client (``loopclient.AsyncVerbs``). Errors are the kinds of
``local_ccm.kube.errors`` (NotFound, Conflict, Forbidden, Unauthorized, Invalid, Gone,
Transient); an answer of no known kind is translated into Transient here, so each loop needs a
policy for those only.
Every write carries ``write_timeout`` (a leader sets it to at most lease duration − renew
deadline, so a deposed leader's write cannot land after a successor acquired the lease).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from local_ccm.kube import errors as ke
from local_ccm.kube import resources as r
from local_ccm.kube.aio import PAGE_SIZE
from local_ccm.kube.informer import Page
from local_ccm.kube.request import WatchEvent
from local_ccm.records import dataclass

if TYPE_CHECKING:  # the loop client is imported by the processes that use it
    from local_ccm.kube.loopclient import AsyncVerbs

Obj = dict[str, Any]
T = TypeVar("T")
RequestObserver = Callable[[str, str, str, float | None], None]  # verb, resource, code, seconds


@dataclass(frozen=True, order=True)
class Access:
    """One permission a process needs (`group` "" is the core group), asked with a
    SelfSubjectRulesReview or SelfSubjectAccessReview."""

    verb: str
    resource: str
    group: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        sub = f"/{self.subresource}" if self.subresource else ""
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{sub}{f'/{self.name}' if self.name else ''}{where}"


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


class NodeApi(Protocol):
    async def list_nodes(
        self, selector: str | None = None, token: str | None = None, *, fields: str | None = None
    ) -> NodeList:
        """One page (from continue `token`) of the Nodes the label and field selectors pick."""
        ...

    def watch_nodes(
        self,
        selector: str | None,
        resource_version: str,
        *,
        fields: str | None = None,
        initial_events: bool = False,
    ) -> AsyncIterator[NodeEvent]:
        """One watch stream from `resource_version`, with bookmarks and no `timeoutSeconds`
        (the server's own timeout ends it; a silence longer than `client.WATCH_SILENCE` is a
        dead connection); raises Gone when the version is too old. `initial_events`: from
        the current state instead (`request.list_request`), Invalid where not served."""
        ...

    async def get_node(self, name: str) -> Obj:
        """A quorum read (no cache); NotFound when absent."""
        ...

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        """A JSON Patch of the Node or its status (a failed `test` → Conflict); the stored Node."""
        ...

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool = False
    ) -> None:
        """DELETE with uid and resourceVersion preconditions (409 → Conflict)."""
        ...

    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


class NodeListWatch:
    """An Informer's ``ListWatch`` of the Nodes a selector picks, over a :class:`NodeApi`."""

    def __init__(self, api: NodeApi, selector: str | None = None, *, fields: str | None = None):
        self._api, self._selector, self._fields = api, selector, fields

    async def list_page(self, continue_token: str | None) -> Page:
        listed = await self._api.list_nodes(self._selector, continue_token, fields=self._fields)
        return Page(listed.items, listed.resource_version, listed.continue_token)

    async def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        events = self._api.watch_nodes(self._selector, resource_version, fields=self._fields)
        async for event in events:
            yield WatchEvent(event.type, event.node)

    async def watch_initial(self) -> AsyncGenerator[WatchEvent, None]:
        """A watch from the current state (the Nodes as ADDED, then the end bookmark)."""
        events = self._api.watch_nodes(self._selector, "", fields=self._fields,
                                       initial_events=True)  # fmt: skip
        async for event in events:
            yield WatchEvent(event.type, event.node)


class TokenBucket:
    """Client-side rate limit: `qps` tokens per second, at most `burst` stored. A request
    reserves the next token, there or not yet, and sleeps until it may go (as Go's
    `rate.Limiter.Wait`): callers are served in order, each wakes once. A reservation whose
    caller is cancelled meanwhile is spent: the rate can only fall short, never exceed.

    With `group` > 1, requests that have to wait go in groups: time is cut into slots of
    `group` tokens (`group / qps` seconds, on a fixed grid), and a request waits until the end
    of the slot its token falls into, so the requests of one slot wake together. No request
    goes before its token is there, a slot holds at most `group` (≤ `burst`) tokens, and each
    waits less than one slot longer than alone. A request with a token at hand goes at
    once. Why: a process held at its rate limit otherwise wakes once per request, each time on
    caches other processes have used since (docs/benchmarks.md, "Paced requests in groups")."""

    def __init__(
        self, qps: float, burst: int, now: Callable[[], float] = time.monotonic, group: int = 1
    ) -> None:
        self._qps, self._burst, self._now = qps, max(1, burst), now
        self._tokens = float(self._burst)  # at `_stamp`, after the requests reserved until then
        self._stamp = now()  # when the last reserved request goes (later than now while held)
        group = min(max(1, group), self._burst)
        self._slot, self._grouped = group / qps, group > 1  # seconds of one slot

    def reserve(self) -> float:
        """Take the next token; the seconds until the request may go. The bucket is kept at
        the time the last request goes, so requests go in order and the tokens a held request
        finds when it goes are those the bucket really has then (never more than `burst`)."""
        now = self._now()
        at = max(now, self._stamp)
        tokens = min(self._burst, self._tokens + (at - self._stamp) * self._qps)
        if tokens < 1:
            due = at + (1 - tokens) / self._qps
            if self._grouped:  # the end of the token's slot (a token due on it, within float
                due = max(due, math.ceil(due / self._slot - 1e-9) * self._slot)  # error, is in)
            tokens = min(self._burst, tokens + (due - at) * self._qps)
            at = due
        self._tokens, self._stamp = tokens - 1, at
        return at - now

    async def take(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


def translate(error: ke.ApiError) -> ke.ApiError:
    """An answer of no known kind (an unexpected status, a garbled watch line) is Transient."""
    if type(error) is not ke.ApiError:
        return error
    return ke.Transient(error.status, error.reason, error.message, retry_after=error.retry_after)


class KubeNodeApi:
    """:class:`NodeApi` over either async client (`AsyncVerbs`). ``observe`` is told every
    request's verb (GET, LIST, WATCH, PATCH, POST, DELETE), resource, code and duration;
    ``limiter``, when given, rate-limits every request but the watches; ``slim`` projects each
    listed Node (so the full objects of a large LIST never all sit in memory at once)."""

    def __init__(
        self,
        client: AsyncVerbs,
        *,
        write_timeout: float | None = None,
        observe: RequestObserver = lambda *_: None,
        limiter: TokenBucket | None = None,
        slim: Callable[[Obj], Obj] = lambda node: node,
    ) -> None:
        self.client, self._slim = client, slim
        self._write_timeout = write_timeout
        self._observe, self._limiter = observe, limiter

    async def call(self, verb: str, resource: str, make: Callable[[], Awaitable[T]]) -> T:
        """One observed, rate-limited request; errors translated."""
        if self._limiter is not None:
            await self._limiter.take()
        start = time.monotonic()
        try:
            result = await make()
        except ke.ApiError as exc:
            self._observe(verb, resource, str(exc.status or "error"), time.monotonic() - start)
            raise translate(exc) from exc
        self._observe(verb, resource, "200", time.monotonic() - start)
        return result

    async def list_nodes(
        self, selector: str | None = None, token: str | None = None, *, fields: str | None = None
    ) -> NodeList:
        page = await self.call("LIST", "nodes", lambda: self.client.list(
            r.NODES, label_selector=selector or None, field_selector=fields, limit=PAGE_SIZE,
            continue_token=token,
        ))  # fmt: skip
        # list items carry no kind/apiVersion; a Node used as an Event's subject needs them
        nodes = ({"apiVersion": "v1", "kind": "Node", **i} for i in page.get("items") or ())
        items = tuple(map(self._slim, nodes))
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        return NodeList(items, str(meta.get("resourceVersion", "")), token)

    async def watch_nodes(
        self,
        selector: str | None,
        resource_version: str,
        *,
        fields: str | None = None,
        initial_events: bool = False,
    ) -> AsyncIterator[NodeEvent]:
        stream = self.client.watch(
            r.NODES, label_selector=selector or None, field_selector=fields,
            resource_version=resource_version or None, allow_bookmarks=True,
            initial_events=initial_events,
        )  # fmt: skip
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

    async def get_node(self, name: str) -> Obj:
        return await self.call("GET", "nodes", lambda: self.client.get(r.NODES, name))

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        resource = f"nodes/{subresource}" if subresource else "nodes"
        return await self.call("PATCH", resource, lambda: self.client.patch(
            r.NODES, name, list(operations), patch_type="json", subresource=subresource,
            timeout=self._write_timeout,
        ))  # fmt: skip

    async def delete_node(
        self, name: str, *, uid: str, resource_version: str, dry_run: bool = False
    ) -> None:
        await self.call("DELETE", "nodes", lambda: self.client.delete(
            r.NODES, name, uid=uid, resource_version=resource_version, dry_run=dry_run,
            timeout=self._write_timeout,
        ))  # fmt: skip

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return await self.call("POST", "events", lambda: self.client.create(
            r.EVENTS, body, namespace=namespace, timeout=self._write_timeout,
        ))  # fmt: skip
