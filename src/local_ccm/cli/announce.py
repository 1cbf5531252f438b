"""The agent's L2 announcement (`--l2-announce`): the Lease loop and the speaker, composed
beside the agent's own loop in the same process and event loop. Without the flag nothing of
this is built: no informer, no packet socket, no permission asked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from local_ccm.agent.options import AgentOptions, L2Options
from local_ccm.announce.api import KubeAnnounceApi
from local_ccm.announce.core.hold import Timings
from local_ccm.announce.links import InterfaceSource
from local_ccm.announce.packetsocket import capability_problem
from local_ccm.announce.run import Announcer, Settings, permissions
from local_ccm.announce.speaker import Speaker
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.informer import StreamEnd
from local_ccm.kube.nodes import Access
from local_ccm.records import dataclass
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.parts import Informers
from local_ccm.runtime.promtext import Registry
from local_ccm.runtime.worker import Worker

log = logging.getLogger("local_ccm.cli")
INTERFACE_PERIOD: Final = 5.0  # seconds between reads of the Node's interfaces
RELEASE_GRACE: Final = 2.0  # a stopping agent's Lease releases, at most


def settings_of(node: str, l2: L2Options) -> Settings:
    timings = Timings(lease_duration=l2.lease_duration, renew_deadline=l2.renew_deadline,
                      renew_period=l2.renew_period)  # fmt: skip
    return Settings(node=node, lease_namespace=l2.lease_namespace, lb_class=l2.lb_class,
                    classless=l2.classless, timings=timings)  # fmt: skip


def announce_permissions(options: AgentOptions) -> list[Access]:
    """What --l2-announce adds to the agent's start-up access review (none without it)."""
    if options.l2 is None or options.node_name is None:
        return []
    return accesses(permissions(settings_of(options.node_name, options.l2)))


@dataclass(frozen=True)
class Announcing:
    """The built L2 announcement: its controller and the worker that runs it."""

    controller: Announcer
    worker: Worker


def build_announcing(
    options: AgentOptions,
    client: AsyncClient,
    registry: Registry,
    *,
    netns: str | None = None,
    clock: Clock | None = None,
) -> Announcing | str:
    """The controller and its worker; or why the process cannot announce (no CAP_NET_RAW)."""
    assert options.l2 is not None
    assert options.node_name is not None
    if problem := capability_problem(netns=netns):
        return problem
    clock = clock or SystemClock()
    settings = settings_of(options.node_name, options.l2)
    timings = settings.timings
    api = KubeAnnounceApi(client, settings.lease_namespace,
                          write_timeout=timings.election(settings.node).write_timeout)  # fmt: skip

    def speaker(answering: Callable[[bytes], bool]) -> Speaker:
        return Speaker(answering, netns=netns, announce_at=timings.announce_at, clock=clock,
                       node=settings.node)  # fmt: skip

    def ended(name: str) -> Callable[[StreamEnd], None]:
        return lambda end: None  # the agent's watch_restarts counts its own Node's watch only

    controller = Announcer(
        api, settings, speaker, InterfaceSource(clock, INTERFACE_PERIOD, netns),
        registry=registry, clock=clock, informer=Informers(clock, None, ended).make,
    )  # fmt: skip
    return Announcing(controller, Worker(controller, clock=clock, backoff=settings.backoff))


async def run_beside(main: asyncio.Task[int], announcing: Announcing | None) -> int:
    """`main` (the agent's loop) with the announcement beside it; the announcement ending
    (it must not: a bug, or the packet socket refused) ends the process with exit 1. At the end
    the sockets close, then the Leases held are released."""
    if announcing is None:
        return await main
    beside = asyncio.create_task(announcing.worker.run(), name="l2-announce")
    try:
        done, _ = await asyncio.wait({main, beside}, return_when=asyncio.FIRST_COMPLETED)
        if main in done:
            return main.result()
        error = beside.exception() if not beside.cancelled() else None
        log.error("L2 announcement ended: %s", error or "cancelled")
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
        return 1
    finally:
        beside.cancel()
        await asyncio.gather(beside, return_exceptions=True)
        try:
            await asyncio.wait_for(announcing.controller.release_all(), RELEASE_GRACE)
        except TimeoutError:
            log.warning("releasing the address Leases took longer than %.0fs", RELEASE_GRACE)
