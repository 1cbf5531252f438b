"""The agent's two modes over one :class:`Reconciler`: the loop (start-up reads, the
netlink monitor, timers, one worker that runs passes on coalesced triggers) and run-once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from local_ccm import names
from local_ccm.agent import nodeapi as na
from local_ccm.agent.core.candidates import Detected
from local_ccm.agent.core.config import AgentConfig, LoopSettings
from local_ccm.agent.core.passes import unmet_run_once
from local_ccm.agent.core.plan import plan_addresses
from local_ccm.agent.core.timing import API_BACKOFF, MONITOR_BACKOFF
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodemetadata import NodeMetadata
from local_ccm.agent.providerid import ProviderIdSource, fetch_provider_id
from local_ccm.agent.reconcile import DetectFn, Reconciler
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube import errors as ke
from local_ccm.logs import kv
from local_ccm.netlink import Change

__all__ = [
    "EXIT_FAILED", "EXIT_OK", "EXIT_PRECONDITION", "REQUIRED_ACCESS", "RUN_ONCE_DEADLINE",
    "RUN_ONCE_TRANSIENT_RETRIES", "Agent", "ChangeSource", "DetectFn", "Detected",
    "LoopSettings", "PreconditionError",
]  # fmt: skip

log = logging.getLogger(__name__)
T = TypeVar("T")
ChangeSource = Callable[[], AsyncIterator[Sequence[Change]]]

RUN_ONCE_TRANSIENT_RETRIES = 3
RUN_ONCE_DEADLINE = 60.0
EXIT_OK, EXIT_FAILED, EXIT_PRECONDITION = 0, 1, 4
REQUIRED_ACCESS = (  # missing any of these is exit 4: (verb, resource, subresource, namespaced)
    ("get", "nodes", "", False),
    ("list", "nodes", "", False),
    ("watch", "nodes", "", False),
    ("patch", "nodes", "", False),
    ("patch", "nodes", "status", False),
    ("create", "events", "", True),
)
NETLINK_KINDS = {"address": "addr", "resync": "overflow"}  # Change.kind -> metric label


class PreconditionError(Exception):
    """Exit 4 in loop mode: the API server rejects the credentials or refuses a start-up read."""


class Agent:
    """The agent for one Node: its passes (:attr:`reconciler`), triggers and health."""

    def __init__(
        self,
        settings: LoopSettings,
        config: AgentConfig,
        api: na.NodeApi,
        detect: DetectFn,
        *,
        clock: Clock | None = None,
        metrics: AgentMetrics | None = None,
        changes: ChangeSource | None = None,
        rng: random.Random | None = None,
        provider_ids: ProviderIdSource | None = None,
        metadata: NodeMetadata | None = None,
    ) -> None:
        self.settings, self.api, self.changes, self.provider_ids = (
            settings, api, changes, provider_ids,
        )  # fmt: skip
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or AgentMetrics()
        self.rng = rng or random.Random()
        self.name = settings.node_name
        self._log = logging.LoggerAdapter(log, kv(node=self.name))
        self.reconciler = passes = Reconciler(
            settings,
            config,
            api,
            detect,
            clock=self.clock,
            metrics=self.metrics,
            rng=self.rng,
            metadata=metadata,
        )
        self.health, self.triggers, self.events = passes.health, passes.triggers, passes.events

    @property
    def in_pass(self) -> bool:
        return self.reconciler.in_pass

    @property
    def fetched_provider_id(self) -> str | None:
        return self.reconciler.fetched_provider_id

    # -------------------------------------------------------------- loop mode
    async def run_loop(self) -> int:
        """Start up (netlink, LIST, first pass, watch) and run until cancelled. Returns only
        for a failed precondition (exit 4). The access review is the process runtime's."""
        jobs: list[asyncio.Task[None]] = []
        loop, passes = asyncio.get_running_loop(), self.reconciler
        try:
            # The monitor first, so no address change during start-up is missed.
            jobs.append(loop.create_task(self._watch_kernel()))
            read = passes.cache.read
            await self._until_answered(f"reading Node {self.name}",
                                       lambda: read(self.settings.api_timeout))  # fmt: skip
            await self._fetch_provider_id()
            await passes.run_pass(["startup"])
            self.health.first_pass = True
            passes.cache.start_watch()
            jobs += [loop.create_task(job) for job in self._jobs()]
            while True:  # passes never overlap: one worker consumes coalesced triggers
                await passes.run_pass(await self.triggers.next_burst())
        except PreconditionError as exc:
            print(f"{names.AGENT}: {exc}", file=sys.stderr)
            self._log.error("start-up precondition failed: %s", exc)
            return EXIT_PRECONDITION
        finally:
            for task in [*jobs, passes.cache.watch_task]:
                if task is not None:
                    task.cancel()
            self.triggers.cancel_later()

    def _jobs(self) -> list[Coroutine[Any, Any, None]]:
        def resync_interval() -> float:
            return self.settings.resync_interval * (0.9 + 0.2 * self.rng.random())  # ±10 %

        return [
            self.events.run(),
            self.triggers.fire_every("tick", lambda: self.settings.reconcile_interval),
            self.triggers.fire_every("resync", resync_interval),
        ]

    async def _watch_kernel(self) -> None:
        """Every batch of kernel notifications is a trigger; a failed socket is reopened."""
        if self.changes is None:
            return
        failures = 0
        while True:
            try:
                async for batch in self.changes():
                    failures = 0
                    for change in batch:
                        kind = NETLINK_KINDS.get(change.kind, change.kind)
                        self.metrics.netlink_events.labels(kind).inc()
                    self.triggers.fire("netlink")
            except OSError as exc:
                delay = MONITOR_BACKOFF.next_delay(failures, None, self.rng)
                failures += 1
                self._log.warning("netlink monitor failed (%s); reopening in %.1fs", exc, delay)
                await self.clock.sleep(delay)

    async def _until_answered(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` until the API server answers: transient errors back off (honouring
        Retry-After); rejected credentials or a refusal end the process (exit 4)."""
        failures = 0
        while True:
            try:
                return await call()
            except (ke.Unauthorized, ke.Forbidden) as exc:
                raise PreconditionError(f"{what} was refused: {exc.message}") from exc
            except ke.ApiError as exc:
                delay = API_BACKOFF.next_delay(failures, exc.retry_after, self.rng)
                failures += 1
                self._log.warning("%s failed (%s); retry in %.1fs", what, exc, delay)
                await self.clock.sleep(delay)

    async def _fetch_provider_id(self) -> None:
        """Once per process, before the first pass (which then sets it with the taint
        removal); a missing or failing metadata service blocks nothing."""
        if self.provider_ids is None or self.settings.provider_id:
            return
        attempts = await fetch_provider_id(self.provider_ids, self.clock, self.rng, self.name)
        self.reconciler.fetched_provider_id = attempts.value

    # -------------------------------------------------------------- run-once
    async def run_once(self) -> int:
        """Run-once mode: one full pass with bounded retries, then exit 0 or 1."""
        try:
            return await asyncio.wait_for(self._once(), RUN_ONCE_DEADLINE)
        except TimeoutError:
            print(
                f"{names.AGENT}: run-once: no final state within {RUN_ONCE_DEADLINE:.0f}s",
                file=sys.stderr,
            )
            return EXIT_FAILED
        finally:
            self.triggers.cancel_later()

    async def _once(self) -> int:
        await self._fetch_provider_id()
        passes = self.reconciler
        for attempt in range(RUN_ONCE_TRANSIENT_RETRIES + 1):
            try:
                await passes.cache.relist()
            except ke.ApiError as exc:
                passes.retry.last_error = exc
            else:
                if passes.cache.node is None:
                    print(f"{names.AGENT}: Node {self.name} not found", file=sys.stderr)
                    return EXIT_FAILED
                passes.retry.until = 0.0  # run-once keeps its own retry count
                await passes.run_pass(["startup"])
            error = passes.retry.last_error
            if not isinstance(error, ke.Transient | ke.Conflict):
                break
            await self.clock.sleep(API_BACKOFF.next_delay(attempt, error.retry_after, self.rng))
        await self.events.flush(5.0)
        return self._verdict()

    def _verdict(self) -> int:
        passes = self.reconciler
        node, detected, error = passes.cache.node, passes.detected, passes.retry.last_error
        if node is None or detected is None:
            reason = error.message if error else "Node not read"
            print(f"{names.AGENT}: run-once failed: {reason}", file=sys.stderr)
            return EXIT_FAILED
        plan = plan_addresses(node, detected, passes.config)
        provider_id = self.settings.provider_id or passes.fetched_provider_id or ""
        unmet = unmet_run_once(node, plan, detected, passes.config, provider_id)
        for item in unmet:
            print(f"{names.AGENT}: unmet: {item}", file=sys.stderr)
        if error is not None and unmet:
            print(f"{names.AGENT}: last error: {error.message}", file=sys.stderr)
        return EXIT_FAILED if unmet else EXIT_OK
