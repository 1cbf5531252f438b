"""node-bmc's connections to BMCs and the credentials they use.

- `Pollers`: one `RedfishClient` per NodeBMC, kept from poll to poll (its keep-alive
  connection, its Redfish session), made anew when the address or the TLS settings change,
  handed rotated credentials in place, closed when the NodeBMC goes; one request in flight per
  BMC endpoint (host and port), even when several NodeBMCs name Systems of one BMC (a chassis
  manager); every request in the controller's own thread pool.
- `CredentialStore`: a Secret of the credentials namespace read with one GET (never a list or
  a watch: the controller's RBAC is `get` there) when first needed, again after the BMC
  refused it, and at most every `max_age` seconds otherwise. Nothing here logs a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Final

from local_ccm.bmc.api import BmcApi
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec, credentials_of
from local_ccm.bmc.core.system import System
from local_ccm.bmc.redfish import Exchange, RedfishClient
from local_ccm.clock import Clock
from local_ccm.kube.errors import Forbidden, NotFound

log = logging.getLogger(__name__)
CLOSE_TIMEOUT: Final = 2.0  # logging out of a session at the end; a silent BMC is left


class CredentialStore:
    """The credentials Secrets by name, read on demand."""

    def __init__(self, api: BmcApi, namespace: str, clock: Clock, max_age: float) -> None:
        self.api, self.namespace, self.clock, self.max_age = api, namespace, clock, max_age
        self._read: dict[str, tuple[Credentials, float]] = {}

    async def get(self, name: str, *, fresh: bool = False) -> Credentials | str:
        """The Secret's credentials (read again when `fresh` or older than `max_age`), or
        what is wrong: missing, unreadable, or without the keys. Other API errors raise."""
        kept = self._read.get(name)
        now = self.clock.monotonic()
        if kept is not None and not fresh and now - kept[1] < self.max_age:
            return kept[0]
        where = f"{self.namespace}/{name}"
        try:
            secret = await self.api.get_secret(self.namespace, name)
        except NotFound:
            self._read.pop(name, None)
            return f"Secret {where} not found"
        except Forbidden as exc:
            return f"Secret {where} may not be read ({exc}): the controller gets Secrets only " \
                   "in its credentials namespace"  # fmt: skip
        found = credentials_of(secret, where)
        if isinstance(found, Credentials):
            self._read[name] = (found, now)
        else:
            self._read.pop(name, None)
        return found


class Pollers:
    """The Redfish clients of one leadership term, by NodeBMC name."""

    def __init__(
        self,
        executor: Executor,
        clock: Clock,
        on_exchange: Callable[[Exchange], None],
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        self.executor, self.clock, self.on_exchange = executor, clock, on_exchange
        self.timeouts = (connect_timeout, read_timeout)
        self._clients: dict[str, tuple[BmcSpec, Credentials, RedfishClient]] = {}
        self._endpoints: dict[tuple[str, int], asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._clients)

    async def read(self, key: str, spec: BmcSpec, credentials: Credentials) -> System:
        """GET the System of NodeBMC `key`; raises `BmcError` (a CA bundle that is not PEM
        too, as `tls`)."""
        client = await self._client(key, spec, credentials)
        lock = self._endpoints.setdefault(spec.endpoint, asyncio.Lock())
        async with lock:
            return await client.get_system()

    async def reset(
        self, key: str, spec: BmcSpec, credentials: Credentials, reset_type: str
    ) -> None:
        """POST the System's reset action (`ForceOff`) through NodeBMC `key`'s client, in turn
        with the other requests to its BMC; raises `BmcError`."""
        client = await self._client(key, spec, credentials)
        lock = self._endpoints.setdefault(spec.endpoint, asyncio.Lock())
        async with lock:
            await client.reset(reset_type)

    async def _client(self, key: str, spec: BmcSpec, credentials: Credentials) -> RedfishClient:
        kept = self._clients.get(key)
        if kept is not None and kept[0].connection == spec.connection:
            if kept[1] != credentials:
                kept[2].set_credentials(credentials)
                self._clients[key] = (spec, credentials, kept[2])
            return kept[2]
        if kept is not None:
            await self.drop(key)
        connect, read = self.timeouts
        client = RedfishClient(
            spec.address, credentials, ca_pem=spec.ca_pem, verify=spec.verify,
            connect_timeout=connect, read_timeout=read, clock=self.clock,
            on_exchange=self.on_exchange, executor=self.executor,
        )  # fmt: skip
        self._clients[key] = (spec, credentials, client)
        return client

    async def drop(self, key: str) -> None:
        """Close NodeBMC `key`'s client, if it has one (its NodeBMC is gone or changed)."""
        kept = self._clients.pop(key, None)
        if kept is None:
            return
        endpoint = kept[0].endpoint
        if all(spec.endpoint != endpoint for spec, _, _ in self._clients.values()):
            self._endpoints.pop(endpoint, None)
        await _close(kept[2])

    async def close(self) -> None:
        """Close every client, each bounded by `CLOSE_TIMEOUT` (the end of a term)."""
        clients = [client for _, _, client in self._clients.values()]
        self._clients.clear()
        self._endpoints.clear()
        await asyncio.gather(*(_close(c) for c in clients))


async def _close(client: RedfishClient) -> None:
    with contextlib.suppress(BmcError, TimeoutError):
        await asyncio.wait_for(client.close(), CLOSE_TIMEOUT)
    log.debug("closed the client of %s", client.address)
