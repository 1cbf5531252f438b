"""ClusterCIDR upkeep of node-ipam-controller: finalizers and status, with the exhaustion
Event. The finalizer stays while a terminating pool still owns a Node CIDR.

Finalizer writes are JSON Patches guarded by `test /metadata/resourceVersion` (add) or a `test`
of the entry (remove), made by the sync of the pool's key; a conflict is left to the watch,
which brings the newer object, and the key is looked at again shortly. Status is a merge patch
on /status, at most one per pool per `--status-update-interval`, skipped when unchanged, written
by a loop beside the syncs; neither delays an allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from local_ccm.clock import Clock
from local_ccm.ipam.api import IpamApi, Obj
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.allocator import Allocator
from local_ccm.ipam.core.ledger import PoolUsage
from local_ccm.ipam.core.model import ClusterCIDR
from local_ccm.ipam.core.status import (
    CC,
    add_finalizer_patch,
    desired_status,
    plan_finalizer,
    pool_readiness,
    remove_finalizer_patch,
    status_differs,
    with_transition_times,
)
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound
from local_ccm.logs import V2, kv
from local_ccm.records import dataclass
from local_ccm.runtime.controller import Fence
from local_ccm.runtime.events import rfc3339
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shared:
    """What the leader's Node work and ClusterCIDR upkeep share."""

    api: IpamApi
    allocator: Allocator
    metrics: IpamMetrics
    clock: Clock
    outbox: EventOutbox


@dataclass(frozen=True)
class Again:
    """The finalizer write did not land: plan it again after `seconds` (None: after the key's
    backoff)."""

    seconds: float | None


class PoolKeeper:
    """The ClusterCIDRs as last seen, and the writes that keep their metadata and status."""

    def __init__(self, shared: Shared, *, status_interval: float, retry_delay: float) -> None:
        self.api, self.allocator, self.metrics = shared.api, shared.allocator, shared.metrics
        self.clock, self.outbox = shared.clock, shared.outbox
        self.status_interval, self.retry_delay = status_interval, retry_delay
        self.pools: dict[str, CC] = {}
        self.pool_status: dict[str, Obj] = {}  # status as last read or written
        self.dirty: set[str] = set()  # pools whose status may have changed
        self.status_at: dict[str, float] = {}
        self.exhausted: dict[str, tuple[int, ...]] = {}

    def seen(self, cc: CC, status: Obj) -> None:
        self.pools[cc.name] = cc
        self.pool_status[cc.name] = status

    def forget(self, name: str) -> None:
        """The pool is gone."""
        self.pools.pop(name, None)
        self.pool_status.pop(name, None)
        self.dirty.discard(name)
        self.exhausted.pop(name, None)

    # ------------------------------------------------------------ finalizers

    def needs_finalizer_write(self, name: str) -> bool:
        cc = self.pools.get(name)
        return cc is not None and plan_finalizer(cc, self.allocator.owned_count(name)) is not None

    async def keep_finalizer(self, name: str) -> Obj | Again | None:
        """Add or remove the finalizer when the pool needs it: the pool as written when it was
        added, `Again` when the write did not land, else None."""
        cc = self.pools.get(name)
        if cc is None:
            return None
        owned = self.allocator.owned_count(name)
        if cc.deleting and owned and isinstance(cc, ClusterCIDR):
            usage = self.allocator.usage(name)
            count = str(usage.nodes if usage else owned)
            self.outbox.once(ev.waiting_for_nodes(int(count)), ev.pool(name, cc.uid), count)
        action = plan_finalizer(cc, owned)
        if action is None:
            return None
        ops = add_finalizer_patch(cc) if action == "add" else remove_finalizer_patch(cc)
        try:
            obj = await self.api.patch_cluster_cidr(name, ops)
        except NotFound:
            return None
        except (Conflict, Invalid) as exc:  # someone else changed it: the watch brings it
            log.log(V2, "finalizer %s on %s: %s", action, name, exc, extra=kv(clustercidr=name))
            return Again(self.retry_delay)
        except ApiError as exc:
            log.warning("finalizer %s on %s failed: %s", action, name, exc,
                        extra=kv(clustercidr=name))  # fmt: skip
            return Again(None)
        log.info("finalizer %s on ClusterCIDR %s", "added" if action == "add" else "removed",
                 name, extra=kv(clustercidr=name))  # fmt: skip
        return obj if action == "add" and name in self.pools else None

    # ------------------------------------------------------------ status

    async def status_loop(self, fence: Fence, on_tick: Callable[[], None]) -> None:
        while True:
            await self.clock.sleep(min(1.0, self.status_interval))
            on_tick()
            now = self.clock.monotonic()
            for name in sorted(self.dirty):
                if now - self.status_at.get(name, float("-inf")) >= self.status_interval:
                    self.dirty.discard(name)
                    await self.write_status(name, fence)

    async def write_status(self, name: str, fence: Fence) -> None:
        cc = self.pools.get(name)
        if cc is None:
            return
        usage = self.allocator.usage(name) if isinstance(cc, ClusterCIDR) else None
        if usage is not None and isinstance(cc, ClusterCIDR):
            self.metrics.set_pool(name, usage)
            self._note_exhaustion(cc, usage)
        desired = desired_status(cc, usage)
        current = self.pool_status.get(name)
        if not status_differs(desired, current):
            return
        stamped = with_transition_times(desired, current, rfc3339(self.clock.now()))
        self.status_at[name] = self.clock.monotonic()
        try:
            await fence()
            obj = await self.api.patch_cluster_cidr_status(name, stamped)
        except ApiError as exc:
            log.log(V2, "status of %s: %s", name, exc, extra=kv(clustercidr=name))
            if not isinstance(exc, NotFound):
                self.dirty.add(name)
            return
        if name in self.pools:
            self.pool_status[name] = dict(obj.get("status") or {})

    def _note_exhaustion(self, cc: ClusterCIDR, usage: PoolUsage) -> None:
        full = usage.exhausted_versions
        if full and not self.exhausted.get(cc.name) and pool_readiness(cc)[0] == "Ready":
            log.info("ClusterCIDR %s is exhausted", cc.name, extra=kv(clustercidr=cc.name))
            self.outbox.emit(ev.exhausted(full), ev.pool(cc.name, cc.uid))
        self.exhausted[cc.name] = full
