"""The central controllers' one path from flags to running units, for
`local-ccm-controller-manager` and the two binaries that run one controller each (`run_one`: the
same path with a one-row table and the binary's own flags): flags to options per controller
(`ControllerSpec[Opts]`, typed by its options), the process's `Shared` settings once, then the
process host (`runtime.host`) with one unit per controller (and one shared Node watch when there
are several).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from local_ccm import __version__, flags
from local_ccm.cli.common import (
    guarded,
    parse_args,
    refuse,
    start_logging,
    with_signals,
)
from local_ccm.clock import SystemClock
from local_ccm.flags import FlagSet, Parsed, Problem
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig, ConfigError, check_server
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.nodes import Access
from local_ccm.kube.resources import NODES
from local_ccm.kube.transport import usable_config
from local_ccm.lease.options import wait_flag, waited_leases
from local_ccm.records import dataclass
from local_ccm.runtime.host import (
    Host,
    Shared,
    Unit,
    identity_of,
    log,
    metrics_tls_of,
    run_units,
)
from local_ccm.runtime.metrics import ControllerMetrics, Metrics
from local_ccm.runtime.metricsserver import CertError
from local_ccm.runtime.process import EXIT_PRECONDITION, EXIT_USAGE
from local_ccm.runtime.serve import Servers
from local_ccm.runtime.shared import Match, SharedWatch

if TYPE_CHECKING:
    from local_ccm.kube.loopclient import LoopClient

MANAGER = "local-ccm-controller-manager"
Env = tuple[Mapping[str, str], Sequence[str], Sequence[Problem]]  # fixed env, warnings, problems
Opts = TypeVar("Opts")


@dataclass(frozen=True)
class Place:
    """Where a controller's unit runs: the cluster, the holder identity (also the Events'
    reporting instance), and the process's shared Node watch (None: the unit watches its own)."""

    cluster: ClusterConfig
    identity: str
    nodes: ListWatch | None = None


def every_node(options: object) -> None:
    """A controller that sees every Node of a shared watch."""


def env_as_is(env: Mapping[str, str]) -> Env:
    """A controller that reads its environment variables as they are."""
    return env, (), ()


@dataclass(frozen=True)
class ControllerSpec(Generic[Opts]):
    """One central controller, typed by its options `Opts`: its flags, how its options load, the
    process settings they give when it is the process's first controller, its start-up line,
    how it becomes a unit, and the RBAC it needs. mypy checks every function of a row against
    the one `Opts`."""

    name: str
    prog: str  # its own binary
    flags: Callable[[], FlagSet]
    load: Callable[[Parsed, Env], Opts | list[Problem]]
    shared: Callable[[Opts], Shared]
    fields: Callable[[Opts], Mapping[str, object]]  # for the start-up line
    build: Callable[[Opts, Shared, Place], Unit | str]  # str: a start-up precondition failed
    permissions: Callable[[Opts], list[Access]]
    # Which objects of the shared Node watch it sees (None: all), as its own watch would
    # select them on the API server.
    selects: Callable[[Opts], Match | None] = every_node
    servers: frozenset[str] = frozenset()  # its `fields` about its own listen addresses
    fix_env: Callable[[Mapping[str, str]], Env] = env_as_is
    default_on: bool = True

    def bind(self, parsed: Parsed, env: Env) -> Loaded[Opts] | list[Problem]:
        """Its options loaded and bound to it, or their problems."""
        options = self.load(parsed, env)
        if isinstance(options, list):
            return options
        return Loaded(self, options)


@dataclass(frozen=True)
class Loaded(Generic[Opts]):
    """A controller with its options: what the path asks of it, whatever its `Opts`."""

    spec: ControllerSpec[Opts]
    options: Opts

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def servers(self) -> frozenset[str]:
        return self.spec.servers

    def shared(self) -> Shared:
        return self.spec.shared(self.options)

    def fields(self) -> Mapping[str, object]:
        return self.spec.fields(self.options)

    def selects(self) -> Match | None:
        return self.spec.selects(self.options)

    def build(self, shared: Shared, place: Place) -> Unit | str:
        return self.spec.build(self.options, shared, place)


class Bound(Protocol):
    """A loaded controller of any options type (`Loaded[Opts]` for every `Opts`)."""

    @property
    def name(self) -> str: ...
    @property
    def servers(self) -> frozenset[str]: ...
    def shared(self) -> Shared: ...
    def fields(self) -> Mapping[str, object]: ...
    def selects(self) -> Match | None: ...
    def build(self, shared: Shared, place: Place) -> Unit | str: ...


