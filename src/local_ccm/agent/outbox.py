"""Sending the agent's Kubernetes Events: rate-limited when queued,
sent by their own task so an Event never delays a pass.

Which Events to emit, their budget and bodies are pure (``agent.events``); this is the shell.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from local_ccm.agent.core import events as ev
from local_ccm.agent.nodeapi import NodeApi, NodeApiError
from local_ccm.clock import Clock
from local_ccm.logs import kv

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class EventOutbox:
    """Events about one Node, queued by the pass and sent by :meth:`send_forever`."""

    def __init__(self, api: NodeApi, clock: Clock, *, namespace: str, node_name: str) -> None:
        self._api, self._clock = api, clock
        self.namespace, self.node_name = namespace, node_name
        self.budget = ev.EventBudget()
        self.queue: asyncio.Queue[Obj] = asyncio.Queue()

    def emit(self, spec: ev.EventSpec, node: Mapping[str, Any]) -> bool:
        """Queue an Event about ``node`` unless the budget says no."""
        self.budget, ok = ev.admit(self.budget, spec, self._clock.monotonic())
        if ok:
            now = ev.rfc3339(self._clock.now())
            self.queue.put_nowait(ev.event_body(spec, node, namespace=self.namespace, now=now))
        return ok  # queued

    async def send_forever(self) -> None:
        while True:
            await self._send(await self.queue.get())

    async def flush(self, timeout: float) -> None:
        """Run-once: send what is queued, bounded by ``timeout`` seconds."""

        async def drain() -> None:
            while not self.queue.empty():
                await self._send(self.queue.get_nowait())

        try:
            await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            log.warning("gave up sending Events", extra=kv(node=self.node_name))

    async def _send(self, body: Obj) -> None:
        try:
            await self._api.create_event(self.namespace, body)
        except NodeApiError as exc:
            log.warning(
                "could not create Event %s: %s", body["reason"], exc, extra=kv(node=self.node_name)
            )
