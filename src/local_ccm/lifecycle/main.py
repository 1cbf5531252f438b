"""Composition root of node-lifecycle-controller:
parses flags, starts logging, builds the adapters, checks the start-up preconditions and runs
the loop. Exit codes: 0 graceful stop or --help, 1 internal error, 2 invalid command line,
3 leadership lost, 4 start-up precondition failed (credentials, RBAC, no usable probe).
"""

from __future__ import annotations

import asyncio
import logging
import platform
import random
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry

from local_ccm import __version__, flags, names
from local_ccm.clock import Clock, Stopped, SystemClock, sleep_unless_stopped, unless_stopped
from local_ccm.kube import errors as ke
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.backoff import Backoff
from local_ccm.kube.client import Client
from local_ccm.kube.config import ConfigError, resolve_config
from local_ccm.lease import election
from local_ccm.lease.elector import KubeLeaseApi, LeaderContext, LeaderElector
from local_ccm.lifecycle.core.state import LoopConfig
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.nodeapi import Access, KubeNodeApi, NodeApi, required_access
from local_ccm.lifecycle.options import FLAGS, PROG, LifecycleOptions, options_from, startup_fields
from local_ccm.lifecycle.probe import (
    Capabilities,
    ProbeCapabilityError,
    Prober,
    SocketProber,
    detect_capabilities,
    require_usable,
)
from local_ccm.lifecycle.process import (
    Status,
    health_checks,
    leader_callback,
    run_controller,
    run_watchdog,
)
from local_ccm.lifecycle.run import Controller
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

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PRECONDITION = 0, 1, 2, 4
API_TIMEOUT = 15.0  # reads; writes use the election's write timeout
ACCESS_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=30.0, jitter=0.2)
WAITING = "waiting for the API server"


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run node-lifecycle-controller: `argv` without the program name; returns the exit status."""
    parsed = flags.parse(FLAGS, argv, env)
    if parsed.help_requested:
        sys.stdout.write(flags.format_usage(FLAGS))
        return EXIT_OK
    if parsed.version_requested:
        print(flags.format_version(FLAGS, platform.python_version()))
        return EXIT_OK
    loaded = options_from(parsed)
    if isinstance(loaded, list):
        print(flags.usage_error(PROG, loaded), file=sys.stderr)
        return EXIT_USAGE
    start_logging(loaded)
    try:
        tls = metrics_tls_of(loaded)
    except CertError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    try:
        return asyncio.run(_main(loaded, env, tls))
    except Exception as exc:  # the last line of defence: one line, exit 1
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=True)
        return EXIT_FAILED


async def _main(options: LifecycleOptions, env: Mapping[str, str], tls: TlsContext | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await run_lifecycle(options, env, stop=stop, metrics_tls=tls)


def metrics_tls_of(options: LifecycleOptions) -> TlsContext | None:
    """The /metrics server's TLS context when it serves HTTPS; raises CertError."""
    if not options.metrics_secure or options.metrics_bind is None:
        return None
    return server_tls(options.metrics_cert_dir, certificate_name())


def start_logging(options: LifecycleOptions) -> None:
    configure_logging(fmt=options.log_format, verbosity=options.verbosity, component=PROG, bound={})
    if options.ignored_klog:
        given = ", ".join(f"--{name}" for name in options.ignored_klog)
        log.warning("ignoring klog flags %s: logging is set by --v and --log-format", given)
    for warning in options.warnings:
        log.warning("%s", warning)
    log.info("starting %s %s", PROG, __version__, extra=kv(**startup_fields(options)))


@dataclass(frozen=True)
class Started:
    """Handed to `on_start` (in-process tests): what the running controller is made of."""

    identity: str
    metrics: LifecycleMetrics
    status: Status
    health_port: int | None
    metrics_port: int | None


