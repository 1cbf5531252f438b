"""The agent's process wiring: the kernel detector and
netlink monitor, the Node API over the kube layer, instance metadata, the HTTP servers,
signals, and the entry point the CLI calls for loop and run-once modes.

The loop itself is ``agent.loop`` (the two modes) and ``agent.reconcile`` (one pass);
its pure timing decisions are ``agent.timing`` and ``agent.passes``. Their public names are
re-exported here, where tests and tools have always imported them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence

from local_ccm import names
from local_ccm.agent.core.candidates import DetectorKey
from local_ccm.agent.core.config import ADDRESS_TYPES, FAMILIES, AgentConfig
from local_ccm.agent.core.passes import is_settle_needed, unmet_run_once
from local_ccm.agent.core.timing import API_BACKOFF, MAX_CONFLICTS, MONITOR_BACKOFF
from local_ccm.agent.loop import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PRECONDITION,
    REQUIRED_ACCESS,
    RUN_ONCE_DEADLINE,
    RUN_ONCE_TRANSIENT_RETRIES,
    Agent,
    ChangeSource,
    Detected,
    DetectFn,
    LoopSettings,
    PreconditionError,
)
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodeapi import NodeApi
from local_ccm.agent.options import AgentOptions
from local_ccm.agent.providerid import AzureImds, ProviderIdSource
from local_ccm.agent.triggers import WATCH_GRACE, Health, Triggers
from local_ccm.clock import Clock
from local_ccm.logs import kv
from local_ccm.netlink import Change
from local_ccm.runtime.serve import BindError, Checks, Servers, start_servers

__all__ = [  # the loop's names are re-exported from agent.loop, .tasks, .timing, .triggers
    "API_BACKOFF", "EXIT_FAILED", "EXIT_OK", "EXIT_PRECONDITION", "MAX_CONFLICTS",
    "MONITOR_BACKOFF", "REQUIRED_ACCESS", "RUN_ONCE_DEADLINE", "RUN_ONCE_TRANSIENT_RETRIES",
    "SHUTDOWN_GRACE", "WATCH_GRACE", "Agent", "ChangeSource", "DetectFn",
    "Detected", "Health", "LoopSettings", "PreconditionError", "Triggers", "agent_main",
    "build_agent", "detector_keys", "install_signal_handlers", "is_settle_needed",
    "kernel_changes", "kernel_detector", "kube_api", "run_agent", "serve_until",
    "settings_from", "start_http", "unmet_run_once",
]  # fmt: skip

log = logging.getLogger(__name__)
SHUTDOWN_GRACE = 5.0
EXIT_USAGE = 2  # bad input, as for a bad flag


# ------------------------------------------------------------------ process wiring
def detector_keys() -> list[DetectorKey]:
    return [(k, f) for k in ADDRESS_TYPES for f in FAMILIES]


async def serve_until(agent: Agent, stop: asyncio.Event) -> int:
    """Run the loop until ``stop`` is set: an in-flight pass may finish (bounded)."""
    loop = asyncio.get_running_loop()
    main = loop.create_task(agent.run_loop())
    stopper = loop.create_task(stop.wait())
    done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if main in done:
        stopper.cancel()
        return main.result()
    grace = min(agent.settings.api_timeout, SHUTDOWN_GRACE)
    deadline = loop.time() + grace
    while agent.in_pass and loop.time() < deadline:
        await asyncio.sleep(0.05)
    main.cancel()
    await asyncio.gather(main, return_exceptions=True)
    log.info("stopped", extra=kv(node=agent.name))
    return EXIT_OK


def install_signal_handlers(stop: asyncio.Event) -> None:
    """First SIGTERM/SIGINT: graceful stop; a second one exits at once."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(EXIT_FAILED)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def kernel_detector(config: AgentConfig, netns: str | None = None) -> DetectFn:
    """Detection in a worker thread (netlink calls block); ``netns`` is for tests."""
    from local_ccm.agent.detect import detect_addresses  # noqa: PLC0415

    async def detect() -> Detected:
        report = await asyncio.to_thread(detect_addresses, config, netns=netns)
        return report.results

    return detect


def kernel_changes(netns: str | None = None) -> ChangeSource:
    """Each call opens a netlink subscription at once and iterates it."""
    from local_ccm.netlink import Monitor  # noqa: PLC0415

    def open_changes() -> AsyncIterator[Sequence[Change]]:
        monitor = Monitor(netns=netns)

        async def iterate() -> AsyncIterator[Sequence[Change]]:
            try:
                async for batch in monitor.changes():
                    yield batch
            finally:
                monitor.close()

        return iterate()

    return open_changes


