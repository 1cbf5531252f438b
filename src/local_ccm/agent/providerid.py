"""A provider ID from instance metadata: ``--enable-azure-provider-id``.

:class:`ProviderIdSource` is the seam; :class:`AzureImds` the adapter over
``local_ccm.kube.imds`` (the agent package speaks no HTTP itself); :func:`fetch_provider_id`
applies the policy of ``timing.ProviderIdAttempts``. No failure blocks anything.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Protocol

from local_ccm.agent.core.timing import (
    PROVIDER_ID_BACKOFF,
    ProviderIdAttempts,
    provider_id_failed,
    provider_id_succeeded,
)
from local_ccm.clock import Clock
from local_ccm.logs import V1, kv

log = logging.getLogger(__name__)


class ProviderIdError(Exception):
    """No provider ID this time; ``transport``: nothing answered (the metadata service is
    absent), else it answered with an error."""

    def __init__(self, message: str, *, transport: bool) -> None:
        super().__init__(message)
        self.transport = transport


class ProviderIdSource(Protocol):
    async def fetch(self) -> str:
        """The provider ID (``azure://...``); raises :class:`ProviderIdError`."""
        ...


async def fetch_provider_id(
    source: ProviderIdSource, clock: Clock, rng: random.Random, node: str
) -> ProviderIdAttempts:
    """Ask ``source`` until it answers, is absent, or failed three times."""
    state = ProviderIdAttempts()
    while not state.done:
        if state.failures:
            await clock.sleep(PROVIDER_ID_BACKOFF.next_delay(state.failures - 1, None, rng))
        try:
            state = provider_id_succeeded(state, await source.fetch())
        except ProviderIdError as exc:
            state = provider_id_failed(state, str(exc), transport=exc.transport)
            log.log(V1, "instance metadata: %s", exc, extra=kv(node=node))
    if state.value is not None:
        log.info("provider ID from instance metadata: %s", state.value, extra=kv(node=node))
    elif state.absent:
        log.info("no instance metadata (not Azure): %s", state.last_error, extra=kv(node=node))
    else:
        why = f"{state.failures} failed attempts, last: {state.last_error}"
        log.warning("no provider ID from instance metadata: %s", why, extra=kv(node=node))
    return state


class AzureImds:
    """:class:`ProviderIdSource` over Azure IMDS; ``url`` is injectable for tests."""

    def __init__(self, url: str | None = None, timeout: float | None = None) -> None:
        from local_ccm.kube import imds  # noqa: PLC0415  (only when the flag is set)

        self._imds = imds
        self._url = url or imds.AZURE_RESOURCE_ID_URL
        self._timeout = imds.AZURE_TIMEOUT if timeout is None else timeout

    async def fetch(self) -> str:
        try:
            return await asyncio.to_thread(self._imds.azure_provider_id, self._url, self._timeout)
        except self._imds.MetadataError as exc:
            raise ProviderIdError(str(exc), transport=exc.transport) from exc