async def run_lifecycle(
    options: LifecycleOptions,
    env: Mapping[str, str],
    *,
    stop: asyncio.Event,
    prober: Prober | None = None,
    clock: Clock | None = None,
    on_start: Callable[[Started], None] | None = None,
    watch_selector: str | None = None,
    wrap_api: Callable[[NodeApi], NodeApi] | None = None,
    metrics_tls: TlsContext | None = None,
) -> int:
    """Everything after flag parsing; tests call it in a thread with their own loop and may
    inject the prober (then no capability check runs) and the clock. `watch_selector`
    narrows what the watch sees (a test's own Nodes) without changing the scope rules;
    `wrap_api` wraps the real Node API adapter (e.g. to see Nodes by name); `metrics_tls` is
    made here from the options when not given."""
    clock = clock or SystemClock()
    metrics = LifecycleMetrics()
    try:
        cluster = resolve_config(options.kubeconfig, "", env)
    except ConfigError as exc:
        log.error("no usable Kubernetes credentials: %s", exc)
        return EXIT_PRECONDITION
    if prober is None:
        built = build_prober(options, metrics)
        if isinstance(built, str):
            log.error("%s", built)
            return EXIT_PRECONDITION
        prober = built
    metrics.unprobed.set(1 if options.unprobed else 0)
    status = Status(waiting=WAITING)
    healthz, readyz = health_checks(status, clock, options.interval)
    # main() has made it (a CertError there is exit 2); in-process callers get one here.
    tls = metrics_tls or metrics_tls_of(options)
    client = Client(
        cluster, field_manager=names.LIFECYCLE, user_agent=f"{PROG}/{__version__}",
        timeout=API_TIMEOUT,
    )  # fmt: skip
    try:  # listening before the first request: an API outage at start is "not ready", not dead
        servers = _start_servers(
            options, client=client, tls=tls, registry=metrics.registry, healthz=healthz,
            readyz=readyz,
        )  # fmt: skip
    except BindError as exc:  # a listen flag this host cannot serve: bad input
        client.close()
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    watchdog = asyncio.create_task(run_watchdog(status, clock), name="watchdog")
    try:
        pod_name = env.get("POD_NAME", "")
        run = Run(options, status, metrics, clock, prober, servers, stop, on_start, pod_name,
                  secure_metrics=tls is not None)  # fmt: skip
        return await _start(run, AsyncClient(client), wrap_api, watch_selector)
    finally:
        watchdog.cancel()
        client.close()
        servers.close()


def _start_servers(
    options: LifecycleOptions,
    *,
    client: Client,
    tls: TlsContext | None,
    registry: CollectorRegistry,
    healthz: Checks,
    readyz: Checks,
) -> Servers:
    """Metrics HTTPS behind TokenReview/SubjectAccessReview when `tls` is set, else plain."""
    if tls is None:
        return start_servers(
            metrics_address=options.metrics_address, health_address=options.health_address,
            registry=registry, healthz=healthz, readyz=readyz,
        )  # fmt: skip
    return start_secure_servers(
        metrics_address=options.metrics_address, health_address=options.health_address,
        registry=registry, healthz=healthz, readyz=readyz, tls=tls, auth=metrics_auth(client),
    )  # fmt: skip


@dataclass(frozen=True)
class Run:
    """What the steps after the health server are built from."""

    options: LifecycleOptions
    status: Status
    metrics: LifecycleMetrics
    clock: Clock
    prober: Prober
    servers: Servers
    stop: asyncio.Event
    on_start: Callable[[Started], None] | None
    pod_name: str  # the default identity's prefix (else the hostname)
    secure_metrics: bool = False  # /metrics behind TokenReview/SubjectAccessReview


async def _start(
    run: Run,
    aio: AsyncClient,
    wrap_api: Callable[[NodeApi], NodeApi] | None,
    watch_selector: str | None,
) -> int:
    """The permission check (retried while the API server does not answer), then the
    controller under leader election."""
    options, status = run.options, run.status
    api: NodeApi = KubeNodeApi(
        aio, write_timeout=_write_timeout(options), observe=run.metrics.observe_request
    )
    if wrap_api is not None:
        api = wrap_api(api)

    def waiting(error: str) -> None:
        status.waiting = f"{WAITING}: {error}"

    needed = _needed(options)
    problem = await unless_stopped(
        check_access(api, needed, run.stop, run.clock, on_error=waiting), run.stop
    )
    if isinstance(problem, Stopped) or run.stop.is_set():
        return EXIT_OK
    if problem is not None:
        log.error("%s", problem)
        return EXIT_PRECONDITION
    status.waiting = None
    if run.secure_metrics:
        await asyncio.to_thread(warn_without_review_access, aio.client)
    return await _serve(run, aio, api, watch_selector)


