"""Composition root of node-ipam-controller: flags, logging, adapters, leader election, run.

Exit codes: 0 graceful stop or --help; 1 internal error; 2 invalid
flags or environment; 3 leadership lost; 4 start-up precondition failed (credentials, RBAC).
"""

from __future__ import annotations

import asyncio
import logging
import platform
import random
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from local_ccm import __version__, flags, names
from local_ccm.clock import Clock, Stopped, SystemClock, sleep_unless_stopped, unless_stopped
from local_ccm.ipam import options as opts
from local_ccm.ipam.core.model import default_pool
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.nodeapi import Access, IpamApi, KubeIpamApi, TokenBucket
from local_ccm.ipam.options import FLAGS, PROG, resolve_resource_lock_env
from local_ccm.ipam.run import Controller, Settings
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.backoff import Backoff
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig, ConfigError, resolve_config
from local_ccm.kube.errors import ApiError, Unauthorized
from local_ccm.lease.election import ElectionConfig, choose_identity
from local_ccm.lease.elector import KubeLeaseApi, LeaderContext, LeaderElector, LeadershipLost
from local_ccm.logs import configure_logging, kv
from local_ccm.runtime.metricsserver import (
    CertError,
    TlsContext,
    certificate_name,
    metrics_auth,
    server_tls,
    start_secure_servers,
    warn_without_review_access,
)
from local_ccm.runtime.serve import BindError, Checks, Servers, start_servers

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LOST, EXIT_PRECONDITION = 0, 1, 2, 3, 4
WATCHDOG = 10.0  # /healthz fails when the event loop has not run for this long
STOP_GRACE = 10.0
ACCESS_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=30.0, jitter=0.2)


class PreconditionFailed(Exception):  # noqa: N818 (names the exit condition)
    """No usable credentials or a missing permission (exit 4)."""


@dataclass(frozen=True)
class Permission:
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in namespace {self.namespace}" if self.namespace else ""
        named = f" named {self.name}" if self.name else ""
        group = self.group or "core"
        return f"{self.verb} {what} ({group}){named}{where}"


def required_permissions(options: opts.IpamOptions) -> list[Permission]:
    """The RBAC the controller needs with this configuration (what the chart ships)."""
    perms = [Permission(v, "", "nodes") for v in ("get", "list", "watch", "patch")]
    group = "networking.x-k8s.io"
    perms += [Permission(v, group, "clustercidrs") for v in ("get", "list", "watch", "patch")]
    perms.append(Permission("patch", group, "clustercidrs", "status"))
    perms += [Permission(v, "", "events", namespace=options.event_namespace) for v in ("create",)]
    if options.leader_election:
        ns, lease = options.lease_namespace, options.lease_name
        perms += [
            Permission("get", "coordination.k8s.io", "leases", namespace=ns, name=lease),
            Permission("create", "coordination.k8s.io", "leases", namespace=ns),
            Permission("update", "coordination.k8s.io", "leases", namespace=ns, name=lease),
        ]
    return perms


async def check_access(
    api: IpamApi, options: opts.IpamOptions, stop: asyncio.Event, clock: Clock, rng: random.Random
) -> bool:
    """SelfSubjectAccessReview for every required permission; exit 4 listing what is missing.
    An API server that does not answer (yet) is retried with backoff, never a reason to exit
    (a crash loop would only add load); False when `stop` was set meanwhile."""
    failures = 0
    while not stop.is_set():
        try:
            missing = [str(perm) for perm in required_permissions(options)
                       if not await _allowed(api, perm)]  # fmt: skip
        except Unauthorized as exc:
            raise PreconditionFailed(f"the API server rejected the credentials: {exc}") from exc
        except ApiError as exc:
            delay = ACCESS_BACKOFF.next_delay(failures, exc.retry_after, rng)
            failures += 1
            log.warning("checking permissions failed (%s); retry in %.1fs", exc, delay)
            await sleep_unless_stopped(clock, delay, stop)
            continue
        if missing:
            raise PreconditionFailed("missing RBAC permissions: " + "; ".join(missing))
        return True
    return False


