"""`local-ccm`, the node agent: loop and run-once modes, and the `detect` subcommand.

Only this binary loads this module, so the agent's modules are imported at the top (the
controllers never load them: memory budget).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from local_ccm import names
from local_ccm.agent import options
from local_ccm.agent.api import KubeNodeApi, NodeApi
from local_ccm.agent.core.metadata import Rules
from local_ccm.agent.kernel import Kernel
from local_ccm.agent.machine import read_facts
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodemetadata import NodeMetadata
from local_ccm.agent.options import AgentOptions, ConfigResolver
from local_ccm.agent.providerid import AzureImds, ProviderIdSource
from local_ccm.agent.run import Agent, LoopSettings
from local_ccm.agent.run import permissions as agent_permissions
from local_ccm.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    guarded,
    log,
    parse_args,
    refuse,
    start_logging,
    with_signals,
)
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.kube.nodes import Access
from local_ccm.kube.transport import usable_config
from local_ccm.logs import kv
from local_ccm.runtime.access import KubeReviews
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.process import Process, run_process
from local_ccm.runtime.serve import Checks, Servers, start_servers

Mode = Callable[["AgentOptions"], int]
SHUTDOWN_GRACE = 5.0


def agent_main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    run: Mode | None = None,
    detect: Mode | None = None,
    resolve: ConfigResolver | None = None,
) -> int:
    """`local-ccm`. Tests inject argv, env, the two modes and the credentials resolver; the
    console script passes nothing."""

    env = os.environ if env is None else env
    parsed = parse_args(options.FLAGS, sys.argv[1:] if argv is None else argv, env)
    if isinstance(parsed, int):
        return parsed
    # The certificates too: an unusable CA or client key is exit 2 here, not a failed request.
    loaded = options.options_from(parsed, env, resolve=resolve or usable_config)
    if isinstance(loaded, list):
        return refuse(options.PROG, loaded)
    start_logging(
        names.AGENT,
        loaded,
        options.startup_fields(loaded),
        bound={"node": loaded.node_name or ""},
        announce=not loaded.detect,
    )  # detect mode's output is its own report
    if loaded.detect and detect is None:
        # Imported here: the report and the read-only plan are detect mode's alone, and a
        # node agent should not carry them in memory for its whole life.
        from local_ccm.cli.detect import detect_mode as detect  # noqa: PLC0415
    mode = detect if loaded.detect and detect else (run or run_agent)
    return guarded(lambda: mode(loaded), traceback=loaded.verbosity >= 4)


# ---------------------------------------------------------------- loop and run-once


def run_agent(options: AgentOptions) -> int:
    """Loop and run-once modes; the exit code."""
    try:
        if options.run_once:  # no graceful stop: a signal ends it as it would any tool
            return asyncio.run(serve_agent(options))
        return asyncio.run(with_signals(lambda stop: serve_agent(options, stop=stop)))
    except OSError as exc:
        print(f"{names.AGENT}: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def serve_agent(
    options: AgentOptions,
    *,
    stop: asyncio.Event | None = None,
    netns: str | None = None,
    on_start: Callable[[Agent], None] | None = None,
    provider_ids: ProviderIdSource | None = None,
) -> int:
    """Loop or run-once for validated `options`; `stop` ends the loop. `netns`, `on_start`
    and `provider_ids` exist for in-process tests."""
    assert options.cluster is not None
    metrics = AgentMetrics()
    agent_name = f"{names.AGENT}/{options.node_name}"
    client = Client(options.cluster, field_manager=names.AGENT, user_agent=agent_name,
                    timeout=options.api_timeout, on_response=metrics.observe_response)  # fmt: skip
    aio = AsyncClient(client)
    refused = asyncio.Event()  # the permission check runs when a request is first refused

    def observe(verb: str, resource: str, code: str, seconds: float | None) -> None:
        if code == "403":
            refused.set()

    api = KubeNodeApi(aio, observe=observe)
    agent = build_agent(options, api, metrics=metrics, netns=netns, provider_ids=provider_ids)
    try:
        if options.run_once:
            return await agent.run_once()
        announcing = None
        if options.l2 is not None:
            # Imported here: L2 announcement is off by default, and its modules are about a
            # tenth of the agent's imports, paid at every start on every node without it.
            from local_ccm.cli import announce  # noqa: PLC0415

            built = announce.build_announcing(options, aio, metrics.registry, netns=netns)
            if isinstance(built, str):
                print(f"{names.AGENT}: {built}", file=sys.stderr)
                return EXIT_FAILED
            announcing = built
        stop = stop or asyncio.Event()

        def serve(healthz: Checks, readyz: Checks) -> Servers:
            if announcing is not None:
                readyz.add("l2-announce", announcing.controller.ready)
            return start_http(options, agent, healthz, readyz)

        async def work() -> int:
            main = asyncio.create_task(serve_until(agent, stop))
            if announcing is None:
                return await main
            return await announce.run_beside(main, announcing)

        process = Process(
            prog=names.AGENT, clock=agent.clock, stop=stop, serve=serve,
            reviews=KubeReviews(aio, timeout=options.api_timeout), permissions=permissions(options),
            work=lambda _: work(), on_stop=lambda: None,
            grace=SHUTDOWN_GRACE + 1, on_running=lambda _: on_start(agent) if on_start else None,
            check_on_refusal=refused,
        )  # fmt: skip
        return await run_process(process)
    finally:
        # Closing first ends the requests still waiting in worker threads (a start-up check
        # against an API server that never answers); then those threads can be joined.
        client.close()
        await asyncio.get_running_loop().shutdown_default_executor()


def permissions(options: AgentOptions) -> list[Access]:
    found = accesses(agent_permissions(options.event_namespace))
    if options.l2 is None:
        return found
    from local_ccm.cli.announce import announce_permissions  # noqa: PLC0415 (as above)

    return found + announce_permissions(options)


async def serve_until(agent: Agent, stop: asyncio.Event) -> int:
    """Run the loop until `stop` is set: an in-flight pass may finish (bounded)."""
    loop = asyncio.get_running_loop()
    main = loop.create_task(agent.run_loop())
    stopper = loop.create_task(stop.wait())
    done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if main in done:
        stopper.cancel()
        return main.result()
    deadline = loop.time() + min(agent.settings.api_timeout, SHUTDOWN_GRACE)
    while agent.in_pass and loop.time() < deadline:
        await asyncio.sleep(0.05)
    main.cancel()
    await asyncio.gather(main, return_exceptions=True)
    log.info("stopped", extra=kv(node=agent.node_name))
    return EXIT_OK


def start_http(options: AgentOptions, agent: Agent, healthz: Checks, readyz: Checks) -> Servers:
    """/healthz, /readyz and /metrics (not ready until the first pass)."""

    healthz.add("passes", agent.health.pass_ok)
    readyz.add("first-pass", agent.health.first_pass_ok)
    readyz.add("watch", agent.health.watch_ok)
    readyz.add("writes", agent.health.writes_ok)
    return start_servers(
        metrics_address=str(options.metrics_bind or "0"),
        health_address=str(options.health_bind or "0"),
        registry=agent.metrics.registry, healthz=healthz, readyz=readyz,
    )  # fmt: skip


def build_agent(
    options: AgentOptions,
    api: NodeApi,
    *,
    metrics: AgentMetrics | None = None,
    netns: str | None = None,
    provider_ids: ProviderIdSource | None = None,
) -> Agent:
    """The agent over the real kernel; `netns` runs the netlink side in a namespace.
    `provider_ids` replaces Azure IMDS (used with --enable-azure-provider-id) in tests."""
    assert options.node_name is not None
    if provider_ids is None and options.azure_provider_id:
        provider_ids = AzureImds()
    settings = LoopSettings(
        node_name=options.node_name, reconcile_interval=options.reconcile_interval,
        resync_interval=options.resync_interval, settle_time=options.settle_time,
        api_timeout=options.api_timeout, event_namespace=options.event_namespace,
        provider_id=options.provider_id,
    )  # fmt: skip
    kernel = Kernel(options.config, netns, full_every=options.resync_interval)
    metrics = AgentMetrics() if metrics is None else metrics
    return Agent(settings, options.config, api, kernel.detect, metrics=metrics,
                 changes=kernel.changes, provider_ids=provider_ids,
                 metadata=node_metadata(options, metrics))  # fmt: skip


def node_metadata(options: AgentOptions, metrics: AgentMetrics) -> NodeMetadata | None:
    """The machine's facts are read once: they do not change while the agent runs."""
    chosen = options.metadata
    if chosen is None:
        return None
    facts = read_facts().values()
    source = chosen.rules or Rules()
    return NodeMetadata(source, facts, beta=chosen.beta_labels, metrics=metrics,
                        domains=chosen.label_domains)  # fmt: skip
