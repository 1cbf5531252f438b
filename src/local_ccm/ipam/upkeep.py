"""ClusterCIDR upkeep of node-ipam-controller: finalizers and status, with the exhaustion
Event. The finalizer stays while a terminating pool still owns a Node CIDR.

Finalizer writes are JSON Patches guarded by `test /metadata/resourceVersion` (add) or a `test`
of the entry (remove); a conflict is left to the watch, which brings the newer object. Status
is a merge patch on /status, at most one per pool per `--status-update-interval`, skipped when
unchanged. Both run in their own tasks and never delay an allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from local_ccm.clock import Clock
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.ledger import PoolUsage
from local_ccm.ipam.core.model import ClusterCIDR
from local_ccm.ipam.core.plan import Allocator
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
from local_ccm.ipam.nodeapi import IpamApi, Obj
from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound
from local_ccm.logs import V2, kv
from local_ccm.records import dataclass
from local_ccm.runtime.events import rfc3339
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)
Spawn = Callable[[Coroutine[Any, Any, Any], str], object]


@dataclass(frozen=True)
class Shared:
    """What the leader's Node work and ClusterCIDR upkeep share."""

    api: IpamApi
    allocator: Allocator
    metrics: IpamMetrics
    clock: Clock
    outbox: EventOutbox
    spawn: Spawn
    fence: Callable[[], Awaitable[None]]


class PoolKeeper:
    """The ClusterCIDRs as last seen, and the writes that keep their metadata and status."""

    def __init__(
        self,
        shared: Shared,
        *,
        status_interval: float,
        retry_delay: float,
        on_finalizer_added: Callable[[Obj], None],
    ) -> None:
        self.api, self.allocator, self.metrics = shared.api, shared.allocator, shared.metrics
        self.clock, self.outbox, self.spawn, self.fence = (
            shared.clock, shared.outbox, shared.spawn, shared.fence
        )  # fmt: skip
        self.status_interval, self.retry_delay = status_interval, retry_delay
        self.on_finalizer_added = on_finalizer_added
        self.pools: dict[str, CC] = {}
        self.pool_status: dict[str, Obj] = {}  # status as last read or written
        self.dirty: set[str] = set()  # pools whose status may have changed
        self.status_at: dict[str, float] = {}
        self.exhausted: dict[str, tuple[int, ...]] = {}
        self.finalizing: set[str] = set()
        self.active = False  # finalizers are planned only after recovery

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

    def plan_finalizer(self, name: str) -> None:
        cc = self.pools.get(name)
        if cc is None or not self.active or name in self.finalizing:
            return
        owned = self.allocator.owned_count(name)
        if cc.deleting and owned and isinstance(cc, ClusterCIDR):
            usage = self.allocator.usage(name)
            count = str(usage.nodes if usage else owned)
            self.outbox.once(ev.waiting_for_nodes(int(count)), ev.pool(name, cc.uid), count)
        action = plan_finalizer(cc, owned)
        if action is None:
            return
        ops = add_finalizer_patch(cc) if action == "add" else remove_finalizer_patch(cc)
        self.finalizing.add(name)
        self.spawn(self._write_finalizer(name, action, ops), f"finalizer-{name}")

    async def _write_finalizer(self, name: str, action: str, ops: list[Obj]) -> None:
        retry = False
        try:
            await self.fence()
            obj = await self.api.patch_cluster_cidr(name, ops)
        except NotFound:
            return
        except (Conflict, Invalid) as exc:  # someone else changed it: the watch brings it
            log.log(V2, "finalizer %s on %s: %s", action, name, exc, extra=kv(clustercidr=name))
            retry = True
        except ApiError as exc:
            log.warning("finalizer %s on %s failed: %s", action, name, exc,
                        extra=kv(clustercidr=name))  # fmt: skip
            retry = True
        else:
            log.info("finalizer %s on ClusterCIDR %s", "added" if action == "add" else "removed",
                     name, extra=kv(clustercidr=name))  # fmt: skip
            if action == "add" and name in self.pools:
                self.on_finalizer_added(obj)
        finally:
            self.finalizing.discard(name)
        if retry:
            await self.clock.sleep(self.retry_delay)
            self.plan_finalizer(name)

    # ------------------------------------------------------------ status

    async def status_loop(self, on_tick: Callable[[], None]) -> None:
        while True:
            await self.clock.sleep(min(1.0, self.status_interval))
            on_tick()
            now = self.clock.monotonic()
            for name in sorted(self.dirty):
                if now - self.status_at.get(name, float("-inf")) >= self.status_interval:
                    self.dirty.discard(name)
                    await self.write_status(name)

    async def write_status(self, name: str) -> None:
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
            await self.fence()
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