async def _serve(run: Run, aio: AsyncClient, api: NodeApi, watch_selector: str | None) -> int:
    options, status, metrics = run.options, run.status, run.metrics
    identity = election.choose_identity(
        options.election.identity, run.pod_name, socket.gethostname(), random.SystemRandom()
    )
    config = loop_config(options)
    if watch_selector is not None:
        config = replace(config, selector=watch_selector)

    def make(context: LeaderContext | None) -> Controller:
        return Controller(
            config, api, run.prober, run.clock, metrics=metrics, status=status,
            identity=identity, rng=random.Random(),
            may_write=context.may_write if context else lambda: True,
            write_timeout=context.write_timeout if context else API_TIMEOUT,
        )  # fmt: skip

    changed = leader_callback(status, metrics)
    elector = _elector(options, aio, run.clock, identity, changed)
    if elector is None:
        changed(True)
    if run.on_start is not None:
        health, scrape = run.servers.health, run.servers.metrics
        run.on_start(Started(identity, metrics, status, health.port if health else None,
                             scrape.port if scrape else None))  # fmt: skip
    log.info("running", extra=kv(identity=identity))
    return await run_controller(make, run.clock, status, elector=elector, stop=run.stop)


def loop_config(options: LifecycleOptions) -> LoopConfig:
    return LoopConfig(
        scope=options.scope,
        settings=options.settings,
        timeout=options.not_ready_timeout,
        selector=options.node_selector or None,
        event_namespace=options.event_namespace,
        out_of_service_timeout=options.out_of_service_timeout,
    )


def _election_config(options: LifecycleOptions, identity: str) -> election.ElectionConfig:
    e = options.election
    return election.ElectionConfig(e.lease_duration, e.renew_deadline, e.retry_period, identity)


def _write_timeout(options: LifecycleOptions) -> float:
    if not options.election.enabled:
        return API_TIMEOUT
    return _election_config(options, "-").write_timeout


def _elector(
    options: LifecycleOptions,
    aio: AsyncClient,
    clock: Clock,
    identity: str,
    changed: Callable[[bool], None],
) -> LeaderElector | None:
    if not options.election.enabled:
        return None
    config = _election_config(options, identity)
    lease = KubeLeaseApi(
        aio, options.election.namespace, options.election.lease_name, timeout=config.write_timeout
    )
    return LeaderElector(lease, config, clock, random.Random(), on_leader_change=changed)


def build_prober(options: LifecycleOptions, metrics: LifecycleMetrics) -> Prober | str:
    """A test socket per configured (kind, family); the problem text when none is
    usable. Unprobed mode needs no socket at all."""
    kinds = options.settings.kinds
    if not kinds:
        log.warning(
            "unprobed mode (--ping-count=0 without --probe, or --probe=none): eligible Nodes "
            "are deleted on NotReady age alone, without any reachability probe"
        )
        return SocketProber(options.probe, Capabilities(()))
    capabilities = detect_capabilities(kinds, options.settings.families, options.icmp_mode)
    for entry in capabilities.entries:
        metrics.capability.labels(entry.kind, entry.family).set(1 if entry.usable else 0)
    try:
        require_usable(capabilities)
    except ProbeCapabilityError as exc:
        return str(exc)
    return SocketProber(options.probe, capabilities)


def _needed(options: LifecycleOptions) -> tuple[Access, ...]:
    e = options.election
    return required_access(
        event_namespace=options.event_namespace,
        lease_namespace=e.namespace,
        lease_name=e.lease_name if e.enabled else None,
        out_of_service=options.settings.out_of_service_taint,
    )


async def check_access(
    api: NodeApi,
    needed: Sequence[Access],
    stop: asyncio.Event,
    clock: Clock,
    *,
    on_error: Callable[[str], None] | None = None,
) -> str | None:
    """SelfSubjectAccessReview of every permission; the problem text (exit 4) when the
    credentials are rejected or a permission is missing. Transient errors (the API server
    unreachable, hung or answering errors) are retried with backoff, indefinitely, until they
    pass or `stop` is set; each is handed to `on_error` (the /readyz reason)."""
    failures = 0
    while not stop.is_set():
        try:
            missing = [str(a) for a in needed if not await api.can_i(a)]
        except ke.Unauthorized as exc:
            return f"the Kubernetes credentials were rejected (401): {exc.message}"
        except ke.ApiError as exc:
            delay = ACCESS_BACKOFF.next_delay(failures, exc.retry_after)
            log.warning("checking permissions failed (%s); retry in %.1fs", exc, delay)
            if on_error is not None:
                on_error(str(exc))
            failures += 1
            await sleep_unless_stopped(clock, delay, stop)
            continue
        if missing:
            return "missing RBAC permissions: " + "; ".join(missing)
        return None
    return None
