"""The agent's copy of its own Node, a plain store the loop reads: one watch by field selector
that starts with the Node's current state (``sendInitialEvents``; on an API server that does
not serve it, a LIST and then a watch from its version), kept by an Informer; the Node a write
returns is ``put`` in. Steady state costs no API request per pass, and start-up one request
fewer than LIST + WATCH. It is the agent's Node source (`runtime.controller.Source`): ``run()``
reads until the API server answers (refused credentials end the process: exit 4), then
watches; every change hands ``"watch"`` to the handlers; what it means is decided by
``core.decide`` (a new uid starts that Node's memory over, a newer list may be a revert).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from local_ccm.agent.api import INFORMER_ERRORS, NodeApi, list_own_node, own_node
from local_ccm.agent.core.timing import API_BACKOFF
from local_ccm.agent.core.writes import is_older, node_rv, node_uid
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.triggers import Health
from local_ccm.clock import Clock
from local_ccm.kube import errors as ke
from local_ccm.kube import informer as inf
from local_ccm.kube.errors import ApiError
from local_ccm.kube.request import WatchEvent, ends_initial_events
from local_ccm.logs import V1, V2, kv

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]
# How an API server without the streaming list (WatchList off, before 1.32) refuses it.
REFUSED_INITIAL_EVENTS = (400, 422)


class PreconditionError(Exception):
    """Exit 4 in loop mode: the API server rejects the credentials or refuses a start-up read."""


class NodeCache:
    """The newest Node seen (``None``: absent); ``present`` is None until the first read."""

    name = "Node"

    def __init__(
        self,
        api: NodeApi,
        name: str,
        *,
        clock: Clock,
        rng: random.Random,
        metrics: AgentMetrics,
        health: Health,
        timeout: float = 30.0,
    ) -> None:
        self._api, self.node_name, self._clock, self._metrics = api, name, clock, metrics
        self._rng, self._health, self._timeout = rng, health, timeout
        self._log = logging.LoggerAdapter(log, kv(node=name))
        self._handlers: list[Callable[[str], None]] = []
        self._read = asyncio.Event()
        self.node: Obj | None = None
        self.present: bool | None = None
        self._listed_rv = ""
        self._initial: AsyncGenerator[WatchEvent, None] | None = None  # read() left it open
        self._informer: inf.Informer[Obj] = inf.Informer(
            own_node(api, name), dict, clock=clock, rng=rng, name="Node",
            errors=INFORMER_ERRORS, on_end=self._watch_ended,
        )  # fmt: skip
        self._informer.add_handler(self._on_change)

    # ------------------------------------------------------------ as a source
    def add_handler(self, handler: Callable[[str], None]) -> None:
        self._handlers.append(handler)

    async def wait_synced(self) -> None:
        await self._read.wait()

    async def run(self) -> None:
        """The start-up read until answered, then the watch from its version, until
        cancelled; raises `PreconditionError` when the read is refused."""
        await self._until_answered(f"reading Node {self.node_name}", self.read)
        self._read.set()
        stream, self._initial = self._initial, None
        self._informer.prime([] if self.node is None else [self.node], self._listed_rv, stream)
        await self._informer.run()

    async def _until_answered(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` until the API server answers: transient errors back off (honouring
        Retry-After); rejected credentials or a refusal end the process (exit 4)."""
        failures = 0
        while True:
            try:
                return await call()
            except (ke.Unauthorized, ke.Forbidden) as exc:
                raise PreconditionError(f"{what} was refused: {exc.message}") from exc
            except ke.ApiError as exc:
                delay = API_BACKOFF.next_delay(failures, exc.retry_after, self._rng)
                failures += 1
                self._log.warning("%s failed (%s); retry in %.1fs", what, exc, delay)
                await self._clock.sleep(delay)

    # ------------------------------------------------------------ reads
    async def read(self) -> None:
        """The start-up read: the initial events of a watch that stays open for
        ``start_watch``, or a LIST where the server refuses them (or sends no end bookmark
        within the API timeout)."""
        stream = own_node(self._api, self.node_name).watch_initial()
        try:
            node, rv = await asyncio.wait_for(_initial_state(stream), self._timeout)
        except (ApiError, InitialEventsError, TimeoutError) as exc:
            await stream.aclose()
            if isinstance(exc, ApiError) and exc.status not in REFUSED_INITIAL_EVENTS:
                raise
            self._log.log(V2, "no initial events from the watch (%s): listing", exc)
            await self.relist()
            return
        except BaseException:
            await stream.aclose()
            raise
        self._listed_rv, self._initial = rv, stream
        if node is None:
            self.gone()
        else:
            self.put(node)

    async def relist(self) -> None:
        """LIST by field selector (a consistent read) and adopt the result."""
        listed = await list_own_node(self._api, self.node_name)
        self._listed_rv = listed.resource_version
        if listed.node is None:
            self.gone()
        else:
            self.put(listed.node)

    def put(self, node: Obj) -> None:
        """Keep ``node`` unless it is older than the copy (a watch event older than the
        response of our own write)."""
        if self.node is not None and node_uid(node) == node_uid(self.node):
            if is_older(node_rv(node), node_rv(self.node)):
                return
        elif self.node is not None or self.present is False:
            self._log.info("Node %s present (uid %s)", self.node_name, node_uid(node))
        self.node, self.present = node, True
        self._metrics.node_present.set(1)

    def gone(self) -> None:
        if self.present is not False:
            self._log.info("Node %s is absent; waiting for it", self.node_name)
        self.node, self.present = None, False
        self._metrics.node_present.set(0)

    def _on_change(self, change: inf.Change[Obj]) -> None:
        self._health.watch_down_since = None
        node = change.new if change.new is not None else change.old
        if node is None:
            return  # BOOKMARK, SYNCED
        self._log.log(V2 - 3, "watch event %s rv=%s", change.type, node_rv(node))
        if change.type == "DELETED":
            if self.node is None or node_uid(node) in ("", node_uid(self.node)):
                self.gone()
        else:
            self.put(node)
        for handler in self._handlers:
            handler("watch")

    def _watch_ended(self, end: inf.StreamEnd) -> None:
        if end.reason == "stopped":
            return
        self._metrics.watch_restarts.labels(end.reason).inc()
        if end.reason == "error":
            if self._health.watch_down_since is None:
                self._health.watch_down_since = self._clock.monotonic()
            self._log.log(V1, "watch failed (%s); reconnecting in %.1fs", end.error, end.delay)


async def _initial_state(stream: AsyncIterator[WatchEvent]) -> tuple[Obj | None, str]:
    """The Node (None: absent) and the resourceVersion of the end bookmark."""
    node: Obj | None = None
    async for event in stream:
        if ends_initial_events(event):
            return node, node_rv(event.object)
        if event.type in ("ADDED", "MODIFIED"):
            node = event.object
        elif event.type == "DELETED":
            node = None
    raise InitialEventsError("the watch ended before its initial events did")


class InitialEventsError(Exception):
    """A watch that ended without the initial-events-end bookmark."""
