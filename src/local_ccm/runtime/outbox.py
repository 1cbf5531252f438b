"""The Event outbox every component posts through: a loop queues an Event and returns at once,
one task (`run`) posts them, so an Event never delays a pass, an allocation or a decision.

What is queued passes the budget (``local_ccm.runtime.events.admit``) when there is one; a full
queue or a failed POST drops the Event, counts it (`on_drop`) and logs it. Run-once processes
`flush` instead of running the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from local_ccm.clock import Clock
from local_ccm.kube.errors import ApiError
from local_ccm.logs import kv
from local_ccm.runtime import events as ev

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class EventSink(Protocol):
    """Where Events go: the API's `POST .../namespaces/{namespace}/events`."""

    async def create_event(self, namespace: str, body: Obj) -> object: ...


class EventOutbox:
    """`emit`/`once` from the loop; `run()` posts them until cancelled."""

    def __init__(
        self,
        sink: EventSink,
        clock: Clock,
        reporter: ev.Reporter,
        *,
        namespace: str,
        budget: ev.EventBudget | None = None,
        capacity: int = 0,
        on_drop: Callable[[], None] = lambda: None,
        failure_level: int = logging.WARNING,
    ) -> None:
        self.sink, self.clock, self.reporter, self.namespace = sink, clock, reporter, namespace
        self.budget, self.on_drop = budget, on_drop
        self.failure_level = failure_level  # of "not sent": quieter where drops are expected
        self.queue: asyncio.Queue[Obj] = asyncio.Queue(capacity)
        self.noted: set[tuple[Hashable, ...]] = set()

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> bool:
        """Queue an Event unless the budget says no or the queue is full; True when queued."""
        if self.budget is not None:
            key = (subject.uid, spec.reason, spec.message)
            self.budget, ok = ev.admit(self.budget, key, self.clock.monotonic())
            if not ok:
                return False
        body = ev.event_body(
            spec, subject, self.reporter, namespace=self.namespace, now=self.clock.now()
        )
        try:
            self.queue.put_nowait(body)
        except asyncio.QueueFull:
            self.on_drop()
            return False
        return True

    def once(self, spec: ev.EventSpec, subject: ev.Subject, *key: Hashable) -> None:
        """Emit once per subject, reason and `key` (e.g. the generation) for this process."""
        marker = (subject.kind, subject.uid or subject.name, spec.reason, *key)
        if marker not in self.noted:
            self.noted.add(marker)
            self.emit(spec, subject)

    async def run(self) -> None:
        while True:
            await self._send(await self.queue.get())

    async def flush(self, timeout: float) -> None:
        """Send what is queued, bounded by `timeout` seconds (run-once processes)."""

        async def drain() -> None:
            while not self.queue.empty():
                await self._send(self.queue.get_nowait())

        try:
            await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            log.warning("gave up sending %d Events", self.queue.qsize())

    async def _send(self, body: Obj) -> None:
        try:
            await self.sink.create_event(body["metadata"]["namespace"], body)
        except ApiError as exc:
            self.on_drop()
            subject = body["involvedObject"]
            fields = kv(node=subject["name"]) if subject["kind"] == "Node" else {}
            log.log(self.failure_level, "Event %s not sent: %s", body["reason"], exc, extra=fields)
