"""The agent's long-running jobs and its two modes:
start-up checks, the worker, the netlink monitor, the timers, loop and run-once.

Each job is a coroutine over an :class:`~local_ccm.agent.loop.Agent`; the pass itself is the
agent's. Time comes from the agent's clock, so unit tests drive every job with a fake one.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from local_ccm import names
from local_ccm.agent.core.passes import unmet_run_once
from local_ccm.agent.core.plan import plan_addresses
from local_ccm.agent.core.timing import API_BACKOFF, MONITOR_BACKOFF
from local_ccm.agent.nodeapi import (
    ConflictError,
    ForbiddenError,
    NodeApiError,
    TransientError,
    UnauthorizedError,
)
from local_ccm.agent.providerid import fetch_provider_id
from local_ccm.agent.triggers import Triggers
from local_ccm.clock import Clock
from local_ccm.logs import kv

if TYPE_CHECKING:
    from local_ccm.agent.loop import Agent

log = logging.getLogger(__name__)
T = TypeVar("T")

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
    """Exit 4 in loop mode: credentials rejected or permissions missing."""


# ------------------------------------------------------------------ timers and the worker
async def fire_after(clock: Clock, triggers: Triggers, delay: float, kind: str = "retry") -> None:
    await clock.sleep(delay)
    triggers.fire(kind)


async def tick(agent: Agent) -> None:
    while True:
        await agent.clock.sleep(agent.settings.reconcile_interval)
        agent.triggers.fire("tick")


async def resync(agent: Agent) -> None:
    while True:
        jitter = 0.9 + 0.2 * agent.rng.random()  # ±10 %
        await agent.clock.sleep(agent.settings.resync_interval * jitter)
        agent.triggers.fire("resync")


async def watchdog(agent: Agent) -> None:
    while True:
        agent.health.beat = agent.clock.monotonic()
        await agent.clock.sleep(1.0)


async def work(agent: Agent) -> None:
    """Passes never overlap: one worker consumes coalesced triggers."""
    while True:
        await agent.run_pass(await agent.triggers.next_burst())


async def send_events(agent: Agent) -> None:
    await agent.events.run()


# ------------------------------------------------------------------ netlink
async def netlink(agent: Agent) -> None:
    """Every batch of kernel notifications is a trigger; a failed socket is reopened."""
    if agent.changes is None:
        return
    failures = 0
    while True:
        try:
            async for batch in agent.changes():
                failures = 0
                for change in batch:
                    kind = NETLINK_KINDS.get(change.kind, change.kind)
                    agent.metrics.netlink_events.labels(kind).inc()
                agent.triggers.fire("netlink")
        except OSError as exc:
            delay = MONITOR_BACKOFF.next_delay(failures, None, agent.rng)
            failures += 1
            log.warning(
                "netlink monitor failed (%s); reopening in %.1fs",
                exc,
                delay,
                extra=kv(node=agent.name),
            )
            await agent.clock.sleep(delay)


# ------------------------------------------------------------------ start-up
async def check_permissions(agent: Agent) -> None:
    """SelfSubjectAccessReview for every permission the loop needs; an API server that
    is not answering yet is waited for with backoff, never a reason to exit."""
    missing = []
    for verb, resource, sub, namespaced in REQUIRED_ACCESS:
        namespace = agent.settings.event_namespace if namespaced else ""
        ask = partial(agent.api.can_i, verb, resource, subresource=sub, namespace=namespace)
        allowed = await _until_answered(agent, "checking permissions", ask)
        if not allowed:
            missing.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    if missing:
        raise PreconditionError("missing permissions: " + ", ".join(missing))


async def initial_list(agent: Agent) -> None:
    """Transient errors back off; rejected credentials are fatal."""
    await _until_answered(agent, f"listing Node {agent.name}", agent.relist)


async def _until_answered(agent: Agent, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()` until the API server answers: transient errors back off (honouring
    Retry-After); rejected credentials or a refusal end the process (exit 4)."""
    failures = 0
    while True:
        try:
            return await call()
        except (UnauthorizedError, ForbiddenError) as exc:
            raise PreconditionError(f"{what} was refused: {exc.message}") from exc
        except NodeApiError as exc:
            delay = API_BACKOFF.next_delay(failures, exc.retry_after, agent.rng)
            failures += 1
            log.warning("%s failed (%s); retry in %.1fs", what, exc, delay,
                        extra=kv(node=agent.name))  # fmt: skip
            await agent.clock.sleep(delay)