async def _allowed(api: IpamApi, perm: Permission) -> bool:
    return await api.can_i(
        Access(perm.verb, perm.resource, perm.group, perm.namespace, perm.name, perm.subresource)
    )


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run node-ipam-controller: `argv` without the program name; returns the exit status."""
    fixed_env, warnings, problems = resolve_resource_lock_env(env)
    parsed = flags.parse(FLAGS, argv, fixed_env)
    if parsed.help_requested:
        sys.stdout.write(flags.format_usage(FLAGS))
        return EXIT_OK
    if parsed.version_requested:
        print(flags.format_version(FLAGS, platform.python_version()))
        return EXIT_OK
    loaded = opts.options_from(parsed, env, warnings=warnings, problems=problems)
    if isinstance(loaded, list):
        print(flags.usage_error(PROG, loaded), file=sys.stderr)
        return EXIT_USAGE
    configure_logging(
        fmt=loaded.log_format, verbosity=loaded.verbosity, component=names.IPAM, bound={}
    )
    for note in loaded.warnings:
        log.warning("%s", note)
    log.info("starting %s %s", names.IPAM, __version__, extra=kv(**opts.startup_fields(loaded)))
    return _run_or_explain(loaded, env)


def _run_or_explain(options: opts.IpamOptions, env: Mapping[str, str]) -> int:
    """`run`, with every failure as one line and its exit status."""
    try:
        return run(options, env, metrics_tls_of(options))
    except CertError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    except (PreconditionFailed, BindError) as exc:
        return _refused(exc)
    except Exception as exc:  # the last line of defence: one line, exit 1
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=True)
        return EXIT_FAILED


def _refused(exc: PreconditionFailed | BindError) -> int:
    """A listen flag this host cannot serve is bad input (exit 2); the rest is exit 4."""
    if isinstance(exc, BindError):
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    log.error("start-up precondition failed: %s", exc)
    return EXIT_PRECONDITION


def metrics_tls_of(options: opts.IpamOptions) -> TlsContext | None:
    """The /metrics server's TLS context when it serves HTTPS; raises CertError."""
    if not options.metrics_secure:
        return None
    return server_tls(options.metrics_cert_dir, certificate_name())


def run(options: opts.IpamOptions, env: Mapping[str, str], tls: TlsContext | None = None) -> int:
    """Build the adapters and run until a signal (0), leadership loss (3) or failure."""
    try:
        config = resolve_config(options.kubeconfig, options.apiserver, env)
    except (ConfigError, OSError, ValueError) as exc:
        raise PreconditionFailed(f"no usable credentials: {exc}") from exc
    return asyncio.run(serve(options, config, tls))


def settings_from(options: opts.IpamOptions, identity: str) -> Settings:
    pool = None
    if options.cluster_cidrs:
        pool = default_pool(options.cluster_cidrs, options.mask_v4, options.mask_v6)
    return Settings(
        event_namespace=options.event_namespace,
        concurrent_node_syncs=options.concurrent_node_syncs,
        status_interval=options.status_interval,
        default_pool=pool,
        reserved=options.reserved,
        legacy_and_terms=options.legacy_and_terms,
        reuse_delay=options.reuse_delay,
        instance=identity,
    )


def identity_of(options: opts.IpamOptions, rng: random.Random) -> str:
    """Verbatim, else lower-cased POD_NAME or hostname plus `_` and 16 hex digits."""
    return choose_identity(options.identity, options.pod_name, socket.gethostname(), rng)


@dataclass(frozen=True)
class Runtime:
    """What the leader's work is built from."""

    options: opts.IpamOptions
    api: IpamApi
    metrics: IpamMetrics
    health: Health
    identity: str
    rng: random.Random
    client: AsyncClient


async def serve(
    options: opts.IpamOptions, config: ClusterConfig, tls: TlsContext | None = None
) -> int:
    rng = random.Random()
    identity = identity_of(options, rng)
    metrics = IpamMetrics()
    client = Client(config, field_manager=names.IPAM, user_agent=f"{names.IPAM}/{__version__}")
    aclient = AsyncClient(client)
    api = KubeIpamApi(
        aclient,
        count=lambda verb, res, code: metrics.api_requests.labels(verb, res, code).inc(),
        limiter=TokenBucket(options.qps, options.burst),
    )
    health = Health()
    servers = start_http(options, metrics, health, tls=tls, client=client)
    stop = asyncio.Event()
    install_signal_handlers(stop)
    try:
        checked = await unless_stopped(check_access(api, options, stop, SystemClock(), rng), stop)
        if isinstance(checked, Stopped) or not checked:
            return EXIT_OK  # stopped before the API server answered
        if tls is not None:
            await asyncio.to_thread(warn_without_review_access, client)
        health.started = True
        return await lead(Runtime(options, api, metrics, health, identity, rng, aclient), stop)
    finally:
        servers.close()
        client.close()


