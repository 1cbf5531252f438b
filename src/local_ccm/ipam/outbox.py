"""The Event outbox of node-ipam-controller.

Decisions queue Events here and return at once; one task posts them, so an Event never
delays an allocation. A full queue drops the Event and counts it.
"""

from __future__ import annotations

import asyncio
import logging

from local_ccm.clock import Clock
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.nodeapi import IpamApi
from local_ccm.kube.errors import ApiError
from local_ccm.logs import V2

log = logging.getLogger(__name__)

EVENT_QUEUE = 1000


class EventOutbox:
    """`emit`/`once` from the loop; `run()` posts them until cancelled."""

    def __init__(
        self, api: IpamApi, metrics: IpamMetrics, clock: Clock, *, namespace: str, instance: str
    ) -> None:
        self.api, self.metrics, self.clock = api, metrics, clock
        self.namespace, self.instance = namespace, instance
        self.queue: asyncio.Queue[ev.EventSpec] = asyncio.Queue(EVENT_QUEUE)
        self.noted: set[tuple[str, ...]] = set()

    def once(self, spec: ev.EventSpec, *key: str) -> None:
        """Emit once per subject, reason and `key` (e.g. the generation)."""
        marker = (spec.subject.kind, spec.subject.uid or spec.subject.name, spec.reason, *key)
        if marker not in self.noted:
            self.noted.add(marker)
            self.emit(spec)

    def emit(self, spec: ev.EventSpec) -> None:
        try:
            self.queue.put_nowait(spec)
        except asyncio.QueueFull:
            self.metrics.events_dropped.inc()

    async def run(self) -> None:
        while True:
            spec = await self.queue.get()
            body = ev.event_body(
                spec, namespace=self.namespace, now=self.clock.now(), instance=self.instance
            )
            try:
                await self.api.create_event(self.namespace, body)
            except ApiError as exc:
                self.metrics.events_dropped.inc()
                log.log(V2, "event %s dropped: %s", spec.reason, exc)
