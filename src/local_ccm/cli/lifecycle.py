"""`node-lifecycle-controller`: the controller manager with the node-lifecycle controller alone.

Exit codes: 0 graceful stop or --help, 1 internal error, 2 invalid command line (an unusable
kubeconfig too), 3 leadership lost, 4 start-up precondition failed (credentials rejected,
RBAC). No usable probe is no exit: the controller runs not ready and deletes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from local_ccm import __version__, names
from local_ccm.cli import central
from local_ccm.cli.central import Place
from local_ccm.clock import SystemClock
from local_ccm.flags import Parsed, Problem
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.nodes import Access
from local_ccm.lease.options import Election
from local_ccm.lifecycle.api import BmcApi, KubeNodeApi, NodeApi
from local_ccm.lifecycle.core.state import LoopConfig
from local_ccm.lifecycle.health import add_checks, leader_callback
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.options import (
    FLAGS,
    PROG,
    LifecycleOptions,
    options_from,
    startup_fields,
    with_bmc,
)
from local_ccm.lifecycle.probe import (
    Capabilities,
    Prober,
    SocketProber,
    capability_report,
    detect_capabilities,
)
from local_ccm.lifecycle.run import NAME, Controller
from local_ccm.lifecycle.run import permissions as declared
from local_ccm.records import dataclass
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.host import Serving, Shared, Unit, kit_unit, write_timeout_of
from local_ccm.runtime.serve import Checks
from local_ccm.runtime.shared import Match

log = logging.getLogger("local_ccm.cli")
API_TIMEOUT = 15.0  # reads (and writes without leader election); see `write_timeout_of`
# The evaluation and the work it plans (probes, the self-check, deletion attempts) run side by
# side on these: more than the Nodes probed at once in any cluster the breaker lets through.
WORKERS = 64


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run node-lifecycle-controller: `argv` without the program name; the exit status."""
    return central.run_one(controller(), argv, env)


def controller() -> central.ControllerSpec[LifecycleOptions]:
    """The lifecycle controller's row in the controller manager's table."""
    return central.ControllerSpec(
        NAME, PROG, lambda: FLAGS, lambda parsed, env: load(parsed), shared_of,
        startup_fields, build_unit, permissions, selects=selected_nodes,
        servers=frozenset({"metrics", "metrics_secure", "health"}),
    )  # fmt: skip


def load(parsed: Parsed, *, bmc_default: bool = False) -> LifecycleOptions | list[Problem]:
    """The options; `bmc_default` is `--bmc-power-state` when not given (the manager turns it
    on when node-bmc runs too)."""
    options = options_from(parsed)
    return options if isinstance(options, list) else with_bmc(options, parsed,
                                                              default=bmc_default)  # fmt: skip


def selected_nodes(options: LifecycleOptions) -> Match | None:
    """The Nodes of a shared watch the controller sees: those of `--node-selector`, which its
    own watch asks the API server for, so both paths manage, log and probe the same Nodes."""
    selector = options.scope.selector
    if selector is None:
        return None
    return lambda node: selector.matches((node.get("metadata") or {}).get("labels") or {})


def lease_of(options: LifecycleOptions) -> Election | None:
    return options.election if options.election.enabled else None


def serving_of(options: LifecycleOptions) -> Serving:
    return Serving(options.health_address, options.metrics_address, options.metrics_secure,
                   options.metrics_cert_dir)  # fmt: skip


def shared_of(options: LifecycleOptions) -> Shared:
    """The process's settings as the lifecycle controller's flags give them (the manager's
    shared flags are this table's)."""
    return Shared(serving_of(options), lease_of(options), options.log_format, options.verbosity,
                  options.event_namespace, options.ignored_klog, options.warnings)  # fmt: skip


# ---------------------------------------------------------------- the unit


@dataclass(frozen=True)
class Parts:
    """What the lifecycle unit is made of: `build_unit`'s are the real ones; a test that
    injects a prober or narrows the watch builds its own and calls `assemble`."""

    client: Client
    api: NodeApi
    prober: Prober
    metrics: LifecycleMetrics
    config: LoopConfig
    probe_problem: str = ""  # no usable probe: /readyz `probe` fails with it
    bmcs: BmcApi | None = None  # the NodeBMCs' API (read with --bmc-power-state)


