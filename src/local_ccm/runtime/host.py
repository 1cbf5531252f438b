"""The process host of the central controllers: one API client per controller (its `Unit`),
one health and metrics server, one access review, one Lease, the units run side by side while
leading. No flag is read here: `Shared` is what the command line gave, typed, and the units are
built by their compositions in `local_ccm.cli`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from local_ccm.clock import Clock, SystemClock
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.kube.nodes import Access
from local_ccm.logs import kv
from local_ccm.records import dataclass
from local_ccm.runtime import process as proc
from local_ccm.runtime.access import KubeReviews, lease_permissions
from local_ccm.runtime.controller import Controller, accesses
from local_ccm.runtime.metrics import ControllerMetrics, LeaderMetrics, QueueMetrics, United
from local_ccm.runtime.metricsserver import (
    REVIEWS,
    TlsContext,
    certificate_name,
    metrics_auth,
    server_tls,
)
from local_ccm.runtime.promtext import Registry
from local_ccm.runtime.serve import Checks, Servers, start_servers
from local_ccm.runtime.worker import Worker

if TYPE_CHECKING:  # leader election is imported by the processes that elect
    from local_ccm.lease.election import ElectionConfig
    from local_ccm.lease.elector import LeaderContext, LeaderElector
    from local_ccm.lease.options import Election

# The logger the binaries' own lines ("running", "starting …") have always had.
log = logging.getLogger("local_ccm.cli")
STOP_GRACE = 10.0  # a stopping leader's last writes, then the Lease is released
METRICS_REVIEWS = tuple(Access("create", res, group) for group, res in REVIEWS)


@dataclass(frozen=True)
class Serving:
    """The health and metrics listen addresses as given, and how /metrics is protected."""

    health_address: str
    metrics_address: str
    secure: bool = False
    cert_dir: str = ""
    health_flag: str = "health-probe-bind-address"
    metrics_flag: str = "metrics-bind-address"


@dataclass(frozen=True)
class Shared:
    """The process's own settings, whichever controllers it runs, read once from the command
    line and handed to every controller's build: servers, Lease, logging, the Events'
    namespace."""

    serving: Serving
    lease: Election | None  # None: --leader-elect=false
    log_format: Literal["text", "json"]
    verbosity: int
    event_namespace: str
    ignored_klog: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # logged at start-up, not errors


@dataclass(frozen=True)
class Unit:
    """One controller, built: what it needs, what it adds to the health checks and metrics,
    and the work it does for a leadership term."""

    name: str
    client: Client
    permissions: Sequence[Access]
    registry: Registry
    work: Callable[[LeaderContext | None], Coroutine[Any, Any, None]]
    checks: Callable[[Checks, Checks], None] = lambda healthz, readyz: None
    on_leading: Callable[[bool], None] = lambda leading: None


class Runner(Protocol):
    async def run(self) -> None: ...
    def ready(self) -> tuple[bool, str]: ...


def leader_unit(
    name: str,
    client: Client,
    permissions: list[Access],
    metrics: ControllerMetrics,
    make: Callable[[Callable[[], bool]], Runner],
    *,
    check: str = "",
) -> Unit:
    """A unit that runs `make(may_write)` while leading; /readyz (as `check`, else `name`)
    asks it, a standby is ready."""
    running: list[Runner] = []

    async def work(context: LeaderContext | None) -> None:
        controller = make(context.may_write if context else lambda: True)
        running.append(controller)
        try:
            await controller.run()
        finally:
            running.remove(controller)

    def checks(healthz: Checks, readyz: Checks) -> None:
        readyz.add(check or name, lambda: running[0].ready() if running else (True, "standby"))

    return Unit(name, client, permissions, metrics.registry, work, checks)


@dataclass(frozen=True)
class Host:
    """The process around the units."""

    prog: str
    serving: Serving
    lease: Election | None  # None: --leader-elect=false
    stop: asyncio.Event
    identity: str  # the holder identity (also the Events' reporting instance)
    clock: Clock = field(default_factory=SystemClock)
    status: proc.Status = field(default_factory=proc.Status)
    tls: TlsContext | None = None
    on_running: Callable[[Servers], None] | None = None
    # unit name → the Lease of the other process that may run the same controller (the
    # standalone binary's for the manager, the manager's for a standalone binary), in this
    # process's Lease namespace: the unit starts once no one else holds it. Only with leader
    # election.
    standalone: Mapping[str, str] = field(default_factory=dict)

    def waits_for(self, unit: Unit) -> str:
        """The other process's Lease `unit` waits for before it starts, or ""."""
        if self.lease is None:
            return ""
        lease = self.standalone.get(unit.name, "")
        return "" if lease == self.lease.lease_name else lease


def election_config(lease: Election, identity: str) -> ElectionConfig:
    """The Lease timing as the elector takes it, for the holder `identity`."""
    from local_ccm.lease.election import ElectionConfig  # noqa: PLC0415

    return ElectionConfig(lease.lease_duration, lease.renew_deadline, lease.retry_period, identity)


def write_timeout_of(lease: Election | None) -> float | None:
    """How long each write of a central controller may take: with leader election the
    election's write timeout (the fence: a deposed leader's write gives up before a successor
    can hold the Lease); without, None (the client's own timeout). Every composition passes
    this to its API adapter."""
    return election_config(lease, "-").write_timeout if lease is not None else None


def identity_of(given: str, pod_name: str) -> str:
    """Verbatim, else the lower-cased POD_NAME or hostname plus a random suffix."""
    from local_ccm.lease.election import choose_identity  # noqa: PLC0415

    return choose_identity(given, pod_name, socket.gethostname(), random.SystemRandom())