def settings_from(options: AgentOptions) -> LoopSettings:
    assert options.node_name is not None
    return LoopSettings(
        node_name=options.node_name,
        reconcile_interval=options.reconcile_interval,
        resync_interval=options.resync_interval,
        settle_time=options.settle_time,
        api_timeout=options.api_timeout,
        event_namespace=options.event_namespace,
        provider_id=options.provider_id,
    )


def build_agent(
    options: AgentOptions,
    api: NodeApi,
    *,
    metrics: AgentMetrics | None = None,
    netns: str | None = None,
    clock: Clock | None = None,
    provider_ids: ProviderIdSource | None = None,
) -> Agent:
    """The agent over the real kernel; ``netns`` runs the netlink side in a namespace.
    ``provider_ids`` replaces Azure IMDS (used with --enable-azure-provider-id) in tests."""
    if provider_ids is None and options.azure_provider_id:
        provider_ids = AzureImds()
    return Agent(
        settings_from(options),
        options.config,
        api,
        kernel_detector(options.config, netns),
        clock=clock,
        metrics=metrics,
        changes=kernel_changes(netns),
        provider_ids=provider_ids,
    )


def kube_api(options: AgentOptions, metrics: AgentMetrics) -> tuple[NodeApi, Callable[[], None]]:
    """The KubeNodeApi over the resolved credentials, and how to close it."""
    from local_ccm.agent.nodeapi import KubeNodeApi  # noqa: PLC0415
    from local_ccm.kube.aio import AsyncClient  # noqa: PLC0415
    from local_ccm.kube.client import Client  # noqa: PLC0415

    assert options.cluster is not None
    client = Client(
        options.cluster,
        field_manager=names.AGENT,
        user_agent=f"{names.AGENT}/{options.node_name}",
        timeout=options.api_timeout,
    )
    return KubeNodeApi(AsyncClient(client), observe=metrics.observe_request), client.close


def start_http(options: AgentOptions, agent: Agent) -> Servers:
    """/healthz, /readyz and /metrics (not ready until the first pass)."""
    healthz, readyz = Checks(), Checks()
    healthz.add("event-loop", agent.health.loop_ok)
    healthz.add("passes", agent.health.pass_ok)
    readyz.add("first-pass", agent.health.first_pass_ok)
    readyz.add("watch", agent.health.watch_ok)
    readyz.add("writes", agent.health.writes_ok)
    return start_servers(
        metrics_address=str(options.metrics_bind or "0"),
        health_address=str(options.health_bind or "0"),
        registry=agent.metrics.registry,
        healthz=healthz,
        readyz=readyz,
    )


async def agent_main(
    options: AgentOptions,
    *,
    stop: asyncio.Event | None = None,
    netns: str | None = None,
    on_start: Callable[[Agent], None] | None = None,
    provider_ids: ProviderIdSource | None = None,
) -> int:
    """Loop or run-once for validated ``options``. ``stop`` (default: SIGTERM/SIGINT) ends
    the loop; ``netns``, ``on_start`` and ``provider_ids`` exist for in-process tests."""
    metrics = AgentMetrics()
    api, close = kube_api(options, metrics)
    agent = build_agent(options, api, metrics=metrics, netns=netns, provider_ids=provider_ids)
    try:
        if options.run_once:
            return await agent.run_once()
        servers = start_http(options, agent)
        try:
            if stop is None:
                stop = asyncio.Event()
                install_signal_handlers(stop)
            if on_start is not None:
                on_start(agent)
            return await serve_until(agent, stop)
        finally:
            servers.close()
    finally:
        # Closing first ends the requests still waiting in worker threads (a start-up check
        # against an API server that never answers); then those threads can be joined.
        close()
        await asyncio.get_running_loop().shutdown_default_executor()


def run_agent(options: AgentOptions) -> int:
    """The CLI's entry point for loop and run-once modes; returns the exit code."""
    try:
        return asyncio.run(agent_main(options))
    except BindError as exc:  # a listen flag this host cannot serve: bad input
        print(f"{names.AGENT}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"{names.AGENT}: {exc}", file=sys.stderr)
        return EXIT_FAILED
