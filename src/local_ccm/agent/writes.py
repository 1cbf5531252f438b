"""The agent's one way to write its Node: a JSON Patch (guarded by ``test`` operations, planned
by ``core.plan``), counted by kind and result. What the API rejects as invalid is remembered,
so the same write is not sent again until its inputs change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from local_ccm.agent.core import events as ev
from local_ccm.agent.core.passes import patch_kinds
from local_ccm.agent.core.plan import Patch
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodeapi import ForbiddenError, InvalidError, NodeApi, NodeApiError
from local_ccm.logs import kv
from local_ccm.runtime.events import EventSpec

log = logging.getLogger(__name__)
Obj = dict[str, Any]
_RESULTS = {"conflict": "conflict", "invalid": "invalid", "forbidden": "forbidden"}


class NodeWriter:
    """PATCHes of one Node; ``emit`` queues an Event about a rejected one."""

    def __init__(
        self,
        api: NodeApi,
        name: str,
        metrics: AgentMetrics,
        emit: Callable[[EventSpec], bool],
    ) -> None:
        self._api, self._name, self._metrics, self._emit = api, name, metrics, emit
        self._log = logging.LoggerAdapter(log, kv(node=name))
        self.rejected: object = None  # the key of a write rejected as invalid

    def is_rejected(self, key: object) -> bool:
        return key == self.rejected

    async def write(self, patch: Patch, key: object) -> Obj:
        """One PATCH; returns the Node it stored. ``key`` names the write's inputs."""
        kinds = patch_kinds(patch)
        self._log.debug("PATCH %s %s", patch.subresource or "node", patch.body())
        try:
            new = await self._api.patch_node(self._name, patch)
        except NodeApiError as exc:
            for kind in kinds:
                self._metrics.writes.labels(kind, _RESULTS.get(exc.kind, "error")).inc()
            if isinstance(exc, InvalidError | ForbiddenError):
                self._emit(ev.update_rejected(f"PATCH of {'/'.join(kinds)}", exc.message))
            if isinstance(exc, InvalidError):
                self.rejected = key
                self._log.warning("write rejected: %s", exc.message)
            raise
        for kind in kinds:
            self._metrics.writes.labels(kind, "success").inc()
        return new
