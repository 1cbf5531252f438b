"""One Node write of node-ipam-controller, until its outcome is known.

The JSON Patch is guarded by `test /metadata/uid`. Error policy: 404 → the
Node is gone, abort; anything else (409/422, timeouts, 5xx, connection errors) → a quorum GET
decides: our CIDRs → committed; another uid or unparsable podCIDRs → abort; other podCIDRs →
theirs replace ours; still empty → retry with backoff. A failed GET keeps the
reservation, because the write may have landed: no outcome is guessed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from local_ccm.clock import Clock
from local_ccm.ipam.core.model import NodeView, project_node
from local_ccm.ipam.core.plan import Allocation
from local_ccm.ipam.core.status import node_patch
from local_ccm.ipam.nodeapi import IpamApi, Obj
from local_ccm.kube.errors import ApiError, NotFound
from local_ccm.logs import kv
from local_ccm.records import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Committed:
    """The Node holds our CIDRs; `obj` is the Node as last read."""

    obj: Obj


@dataclass(frozen=True)
class Aborted:
    """Our write certainly did not land and never will: release the reservation."""


@dataclass(frozen=True)
class Replaced:
    """Another writer set other CIDRs first: theirs replace ours."""

    node: NodeView


Outcome = Committed | Aborted | Replaced


@dataclass(frozen=True)
class NodeWriter:
    api: IpamApi
    clock: Clock
    backoff: tuple[float, float]  # first and longest retry delay
    fence: Callable[[], Awaitable[None]]  # waits until a write may start
    on_failure: Callable[[Allocation, int, ApiError], None]  # consecutive failures

    async def write(self, alloc: Allocation) -> Outcome:
        ops = node_patch(alloc.uid, alloc.cidrs)
        failures, delay = 0, self.backoff[0]
        while True:
            await self.fence()
            try:
                obj = await self.api.patch_node(alloc.node, ops)
            except NotFound:
                return Aborted()  # the Node is gone
            except ApiError as exc:
                failures += 1
                self.on_failure(alloc, failures, exc)
            else:
                return Committed(obj)
            outcome = await self.resolve(alloc)
            if outcome is not None:
                return outcome
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.backoff[1])

    async def resolve(self, alloc: Allocation) -> Outcome | None:
        """Quorum GET after a failed or unknown write; None while nothing is settled."""
        delay = self.backoff[0]
        while True:
            try:
                obj = await self.api.get_node(alloc.node)
                break
            except NotFound:
                return Aborted()  # the Node is gone
            except ApiError as exc:  # keep the reservation: the write may have landed
                log.warning("reading Node %s failed: %s", alloc.node, exc,
                            extra=kv(node=alloc.node, uid=alloc.uid))  # fmt: skip
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
        current = project_node(obj)
        if current.uid != alloc.uid:
            return Aborted()  # another Node under the same name: it comes through the watch
        if current.pod_cidrs == alloc.cidrs:
            return Committed(obj)
        if current.has_cidrs and not current.pod_cidrs:
            return Aborted()  # unparsable podCIDRs: never patched
        if current.has_cidrs:
            return Replaced(current)
        return None
