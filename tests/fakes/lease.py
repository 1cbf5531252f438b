"""An in-memory Lease API (`local_ccm.lease.elector.LeaseApi`) with fault injection; its
contract test (tests/contracts/) also runs against the real adapter."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound, Transient
from tests.fakes.clock import START_WALL, FakeClock


@dataclass(frozen=True)
class Call:
    verb: str
    at: float | None
    holder: str | None = None


class FakeLeaseServer:
    """The shared store behind any number of `FakeLeaseApi` clients."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)

    def stamp(self, lease: dict[str, Any], *, new: bool) -> dict[str, Any]:
        meta = lease.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._versions))
        if new:
            meta["uid"] = f"00000000-0000-4000-8000-{next(self._uids):012d}"
            meta["creationTimestamp"] = START_WALL.strftime("%Y-%m-%dT%H:%M:%SZ")
        return lease

    def put(self, namespace: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create or overwrite a Lease directly (as another writer would)."""
        key = (namespace, name)
        lease = copy.deepcopy(self.leases.get(key)) or {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        }
        lease["spec"] = dict(spec)
        self.leases[key] = self.stamp(lease, new=key not in self.leases)
        return copy.deepcopy(self.leases[key])

    def spec(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.leases[(namespace, name)].get("spec") or {})


class FakeLeaseApi:
    """`local_ccm.lease.elector.LeaseApi` over a `FakeLeaseServer`, with fault injection.

    - `fail_next(verb, error)`: the next call of `verb` raises `error`;
    - `outage = True`: every call raises Transient (the apiserver is unreachable);
    - `hang = True`: calls block until `hang` is cleared (a request that never answers).
    """

    def __init__(
        self,
        server: FakeLeaseServer | None = None,
        *,
        name: str = "lease",
        namespace: str = "kube-system",
        clock: FakeClock | None = None,
    ) -> None:
        self.server = server or FakeLeaseServer()
        self.name = name
        self.namespace = namespace
        self.calls: list[Call] = []
        self.outage = False
        self._clock = clock
        self._failures: dict[str, deque[ApiError]] = {}
        self._unhang = asyncio.Event()
        self._unhang.set()

    @property
    def hang(self) -> bool:
        return not self._unhang.is_set()

    @hang.setter
    def hang(self, value: bool) -> None:
        if value:
            self._unhang.clear()
        else:
            self._unhang.set()

    def fail_next(self, verb: str, error: ApiError) -> None:
        self._failures.setdefault(verb, deque()).append(error)

    def verbs(self) -> list[str]:
        return [call.verb for call in self.calls]

    async def _enter(self, verb: str, body: Mapping[str, Any] | None = None) -> None:
        holder = (body or {}).get("spec", {}).get("holderIdentity") if body else None
        self.calls.append(Call(verb, self._clock.monotonic() if self._clock else None, holder))
        await asyncio.sleep(0)  # a real request always yields, so callers interleave
        await self._unhang.wait()
        if self.outage:
            raise Transient(0, "ConnectionRefused", "fake outage", request_sent=False)
        pending = self._failures.get(verb)
        if pending:
            raise pending.popleft()

    @property
    def _key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    async def get(self) -> dict[str, Any]:
        await self._enter("get")
        if self._key not in self.server.leases:
            raise NotFound(404, "NotFound", f'leases "{self.name}" not found')
        return copy.deepcopy(self.server.leases[self._key])

    async def create(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        await self._enter("create", lease)
        self._check_name(lease)
        if self._key in self.server.leases:
            raise Conflict(409, "AlreadyExists", f'leases "{self.name}" already exists')
        return self._store_new(lease)

    async def update(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        await self._enter("update", lease)
        self._check_name(lease)
        current = self.server.leases.get(self._key)
        if current is None:
            # Like the apiserver: Leases allow create-on-update, precondition or not.
            return self._store_new(lease)
        version = lease["metadata"].get("resourceVersion")
        # Like the apiserver for Leases: no resourceVersion means an unconditional update.
        if version and version != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        stored = copy.deepcopy(dict(lease))
        stored["metadata"] = {**current["metadata"], **stored["metadata"]}
        self.server.leases[self._key] = self.server.stamp(stored, new=False)
        return copy.deepcopy(stored)

    def _store_new(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(lease))
        stored["metadata"].pop("resourceVersion", None)
        self.server.leases[self._key] = self.server.stamp(stored, new=True)
        return copy.deepcopy(stored)

    def _check_name(self, lease: Mapping[str, Any]) -> None:
        meta = lease.get("metadata") or {}
        if meta.get("name") != self.name or meta.get("namespace", self.namespace) != self.namespace:
            raise Invalid(422, "Invalid", "metadata.name/namespace do not match the request")
