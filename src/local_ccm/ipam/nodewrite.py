"""One Node write of node-ipam-controller, until its outcome is known.

The JSON Patch is guarded by `test /metadata/uid`. Error policy: 404 → the
Node is gone, abort; anything else (409/422, timeouts, 5xx, connection errors) → a quorum GET
decides: our CIDRs → committed; another uid or unparsable podCIDRs → abort; other podCIDRs →
theirs replace ours; still empty → written again after the key's backoff (the worker's). A
failed GET keeps the reservation, because the write may have landed: no outcome is guessed, and
the next attempt asks again before it writes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from local_ccm.ipam.api import IpamApi, Obj
from local_ccm.ipam.core.allocator import Allocation
from local_ccm.ipam.core.model import NodeView, project_node
from local_ccm.ipam.core.status import node_patch
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
    """One attempt per call; the worker's backoff spaces the attempts (`ipam.nodes`)."""

    api: IpamApi
    on_failure: Callable[[Allocation, ApiError], None]  # a failed PATCH
    fence: Callable[[], Awaitable[None]]  # waits until a write may start (after a slow GET)

    async def write(self, alloc: Allocation) -> Outcome | None:
        """PATCH once; after a failure, the quorum GET decides. None: nothing settled yet (the
        write certainly did not land: write again later)."""
        ops = node_patch(alloc.uid, alloc.cidrs)
        await self.fence()
        try:
            obj = await self.api.patch_node(alloc.node, ops)
        except NotFound:
            return Aborted()  # the Node is gone
        except ApiError as exc:
            self.on_failure(alloc, exc)
        else:
            return Committed(obj)
        return await self.resolve(alloc)

    async def resolve(self, alloc: Allocation) -> Outcome | None:
        """Quorum GET after a failed or unknown write; None while nothing is settled. A failed
        GET raises `UnknownOutcomeError`: the reservation stays, the write may have landed."""
        try:
            obj = await self.api.get_node(alloc.node)
        except NotFound:
            return Aborted()  # the Node is gone
        except ApiError as exc:  # keep the reservation: the write may have landed
            log.warning("reading Node %s failed: %s", alloc.node, exc,
                        extra=kv(node=alloc.node, uid=alloc.uid))  # fmt: skip
            raise UnknownOutcomeError(str(exc)) from exc
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


class UnknownOutcomeError(Exception):
    """The outcome of a write is unknown (the GET after it failed): ask again before writing."""