def metrics_tls_of(serving: Serving) -> TlsContext | None:
    """The /metrics server's TLS context when it serves HTTPS; raises CertError."""
    if not serving.secure or serving.metrics_address in {"", "0"}:
        return None
    return server_tls(serving.cert_dir, certificate_name())


def united_registry(units: Sequence[Unit], leader: LeaderMetrics | None = None) -> United:
    """One /metrics over every unit's registry and the leader election's gauge."""
    more = [leader.registry] if leader is not None else []
    return United([*(unit.registry for unit in units), *more])


def _serve(
    host: Host, units: Sequence[Unit], leader: LeaderMetrics | None
) -> Callable[[Checks, Checks], Servers]:
    s, registry = host.serving, united_registry(units, leader)

    def serve(healthz: Checks, readyz: Checks) -> Servers:
        for unit in units:
            unit.checks(healthz, readyz)
        guard = None if host.tls is None else metrics_auth(units[0].client).check
        return start_servers(
            metrics_address=s.metrics_address, health_address=s.health_address,
            registry=registry, healthz=healthz, readyz=readyz, metrics_flag=s.metrics_flag,
            health_flag=s.health_flag, metrics_tls=host.tls, metrics_guard=guard,
        )  # fmt: skip

    return serve


def _elector(
    host: Host, units: Sequence[Unit], leader: LeaderMetrics | None
) -> LeaderElector | None:
    if host.lease is None:
        return None
    from local_ccm.lease.elector import KubeLeaseApi, LeaderElector  # noqa: PLC0415

    config = election_config(host.lease, host.identity)
    api = KubeLeaseApi(AsyncClient(units[0].client), host.lease.namespace, host.lease.lease_name,
                       timeout=config.write_timeout)  # fmt: skip

    def changed(leading: bool) -> None:
        host.status.leading = leading
        if leader is not None:
            leader.leading(leading)
        for unit in units:
            if not (leading and host.waits_for(unit)):  # told once it starts (`_unit_work`)
                unit.on_leading(leading)

    return LeaderElector(api, config, host.clock, random.Random(), on_leader_change=changed)


def _permissions(host: Host, units: Sequence[Unit]) -> list[Access]:
    wanted = [p for unit in units for p in unit.permissions]
    if host.lease is not None:
        wanted += lease_permissions(host.lease.namespace, host.lease.lease_name)
        wanted += [Access("get", "leases", "coordination.k8s.io", host.lease.namespace, lease)
                   for lease in map(host.waits_for, units) if lease]  # fmt: skip
    return sorted(set(wanted))


async def _unit_work(
    host: Host, unit: Unit, context: LeaderContext | None, leader: LeaderMetrics | None = None
) -> None:
    """The unit's work for a leadership term, once the other process's Lease is free: while
    an old Pod of the other kind still leads (a switch between the manager and the standalone
    binaries rolling out), the two would act side by side."""
    lease = host.waits_for(unit)
    if lease and host.lease is not None:
        from local_ccm.lease.elector import KubeLeaseApi, wait_until_free  # noqa: PLC0415

        api = KubeLeaseApi(AsyncClient(unit.client), host.lease.namespace, lease,
                           timeout=write_timeout_of(host.lease))  # fmt: skip

        def told(waiting: bool) -> None:
            if leader is not None:
                leader.waiting_for(unit.name, waiting)

        await wait_until_free(api, host.identity, host.clock, host.lease.retry_period, told)
        unit.on_leading(True)
    await unit.work(context)


async def run_units(host: Host, units: Sequence[Unit]) -> int:
    """The runtime's process around the units; every unit's client is closed at the end."""
    leader = None
    if host.lease is not None:
        waits = {unit.name: lease for unit in units if (lease := host.waits_for(unit))}
        leader = LeaderMetrics(host.lease.lease_name, waits)

    async def work(context: LeaderContext | None) -> None:
        if len(units) == 1:
            await _unit_work(host, units[0], context, leader)
            return
        async with asyncio.TaskGroup() as group:
            for unit in units:
                group.create_task(_unit_work(host, unit, context, leader), name=unit.name)

    def running(servers: Servers) -> None:
        log.info("running", extra=kv(identity=host.identity))
        if host.on_running is not None:
            host.on_running(servers)

    elector = _elector(host, units, leader)
    if elector is None:
        for unit in units:
            unit.on_leading(True)
    p = proc.Process(
        prog=host.prog, clock=host.clock, stop=host.stop, serve=_serve(host, units, leader),
        reviews=KubeReviews(AsyncClient(units[0].client)), permissions=_permissions(host, units),
        work=work, elector=elector, status=host.status, grace=STOP_GRACE,
        optional=METRICS_REVIEWS if host.tls is not None else (), on_running=running,
    )  # fmt: skip
    try:
        return await proc.run_process(p)
    finally:
        for unit in units:
            unit.client.close()


def kit_unit(
    client: Client,
    metrics: ControllerMetrics,
    queue: QueueMetrics,
    make: Callable[[], Controller],
    *,
    backoff: tuple[float, float],
    clock: Clock | None = None,
    workers: int = 1,
    check: str = "",
) -> Unit:
    """For each leadership term a fresh controller from `make()`, run by a `Worker` with
    `workers` workers fenced by the term's write window; the permissions the controller
    declares are what the start-up review asks; /readyz asks its `ready()` (as `check`, else
    its name)."""
    first = make()

    def worker(may_write: Callable[[], bool]) -> Worker:
        return Worker(make(), clock=clock or SystemClock(), backoff=backoff, metrics=queue,
                      may_write=may_write, workers=workers)  # fmt: skip

    return leader_unit(first.name, client, accesses(first.permissions), metrics, worker,
                       check=check)  # fmt: skip
