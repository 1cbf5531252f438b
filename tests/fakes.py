"""In-memory fakes behind the project's Protocols, for unit tests.

They stand in for our own seams, never for Kubernetes semantics; every API fake has a
contract test (tests/contracts/) that also runs against the real adapter.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound, Transient
from local_ccm.kube.informer import Page
from local_ccm.kube.request import WatchEvent

START_WALL = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)

# ------------------------------------------------------------------ clock


async def settle(max_rounds: int = 10_000) -> None:
    """Let every runnable task run until all of them wait on something.

    Relies on the default event loop's ready queue; without it, yields a fixed
    number of times.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    for _ in range(max_rounds if ready is not None else 100):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return


class FakeClock:
    """A `Clock` that only moves when the test says so.

    `sleep()` returns once `advance()`/`run_until()` has moved monotonic time past
    its deadline. Wall time moves with monotonic time unless `set_wall()` jumps it
    (to simulate a skewed or stepped wall clock).
    """

    def __init__(self, *, monotonic: float = 1000.0, wall: datetime = START_WALL) -> None:
        self._mono = monotonic
        self._wall = wall
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._wall

    def set_wall(self, wall: datetime) -> None:
        self._wall = wall

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), future))
        await future

    def _move_to(self, mono: float) -> None:
        if mono > self._mono:
            self._wall += timedelta(seconds=mono - self._mono)
            self._mono = mono

    def _next_deadline(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)  # cancelled sleeps
        return self._sleepers[0][0] if self._sleepers else None

    async def _wake_next(self) -> None:
        deadline, _, future = heapq.heappop(self._sleepers)
        self._move_to(deadline)
        future.set_result(None)
        await settle()

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking sleepers in deadline order."""
        target = self._mono + seconds
        await settle()
        while (deadline := self._next_deadline()) is not None and deadline <= target:
            await self._wake_next()
        self._move_to(target)
        await settle()

    async def run_until(self, predicate: Callable[[], bool], *, timeout: float) -> float:
        """Advance sleeper by sleeper until `predicate()` holds; the time it took.

        Raises AssertionError if it does not hold within `timeout` clock seconds.
        """
        start = self._mono
        await settle()
        while not predicate():
            deadline = self._next_deadline()
            if deadline is None or deadline > start + timeout:
                await self.advance(start + timeout - self._mono)
                if predicate():
                    break
                raise AssertionError(f"condition not met within {timeout}s of fake time")
            await self._wake_next()
        return self._mono - start


# ------------------------------------------------------------------ leases


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


# ------------------------------------------------------------------ list+watch


class FakeWatch:
    """One watch stream of a `FakeListWatch`: the test sends events, ends or fails it."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self._queue: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue()
        self._fail = fail
        self.is_open = fail is None

    def send(self, kind: str, obj: dict[str, Any]) -> None:
        self._queue.put_nowait(WatchEvent(kind, copy.deepcopy(obj)))

    def end(self, error: BaseException | None = None) -> None:
        """The server ends the stream (``None``) or the connection fails with ``error``."""
        self._queue.put_nowait(error)

    def __aiter__(self) -> FakeWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        if self._fail is not None:
            raise self._fail
        item = await self._queue.get()
        if isinstance(item, WatchEvent):
            return item
        self.is_open = False
        if item is None:
            raise StopAsyncIteration
        raise item


class FakeListWatch:
    """An Informer's `ListWatch` played by the test: `pages` are answered in order (an
    exception is raised), `open_errors` fail the next watches when opened, `streams` are the
    watches opened so far."""

    def __init__(self) -> None:
        self.pages: deque[Page | BaseException] = deque()
        self.open_errors: deque[BaseException] = deque()
        self.streams: list[FakeWatch] = []
        self.list_calls: list[str | None] = []
        self.watch_calls: list[tuple[str, int]] = []

    async def list_page(self, continue_token: str | None) -> Page:
        self.list_calls.append(continue_token)
        item = self.pages.popleft()
        if isinstance(item, BaseException):
            raise item
        return copy.deepcopy(item)

    def watch(self, resource_version: str, timeout_seconds: int) -> FakeWatch:
        self.watch_calls.append((resource_version, timeout_seconds))
        stream = FakeWatch(self.open_errors.popleft() if self.open_errors else None)
        self.streams.append(stream)
        return stream

    @property
    def stream(self) -> FakeWatch:
        return self.streams[-1]