class Row(Protocol):
    """A row of a binary's controller table (`ControllerSpec[Opts]` for every `Opts`)."""

    @property
    def name(self) -> str: ...
    @property
    def prog(self) -> str: ...
    @property
    def default_on(self) -> bool: ...
    @property
    def flags(self) -> Callable[[], FlagSet]: ...
    @property
    def fix_env(self) -> Callable[[Mapping[str, str]], Env]: ...
    def bind(self, parsed: Parsed, env: Env) -> Bound | list[Problem]: ...


MANAGER_LEASE = "controller-manager-lease"


def single_flags(spec: Row) -> FlagSet:
    """A single-controller binary's flags: its controller's, and the manager's Lease it waits
    for (`--controller-manager-lease`; the manager waits for this binary's Lease the same way)."""
    table = spec.flags()
    wait = wait_flag(MANAGER_LEASE, "", f"The Lease of {MANAGER} (in "
                     "--leader-elect-resource-namespace): this controller starts only once no "
                     "one holds it, so the two never act side by side while a switch from the "
                     "manager rolls out. Empty (the default): start at once. Set it only where "
                     "the manager, when it runs, runs this controller too.")  # fmt: skip
    return replace(table, flags=(*table.flags, wait))


def run_one(spec: Row, argv: Sequence[str] | None, env: Mapping[str, str] | None) -> int:
    """A single-controller binary: the manager's path with a one-row table, its own flags."""
    waits = {spec.name: MANAGER_LEASE}
    return run_main(spec.prog, argv, env, [spec], table=single_flags(spec),
                    choose=lambda parsed: (spec.name,),
                    standalone=lambda parsed: waited_leases(parsed, waits))  # fmt: skip