async def fetch_instance_provider_id(agent: Agent) -> None:
    """Once per process, before the first pass (which then sets it with the taint
    removal); a missing or failing metadata service blocks nothing."""
    if agent.provider_ids is None or agent.settings.provider_id:
        return
    attempts = await fetch_provider_id(agent.provider_ids, agent.clock, agent.rng, agent.name)
    agent.fetched_provider_id = attempts.value


# ------------------------------------------------------------------ loop mode
async def run_loop(agent: Agent, *, check_access: bool = True) -> int:
    """Start up (netlink, access review, LIST, first pass, watch) and run until cancelled.
    Returns only for a failed precondition (exit 4)."""
    jobs: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    try:
        # The monitor first, so no address change during start-up is missed.
        jobs.append(loop.create_task(netlink(agent)))
        if check_access:
            await check_permissions(agent)
        await initial_list(agent)
        await fetch_instance_provider_id(agent)
        await agent.run_pass(["startup"])
        agent.health.first_pass = True
        agent.start_watch()
        for job in (send_events, tick, resync, watchdog):
            jobs.append(loop.create_task(job(agent)))
        await work(agent)
    except PreconditionError as exc:
        print(f"{names.AGENT}: {exc}", file=sys.stderr)
        log.error("start-up precondition failed: %s", exc, extra=kv(node=agent.name))
        return EXIT_PRECONDITION
    finally:
        for task in [*jobs, agent.watch_task, agent.retry_task]:
            if task is not None:
                task.cancel()
    return EXIT_OK


# ------------------------------------------------------------------ run-once
async def run_once(agent: Agent) -> int:
    """One full pass with bounded retries, then exit 0 or 1."""
    try:
        return await asyncio.wait_for(_once(agent), RUN_ONCE_DEADLINE)
    except TimeoutError:
        print(
            f"{names.AGENT}: run-once: no final state within {RUN_ONCE_DEADLINE:.0f}s",
            file=sys.stderr,
        )
        return EXIT_FAILED
    finally:
        if agent.retry_task is not None:
            agent.retry_task.cancel()


async def _once(agent: Agent) -> int:
    await fetch_instance_provider_id(agent)
    for attempt in range(RUN_ONCE_TRANSIENT_RETRIES + 1):
        try:
            await agent.relist()
        except NodeApiError as exc:
            agent.last_error = exc
        else:
            if agent.node is None:
                print(f"{names.AGENT}: Node {agent.name} not found", file=sys.stderr)
                return EXIT_FAILED
            agent.backoff_until = 0.0  # run-once keeps its own retry count
            await agent.run_pass(["startup"])
        if not isinstance(agent.last_error, TransientError | ConflictError):
            break
        delay = API_BACKOFF.next_delay(attempt, agent.last_error.retry_after, agent.rng)
        await agent.clock.sleep(delay)
    await agent.events.flush(5.0)
    return _verdict(agent)


def _verdict(agent: Agent) -> int:
    if agent.node is None or agent.detected is None:
        error = agent.last_error.message if agent.last_error else "Node not read"
        print(f"{names.AGENT}: run-once failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    plan = plan_addresses(agent.node, agent.detected, agent.config)
    provider_id = agent.settings.provider_id or agent.fetched_provider_id or ""
    unmet = unmet_run_once(agent.node, plan, agent.detected, agent.config, provider_id)
    for item in unmet:
        print(f"{names.AGENT}: unmet: {item}", file=sys.stderr)
    if agent.last_error is not None and unmet:
        print(f"{names.AGENT}: last error: {agent.last_error.message}", file=sys.stderr)
    return EXIT_FAILED if unmet else EXIT_OK
