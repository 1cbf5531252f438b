"""The central controllers' path, for `local-ccm-controller-manager` and the two binaries that
run one controller each: flags to options per controller, then the process runtime with one
unit per controller (and one shared Node watch when there are several).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from local_ccm import __version__, flags
from local_ccm.cli.common import (
    Host,
    Serving,
    Unit,
    guarded,
    identity_of,
    log,
    metrics_tls_of,
    parse_args,
    refuse,
    run_units,
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
from local_ccm.lease.options import Election
from local_ccm.records import dataclass
from local_ccm.runtime.metrics import Metrics
from local_ccm.runtime.metricsserver import CertError
from local_ccm.runtime.process import EXIT_PRECONDITION, EXIT_USAGE
from local_ccm.runtime.serve import Servers
from local_ccm.runtime.shared import Match, SharedWatch

MANAGER = "local-ccm-controller-manager"
Env = tuple[Mapping[str, str], Sequence[str], Sequence[Problem]]  # fixed env, warnings, problems


@dataclass(frozen=True)
class Controller:
    """One central controller: its flags, how its options load, and how it becomes a unit."""

    name: str
    prog: str  # its own binary
    flags: Callable[[], FlagSet]
    load: Callable[[Parsed, Env], Any]  # options or list[Problem]
    fields: Callable[[Any], Mapping[str, object]]  # for the start-up line
    lease: Callable[[Any], Election | None]  # None: --leader-elect=false
    serving: Callable[[Any], Serving]
    build: Callable[[Any, ClusterConfig, str, ListWatch | None], Unit | str]
    # Which objects of the shared Node watch it sees (None: all), as its own watch would
    # select them on the API server.
    selects: Callable[[Any], Match | None] = lambda options: None
    servers: frozenset[str] = frozenset()  # its `fields` about its own listen addresses
    fix_env: Callable[[Mapping[str, str]], Env] = lambda env: (env, (), ())
    default_on: bool = True


def run_main(
    prog: str,
    argv: Sequence[str] | None,
    env: Mapping[str, str] | None,
    known: Sequence[Controller],
    *,
    table: FlagSet,
    choose: Callable[[Parsed], tuple[str, ...] | list[str]],
) -> int:
    """The binary `prog`: parse `table`, run the `known` controllers `choose` names."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    fixed = fix_env(env, known)
    parsed = parse_args(table, argv, fixed[0])
    if isinstance(parsed, int):
        return parsed
    loaded = load(parsed, fixed, known, choose(parsed))
    if isinstance(loaded, list):
        return refuse(prog, loaded)
    cluster = credentials(parsed, env)
    if isinstance(cluster, Problem):
        return refuse(prog, [cluster])
    first = loaded[0][1]
    fields = start_fields(loaded)
    chosen = {} if len(known) == 1 else {"controllers": ",".join(c.name for c, _ in loaded)}
    start_logging(prog, first, {**chosen, **fields})
    return guarded(lambda: asyncio.run(
        with_signals(lambda stop: run_loaded(prog, env, loaded, cluster, stop))
    ))  # fmt: skip


def start_fields(loaded: Sequence[tuple[Controller, Any]]) -> dict[str, object]:
    """The start-up line's settings: every controller's, each key once (the first one's),
    and only the listen addresses of the servers the process runs, its first controller's."""
    (first, options), *others = loaded
    fields = dict(first.fields(options))
    for controller, more in others:
        unseen = {k: v for k, v in controller.fields(more).items() if k not in fields}
        fields.update({k: v for k, v in unseen.items() if k not in controller.servers})
    return fields


def fix_env(env: Mapping[str, str], known: Sequence[Controller]) -> Env:
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
    parsed: Parsed, env: Env, known: Sequence[Controller], chosen: tuple[str, ...] | list[str]
) -> tuple[tuple[Controller, Any], ...] | list[Problem]:
    """((controller, options), …) of the `chosen` controllers, or every problem, each once:
    the selection's (`chosen` as problem texts), the chosen controllers', and those of the
    others about a flag or variable that is set, which must be valid whether or not its
    controller runs."""
    names = chosen if isinstance(chosen, tuple) else ()
    found = [] if isinstance(chosen, tuple) else [flags.invalid("controllers", t) for t in chosen]
    loaded = []
    for controller in known:
        options = controller.load(parsed, env)
        if not isinstance(options, list):
            loaded += [(controller, options)] if controller.name in names else []
        elif controller.name in names:
            found += options
        else:
            found += [p for p in options if parsed.about_given(p)]
    return list({str(p): p for p in found}.values()) or tuple(loaded)


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
    loaded: Sequence[tuple[Controller, Any]],
    cluster: ClusterConfig,
    stop: asyncio.Event,
    *,
    on_running: Callable[[Servers], None] | None = None,
) -> int:
    """The loaded controllers in the process runtime, on `cluster`; the first one's options
    give the Lease and the servers."""
    controller, options = loaded[0]
    serving, lease = controller.serving(options), controller.lease(options)
    try:
        tls = metrics_tls_of(serving)
    except CertError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    identity = identity_of(lease.identity if lease else "", env.get("POD_NAME", ""))
    shared = _node_watch(cluster) if len(loaded) > 1 else None
    units = [c.build(options, cluster, identity, shared[1].view(c.selects(options)) if shared
                     else None) for c, options in loaded]  # fmt: skip
    units += [shared[0]] if shared else []
    for unit in units:
        if isinstance(unit, str):
            log.error("%s", unit)
            return EXIT_PRECONDITION
    host = Host(prog, serving, lease, stop, identity, tls=tls, on_running=on_running)
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