def run_main(
    prog: str,
    argv: Sequence[str] | None,
    env: Mapping[str, str] | None,
    known: Sequence[Row],
    *,
    table: FlagSet,
    choose: Callable[[Parsed], tuple[str, ...] | list[str]],
    standalone: Callable[[Parsed], Mapping[str, str] | list[Problem]] = lambda parsed: {},
) -> int:
    """The binary `prog`: parse `table`, run the `known` controllers `choose` names;
    `standalone` names the Lease each controller's standalone binary holds, which it waits
    for (`Host.standalone`)."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    fixed = fix_env(env, known)
    parsed = parse_args(table, argv, fixed[0])
    if isinstance(parsed, int):
        return parsed
    loaded = load(parsed, fixed, known, choose(parsed))
    cluster = credentials(parsed, env)  # its problem is listed with the flags' ones
    problems = loaded if isinstance(loaded, list) else serving_problems(loaded[0].shared())
    held = standalone(parsed)
    problems = [*problems, *(held if isinstance(held, list) else [])]
    if isinstance(loaded, list) or isinstance(held, list) or isinstance(cluster, Problem) \
            or problems:  # fmt: skip
        return refuse(prog, [*problems, *([cluster] if isinstance(cluster, Problem) else [])])
    shared = loaded[0].shared()  # the process's settings: its first controller's options
    fields = start_fields(loaded)
    chosen = {} if len(known) == 1 else {"controllers": ",".join(c.name for c in loaded)}
    start_logging(prog, shared, {**chosen, **fields})
    return guarded(lambda: asyncio.run(
        with_signals(lambda stop: run_loaded(prog, env, loaded, shared=shared, cluster=cluster,
                                               stop=stop, standalone=held))
    ))  # fmt: skip


def start_fields(loaded: Sequence[Bound]) -> dict[str, object]:
    """The start-up line's settings: every controller's, each key once (the first one's),
    and only the listen addresses of the servers the process runs, its first controller's."""
    first, *others = loaded
    fields = dict(first.fields())
    for controller in others:
        unseen = {k: v for k, v in controller.fields().items() if k not in fields}
        fields.update({k: v for k, v in unseen.items() if k not in controller.servers})
    return fields


def fix_env(env: Mapping[str, str], known: Sequence[Row]) -> Env:
    """The environment as every controller's `fix_env` rewrites it, with their warnings and
    problems."""
    warnings: list[str] = []
    problems: list[Problem] = []
    for controller in known:
        env, more_warnings, more_problems = controller.fix_env(env)
        warnings += more_warnings
        problems += more_problems
    return env, warnings, problems


def load(
    parsed: Parsed, env: Env, known: Sequence[Row], chosen: tuple[str, ...] | list[str]
) -> tuple[Bound, ...] | list[Problem]:
    """The `chosen` controllers with their options, or every problem, each once:
    the selection's (`chosen` as problem texts), the chosen controllers', and those of the
    others about a flag or variable that is set, which must be valid whether or not its
    controller runs."""
    names = chosen if isinstance(chosen, tuple) else ()
    found = [] if isinstance(chosen, tuple) else [flags.invalid("controllers", t) for t in chosen]
    loaded: list[Bound] = []
    for controller in known:
        options = controller.bind(parsed, env)
        if not isinstance(options, list):
            loaded += [options] if controller.name in names else []
        elif controller.name in names:
            found += options
        else:
            found += [p for p in options if parsed.about_given(p)]
    return list({str(p): p for p in found}.values()) or tuple(loaded)


def serving_problems(shared: Shared) -> list[Problem]:
    """The /metrics certificate's problem, if `--metrics-cert-dir` names files that do not load:
    listed with the flags' problems, before start-up (the servers load them again)."""
    try:
        metrics_tls_of(shared.serving)
    except CertError as exc:
        return [flags.invalid(None, str(exc))]
    return []


def credentials(parsed: Parsed, env: Mapping[str, str]) -> ClusterConfig | Problem:
    """The cluster `--kubeconfig` (and `--apiserver`, where the table has it) name, its
    certificates loaded; else the problem: exit 2 like any invalid input, since the files are
    the command line's and no API server was asked yet."""
    kubeconfig = parsed.get_str("kubeconfig")
    apiserver = parsed.get_str("apiserver") if "apiserver" in parsed.values else ""
    if apiserver:
        try:
            check_server(apiserver)
        except ConfigError as exc:
            return flags.blame(parsed, "apiserver", str(exc))
    try:
        return usable_config(kubeconfig, apiserver, env)
    except ConfigError as exc:
        detail = str(exc).removeprefix("no Kubernetes configuration: ")
    if kubeconfig:
        return flags.blame(parsed, "kubeconfig", detail)
    return flags.invalid(None, f"no Kubernetes credentials: {detail}")


async def run_loaded(
    prog: str,
    env: Mapping[str, str],
    loaded: Sequence[Bound],
    *,
    shared: Shared,
    cluster: ClusterConfig,
    stop: asyncio.Event,
    on_running: Callable[[Servers], None] | None = None,
    standalone: Mapping[str, str] | None = None,
) -> int:
    """The loaded controllers in the process host, on `cluster`, with the process's `shared`
    settings (the Lease and the servers)."""
    try:
        tls = metrics_tls_of(shared.serving)
    except CertError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    lease = shared.lease
    identity = identity_of(lease.identity if lease else "", env.get("POD_NAME", ""))
    watch = _node_watch(cluster) if len(loaded) > 1 else None
    units = [c.build(shared, Place(cluster, identity, watch[1].view(c.selects()) if watch
                                   else None)) for c in loaded]  # fmt: skip
    units += [watch[0]] if watch else []
    for unit in units:
        if isinstance(unit, str):
            log.error("%s", unit)
            return EXIT_PRECONDITION
    host = Host(prog, shared.serving, lease, stop, identity, tls=tls, on_running=on_running,
                standalone=standalone or {})  # fmt: skip
    return await run_units(host, [u for u in units if not isinstance(u, str)])


def _node_watch(cluster: ClusterConfig) -> tuple[Unit, SharedWatch]:
    """One Node list and watch for every controller of the process, as a unit of its own."""
    metrics = Metrics()  # the REST client's series of the shared watch
    client = Client(cluster, field_manager=MANAGER, user_agent=f"{MANAGER}/{__version__}",
                    on_response=metrics.observe_response)  # fmt: skip
    source = KubeListWatch(AsyncClient(client), NODES)
    shared = SharedWatch(source, SystemClock(), random.Random(), "nodes")
    needed = [Access("list", "nodes"), Access("watch", "nodes")]
    return Unit("node-watch", client, needed, metrics.registry, shared.run), shared


def client_of(cluster: ClusterConfig, name: str, metrics: ControllerMetrics) -> Client:
    """The controller's own API client: its field manager and user agent, its REST series."""
    return Client(cluster, field_manager=name, user_agent=f"{name}/{__version__}",
                  on_response=metrics.observe_response)  # fmt: skip


def loop_client_of(cluster: ClusterConfig, name: str, metrics: ControllerMetrics) -> LoopClient:
    """The same on the event loop, for a controller's requests and watches: no thread hand-off
    per request or watch event, and as many requests in flight as its workers (node-ipam,
    service-lb-ipam; docs/benchmarks.md). The blocking client serves the rest (access
    review, Lease). Imported here: the lifecycle, CSR and BMC controllers never load it
    (about 0.1 MiB of code per process)."""
    from local_ccm.kube.loopclient import LoopClient  # noqa: PLC0415

    return LoopClient(cluster, field_manager=name, user_agent=f"{name}/{__version__}",
                      on_response=metrics.observe_response)  # fmt: skip