def build_unit(options: LifecycleOptions, shared: Shared, place: Place) -> Unit:
    """The lifecycle controller with its real client, API adapter and prober."""
    metrics = LifecycleMetrics()
    prober, problem = build_prober(options, metrics)
    client = client_of(place.cluster, metrics)
    api = KubeNodeApi(AsyncClient(client), write_timeout=write_timeout_of(shared.lease))
    return assemble(options, place, Parts(client, api, prober, metrics, loop_config(options),
                                          problem, bmcs=api))  # fmt: skip


def client_of(cluster: ClusterConfig, metrics: LifecycleMetrics) -> Client:
    """The controller's API client: its field manager, user agent, timeout, REST series."""
    return Client(cluster, field_manager=names.LIFECYCLE, user_agent=f"{PROG}/{__version__}",
                  timeout=API_TIMEOUT, on_response=metrics.observe_response)  # fmt: skip


def assemble(options: LifecycleOptions, place: Place, parts: Parts) -> Unit:
    """The lifecycle controller as a unit of the kit: /readyz `node-cache` is its
    controller's `ready()`, `probe` and /healthz `evaluation` are added here."""
    clock, metrics = SystemClock(), parts.metrics
    metrics.unprobed.set(1 if options.unprobed else 0)
    latest: list[Controller] = []

    def make() -> Controller:
        made = Controller(parts.config, parts.api, parts.prober, clock, metrics=metrics,
                          identity=place.identity, nodes=place.nodes,
                          bmcs=parts.bmcs)  # fmt: skip
        latest[:] = [made]
        return made

    interval = options.interval
    unit = kit_unit(parts.client, metrics, metrics.queue, make,
                    backoff=(min(1.0, interval), interval), clock=clock, workers=WORKERS,
                    check="node-cache")  # fmt: skip

    def evaluating() -> tuple[bool, str]:
        return latest[0].evaluating()  # this term's controller

    def checks(healthz: Checks, readyz: Checks) -> None:
        unit.checks(healthz, readyz)
        add_checks(healthz, readyz, evaluating=evaluating, probe_problem=parts.probe_problem)

    return replace(unit, checks=checks, on_leading=leader_callback(metrics))


def permissions(options: LifecycleOptions) -> list[Access]:
    settings = options.settings
    return accesses(declared(event_namespace=options.event_namespace,
                             out_of_service=settings.out_of_service_taint,
                             bmc=settings.bmc_power_state,
                             fencing=settings.bmc_fencing))  # fmt: skip


def loop_config(options: LifecycleOptions) -> LoopConfig:
    return LoopConfig(
        scope=options.scope,
        settings=options.settings,
        timeout=options.not_ready_timeout,
        selector=options.node_selector or None,
        event_namespace=options.event_namespace,
        out_of_service_timeout=options.out_of_service_timeout,
    )


def build_prober(options: LifecycleOptions, metrics: LifecycleMetrics) -> tuple[Prober, str]:
    """A test socket per configured (kind, family). An unusable one is one log line and the
    `probe_capability` gauge at 0; none usable is an error line and `/readyz` failing with it
    (the problem returned beside the prober). The prober then answers `error` for what it
    cannot probe: verdict unknown, never dead."""
    kinds = options.settings.kinds
    if not kinds:
        log.warning(
            "unprobed mode (--ping-count=0 without --probe, or --probe=none): eligible Nodes "
            "are deleted on NotReady age alone, without any reachability probe"
        )
        return SocketProber(options.probe, Capabilities(())), ""
    capabilities = detect_capabilities(kinds, options.settings.families, options.icmp_mode)
    for entry in capabilities.entries:
        metrics.capability.labels(entry.kind, entry.family).set(1 if entry.usable else 0)
    report = capability_report(capabilities)
    if report.blocking:
        log.error("%s", report.message)
    elif report.message:
        log.warning("%s", report.message)
    return SocketProber(options.probe, capabilities), report.message if report.blocking else ""