class Health:
    """State the health server thread reads (plain attributes only)."""

    def __init__(self) -> None:
        self.started = False  # the start-up permission check passed
        self.controller: Controller | None = None
        self.loop_beat = time.monotonic()

    def healthz(self) -> tuple[bool, str]:
        late = time.monotonic() - self.loop_beat
        return (late < WATCHDOG, "ok" if late < WATCHDOG else f"event loop stalled {late:.0f}s")

    def readyz(self) -> tuple[bool, str]:
        if not self.started:
            return False, "starting: checking RBAC permissions"
        controller = self.controller
        if controller is None:
            return True, "standby"
        return controller.ready()


def start_http(
    options: opts.IpamOptions,
    metrics: IpamMetrics,
    health: Health,
    *,
    tls: TlsContext | None = None,
    client: Client | None = None,
) -> Servers:
    """One web server (health, readiness, metrics) unless metrics go elsewhere; with `tls` and
    `client`, metrics are HTTPS behind TokenReview/SubjectAccessReview."""
    healthz, readyz = Checks(), Checks()
    healthz.add("loop", health.healthz)
    readyz.add("controller", health.readyz)
    web = str(options.web_bind) if options.web_bind else "0"
    metrics_at = {"web": web, "off": "0"}.get(options.metrics_mode, str(options.metrics_bind))
    separate = options.metrics_mode == "separate"
    if tls is not None and client is not None and separate:
        return start_secure_servers(
            metrics_address=metrics_at, health_address=web, registry=metrics.registry,
            healthz=healthz, readyz=readyz, tls=tls, auth=metrics_auth(client),
            health_flag=options.web_flag,
        )  # fmt: skip
    return start_servers(
        metrics_address=metrics_at, health_address=web, registry=metrics.registry,
        healthz=healthz, readyz=readyz, health_flag=options.web_flag,
        metrics_flag="metrics-bind-address" if separate else options.web_flag,
    )  # fmt: skip


async def lead(rt: Runtime, stop: asyncio.Event) -> int:
    """Leader election around the controller; `stop` (set by a signal) ends everything
    gracefully."""
    beat = asyncio.ensure_future(_heartbeat(rt.health))
    clock = SystemClock()

    async def work(may_write: Callable[[], bool]) -> None:
        settings = settings_from(rt.options, rt.identity)
        controller = Controller(rt.api, settings, rt.metrics, clock, may_write=may_write)
        rt.health.controller = controller
        try:
            await controller.run()
        finally:
            rt.health.controller = None

    async def leading(context: LeaderContext) -> None:
        await work(context.may_write)

    try:
        if not rt.options.leader_election:
            rt.metrics.leader.set(1)
            return await _until_stopped(work(lambda: True), stop, None)
        elector = _elector(rt, clock)
        try:
            return await _until_stopped(elector.run(leading), stop, elector.stop)
        except LeadershipLost as exc:
            log.error("leadership lost: %s", exc)
            return EXIT_LOST
    finally:
        beat.cancel()


def _elector(rt: Runtime, clock: SystemClock) -> LeaderElector:
    options = rt.options
    config = ElectionConfig(
        options.lease_duration, options.renew_deadline, options.retry_period, rt.identity
    )
    lease_api = KubeLeaseApi(
        rt.client, options.lease_namespace, options.lease_name, timeout=config.write_timeout
    )
    return LeaderElector(lease_api, config, clock, rt.rng, on_leader_change=rt.metrics.leader.set)


async def _until_stopped(
    main: Awaitable[None], stop: asyncio.Event, graceful: Callable[[], None] | None
) -> int:
    task = asyncio.ensure_future(main)
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        stopper.cancel()
        task.result()
        return EXIT_OK
    log.info("stopping")
    if graceful is not None:
        graceful()  # the elector stops the work and releases the lease
        await asyncio.wait({task}, timeout=STOP_GRACE)
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error
    log.info("stopped")
    return EXIT_OK


async def _heartbeat(health: Health) -> None:
    while True:
        health.loop_beat = time.monotonic()
        await asyncio.sleep(1.0)


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT: graceful stop (lease released, exit 0)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
