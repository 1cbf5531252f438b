"""Leader election over a Lease: the API seam, its kube adapter and the campaign loop.

Decisions come from `local_ccm.lease.election` (pure); this module only does the GETs and
writes, keeps time with an injected `Clock`, and runs the leader's work next to the
renew loop. Policy:

- candidate: attempt, then wait retry period + jitter; any API error → try again later;
- leader: renew every retry period; a failed renewal is retried until the renew deadline,
  then the work is cancelled and `LeadershipLost` raised (the CLI exits 3). Seeing another
  holder (or the Lease gone) while leading is an immediate loss;
- `stop()`, the work returning, or the work raising: the work is stopped, the Lease is
  released (empty holder, `leaseDurationSeconds = 1`) so a standby takes over at once; a
  release the API server does not answer within `RELEASE_TIMEOUT` is given up (the Lease then
  expires). A candidate's attempt in flight is abandoned at once.
  Cancelling `run()` does the same and then re-raises `CancelledError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from local_ccm.clock import Clock, Stopped, race, sleep_unless_stopped, unless_stopped
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.errors import ApiError, Conflict, NotFound
from local_ccm.kube.resources import LEASES
from local_ccm.lease import election
from local_ccm.lease.election import Action, ElectionConfig, ObservedState, Rng
from local_ccm.logs import V2, kv
from local_ccm.records import dataclass

log = logging.getLogger(__name__)

T = TypeVar("T")
Obj = dict[str, Any]
# How long a stopping leader waits to hand the Lease over. An API server that answers takes
# milliseconds; one that hangs would hold a SIGTERM for the whole write timeout, while the
# standby loses at most one lease duration when the release is given up.
RELEASE_TIMEOUT = 1.0


class LeaseApi(Protocol):
    """One Lease. Errors are `local_ccm.kube.errors` kinds: NotFound, Conflict, Transient…"""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    async def get(self) -> Obj: ...

    async def create(self, lease: Mapping[str, Any]) -> Obj: ...

    async def update(self, lease: Mapping[str, Any]) -> Obj:
        """PUT with `lease.metadata.resourceVersion` as precondition (stale → Conflict)."""
        ...


@dataclass(frozen=True)
class KubeLeaseApi:
    """`LeaseApi` on the project's REST client.

    `timeout` bounds each request; the CLI passes the election's `write_timeout`.
    The elector also bounds every attempt on its own clock.
    """

    client: AsyncClient
    namespace: str
    name: str
    timeout: float | None = None

    async def get(self) -> Obj:
        return await self.client.get(
            LEASES, self.name, namespace=self.namespace, timeout=self.timeout
        )

    async def create(self, lease: Mapping[str, Any]) -> Obj:
        return await self.client.create(
            LEASES, dict(lease), namespace=self.namespace, timeout=self.timeout
        )

    async def update(self, lease: Mapping[str, Any]) -> Obj:
        return await self.client.update(
            LEASES, dict(lease), namespace=self.namespace, timeout=self.timeout
        )


class LeadershipLost(Exception):  # noqa: N818 (the name the CLI uses)
    """The lease was lost or could not be renewed in time; the process must exit 3."""


@dataclass(frozen=True)
class LeaderContext:
    """Given to the leader's work: who we are and whether a write may start now (`may_write()`
    is False once the last renewal is too old for a write to land safely)."""

    identity: str
    write_timeout: float
    may_write: Callable[[], bool]


LeaderWork = Callable[[LeaderContext], Awaitable[None]]


class LeaderElector:
    """Campaigns for one Lease and runs the leader's work while holding it."""

    def __init__(
        self,
        api: LeaseApi,
        config: ElectionConfig,
        clock: Clock,
        rng: Rng,
        *,
        on_leader_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._api = api
        self._config = config
        self._clock = clock
        self._rng = rng
        self._on_leader_change = on_leader_change
        self._stop = asyncio.Event()
        self._observed = ObservedState()
        self._lease: Obj | None = None  # our last successful write, for the release
        self._last_renewed: float | None = None
        self._leading = False
        self._last_error: str | None = None  # repeats of one error are logged at DEBUG

    @property
    def identity(self) -> str:
        return self._config.identity

    @property
    def is_leader(self) -> bool:
        return self._leading

    def stop(self) -> None:
        """Graceful stop: stop the work, release the lease, and let `run()` return."""
        self._stop.set()

    def may_write(self) -> bool:
        now = self._clock.monotonic()
        return self._leading and election.may_write(self._config, self._last_renewed, now)

    async def run(self, on_started_leading: LeaderWork) -> None:
        """Campaign until leading, then run `on_started_leading` while renewing."""
        fields = kv(lease=f"{self._api.namespace}/{self._api.name}", identity=self.identity)
        log.info("campaigning for the lease", extra=fields)
        if not await self._campaign():
            return
        log.info("became leader", extra=fields)
        self._set_leading(True)
        await self._lead(on_started_leading)

    # ------------------------------------------------------------- candidate

    async def _campaign(self) -> bool:
        """Attempt until we hold the lease (True) or stop() was called (False)."""
        while not self._stop.is_set():
            # A stop ends an attempt in flight, as cancelling client-go's context does: a
            # process stopping while the API server hangs must not wait for the deadline. A
            # write that landed all the same is only ever held until it expires.
            attempt = self._bounded(self._attempt(), self._config.renew_deadline)
            try:
                acquired = await unless_stopped(attempt, self._stop)
            except TimeoutError:
                log.warning("lease attempt timed out", extra=kv(identity=self.identity))
                acquired = False
            if isinstance(acquired, Stopped):
                return False
            if acquired:
                return True
            delay = election.candidate_delay(self._config, self._rng)
            await sleep_unless_stopped(self._clock, delay, self._stop)
        return False

    async def _attempt(self) -> bool:
        """One GET and, if the decision says so, one CREATE/UPDATE. True: we hold the lease.
        A leader renews from its own last write without the GET (as client-go does): the
        write's resourceVersion makes it fail if anyone else wrote since, and then it reads."""
        started = self._clock.monotonic()
        if self._leading and self._lease is not None:
            try:
                return await self._apply(self._lease, started, optimistic=True)
            except Conflict:
                log.log(V2, "the lease changed since our last write; reading it")
        try:
            current = await _lease_or_none(self._api)
        except ApiError as exc:
            self._warn("reading the lease failed: %s", exc)
            return False
        return await self._apply(current, started)

    async def _apply(
        self, current: Obj | None, started: float, *, optimistic: bool = False
    ) -> bool:
        record = None if current is None else election.record_from_lease(current)
        decision = election.decide(
            self._config, self._observed, record, self._clock.monotonic(), self._clock.now()
        )
        changed = decision.observed != self._observed
        self._observed = decision.observed
        if decision.action is Action.LOST:
            raise LeadershipLost(decision.reason)
        if decision.action is Action.WAIT or decision.record is None:
            # V2 only when the holder or renewTime moved; every attempt at DEBUG.
            level = V2 if changed and not self._leading else logging.DEBUG
            log.log(level, "standing by: %s", decision.reason, extra=kv(identity=self.identity))
            return False
        try:
            self._lease = await self._write(decision.action, current, decision.record)
        except Conflict:
            if optimistic:
                raise
            log.log(V2, "lease changed concurrently; another candidate won")
            return False
        except ApiError as exc:
            self._warn("writing the lease failed: %s", exc)
            return False
        self._last_error = None
        self._observed = ObservedState(decision.record, self._clock.monotonic())
        # The attempt's start is a safe lower bound of when the lease was renewed.
        self._last_renewed = started
        return True

    async def _write(
        self, action: Action, current: Obj | None, record: election.LeaseRecord
    ) -> Obj:
        if action is Action.CREATE or current is None:
            body = election.lease_for_create(self._api.name, self._api.namespace, record)
            return await self._api.create(body)
        return await self._api.update(election.lease_for_update(current, record))

    # ------------------------------------------------------------- leader

    async def _lead(self, work: LeaderWork) -> None:
        context = LeaderContext(self.identity, self._config.write_timeout, self.may_write)
        work_task: asyncio.Future[None] = asyncio.ensure_future(work(context))
        renew_task = asyncio.create_task(self._renew_loop(), name="lease-renew")
        stop_task = asyncio.create_task(self._stop.wait(), name="leader-stop")
        tasks: set[asyncio.Future[Any]] = {work_task, renew_task, stop_task}
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_task.cancel()
            await _cancel_and_wait(work_task)  # renewals continue while the work winds down
            await _cancel_and_wait(renew_task)
            self._set_leading(False)
            if not _raised(renew_task):
                await self._release()
        if _raised(renew_task):
            log.error("leadership lost: %s", renew_task.exception())
            renew_task.result()
        if _raised(work_task):
            work_task.result()

    async def _renew_loop(self) -> None:
        while True:
            assert self._last_renewed is not None  # set by the acquiring attempt
            deadline = self._last_renewed + self._config.renew_deadline
            remaining = deadline - self._clock.monotonic()
            await self._clock.sleep(min(self._config.retry_period, max(remaining, 0.0)))
            remaining = deadline - self._clock.monotonic()
            if election.renewal_overdue(self._config, self._last_renewed, self._clock.monotonic()):
                raise LeadershipLost(f"no successful renewal for {self._config.renew_deadline:g}s")
            try:
                renewed = await self._bounded(self._attempt(), remaining)
            except TimeoutError:
                renewed = False
            if not renewed:
                log.warning("renewing the lease failed", extra=kv(identity=self.identity))

    async def _release(self) -> None:
        """Hand the lease back; failures only cost the standby time."""
        current, self._lease = self._lease, None
        if current is None:
            return
        try:
            timeout = min(self._config.write_timeout, RELEASE_TIMEOUT)
            await self._bounded(self._release_from(current), timeout)
        except (ApiError, TimeoutError) as exc:
            log.warning("releasing the lease failed: %s", exc, extra=kv(identity=self.identity))

    async def _release_from(self, current: Obj) -> None:
        for attempt in range(2):
            record = election.release_record(
                self._config, election.record_from_lease(current), self._clock.now()
            )
            if record is None:
                log.info("not releasing: the lease is no longer ours")
                return
            try:
                await self._api.update(election.lease_for_update(current, record))
            except Conflict:
                # A cancelled renewal may have landed after all: re-read once.
                if attempt:
                    raise
                current = await self._api.get()
                continue
            self._observed = ObservedState(record, self._clock.monotonic())
            log.info("released the lease", extra=kv(identity=self.identity))
            return

    # ------------------------------------------------------------- helpers

    def _warn(self, what: str, exc: ApiError) -> None:
        """WARNING when an error starts or changes; its repeats (an outage) at DEBUG."""
        text = f"{type(exc).__name__}: {exc}"
        level = logging.DEBUG if text == self._last_error else logging.WARNING
        self._last_error = text
        log.log(level, what, exc, extra=kv(identity=self.identity))

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if self._on_leader_change is not None:
            self._on_leader_change(leading)

    async def _bounded(self, awaitable: Awaitable[T], timeout: float) -> T:
        """Await with a timeout measured on the injected clock (TimeoutError when it passes)."""
        task = await race(awaitable, self._clock.sleep(max(timeout, 0.0)))
        if task.cancelled():
            raise TimeoutError(f"no answer within {timeout:g}s")
        return task.result()


async def wait_until_free(
    api: LeaseApi,
    identity: str,
    clock: Clock,
    retry_period: float,
    on_wait: Callable[[bool], None] = lambda waiting: None,
) -> None:
    """Return once no one but `identity` holds the Lease `api` names, judged as a candidate
    judges it (`election.held_elsewhere`: absent, released, or unchanged for its duration on
    the local clock). Reads only, every `retry_period`; a read that fails is not "free", it is
    read again. A controller that runs either in the manager or in its standalone binary
    waits so for the other process's Lease before it starts (KEP-2436's leader migration has
    the same aim: one controller, one leader, across a move between processes).
    `on_wait(True)` once it must wait (the Lease held, or not readable), `on_wait(False)` when
    the wait ends (free, or cancelled: the process lost its own Lease or stops)."""
    lease = f"{api.namespace}/{api.name}"
    observed, waiting, last_error, told = ObservedState(), "", "", False
    try:
        while True:
            try:
                current = await _lease_or_none(api)
            except ApiError as exc:
                text = f"{type(exc).__name__}: {exc}"
                level = logging.DEBUG if text == last_error else logging.WARNING
                last_error = text
                log.log(level, "reading the lease failed: %s", text, extra=kv(lease=lease))
            else:
                record = None if current is None else election.record_from_lease(current)
                now = clock.monotonic()
                observed, held = election.held_elsewhere(identity, observed, record, now)
                if not held:
                    if waiting:
                        log.info("the lease is free", extra=kv(lease=lease))
                    return
                if not waiting:
                    log.info("waiting for the lease: %s", held, extra=kv(lease=lease))
                waiting = held
            if not told:
                on_wait(True)
                told = True
            await clock.sleep(retry_period)
    finally:
        if told:
            on_wait(False)


async def _lease_or_none(api: LeaseApi) -> Obj | None:
    """The Lease, or None when there is none."""
    try:
        return await api.get()
    except NotFound:
        return None


def _raised(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None


async def _cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait for it to finish; its outcome stays on the task."""
    task.cancel()
    await asyncio.wait({task})
