"""Whether the ClusterCIDR API is served, as the source of the ClusterCIDR informer.

Until it is, the informer lists nothing and its watch stays open, connected, until the
discovery loop (beside the syncs, every `discovery_interval`) finds the API; the watch then
ends and the informer lists the API's ClusterCIDRs, so a CRD installed later is used without a
restart. The first discovery retries with backoff and never gives up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from local_ccm.clock import Clock
from local_ccm.ipam.api import IpamApi
from local_ccm.kube.errors import ApiError
from local_ccm.kube.informer import ListWatch, Page
from local_ccm.kube.request import WatchEvent

log = logging.getLogger(__name__)


class PoolSource:
    """The ClusterCIDRs' list and watch behind discovery (`kube.informer.ListWatch`)."""

    def __init__(self, api: IpamApi, clock: Clock, backoff: tuple[float, float]) -> None:
        self.api, self.clock, self.backoff = api, clock, backoff
        self.served: bool | None = None  # None: not asked yet
        self.found = asyncio.Event()
        self.switched = False  # the empty watch ended because the API is served now
        self._source: ListWatch | None = None

    async def _first(self) -> bool:
        delay = self.backoff[0]
        while True:
            try:
                return await self.api.cluster_cidrs_served()
            except ApiError as exc:
                log.warning("discovery failed: %s; retry in %.1fs", exc, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.backoff[1])

    async def list_page(self, continue_token: str | None) -> Page:
        if self.served is None:
            self.served = await self._first()
            if self.served:
                self.found.set()
        if not self.served:
            return Page([], "")  # no version: the informer lists again once the watch ends
        if self._source is None:
            self._source = self.api.list_watch("clustercidrs")
        return await self._source.list_page(continue_token)

    def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        if self._source is not None:
            return self._source.watch(resource_version, timeout_seconds)
        return _Absent(self)

    async def discover(self, interval: float) -> None:
        """Ask again every `interval` until the API is served; then never returns."""
        while not self.served:
            await self.clock.sleep(interval)
            try:
                served = await self.api.cluster_cidrs_served()
            except ApiError as exc:
                log.warning("discovery failed: %s", exc)
                continue
            if served:
                log.info("the ClusterCIDR API is served now; watching ClusterCIDRs")
                self.served = True
                self.found.set()
        await asyncio.Event().wait()


class _Absent:
    """The watch while the API is not served: open, empty, until discovery finds it."""

    def __init__(self, source: PoolSource) -> None:
        self._source = source

    @property
    def is_open(self) -> bool:
        return True

    def __aiter__(self) -> _Absent:
        return self

    async def __anext__(self) -> WatchEvent:
        await self._source.found.wait()
        self._source.switched = True
        raise StopAsyncIteration
