"""`local-ccm-controller-manager --controllers=…`: the central controllers in one process, with
one Lease, one health and metrics server and one access review; `node-lifecycle-controller`
and `node-ipam-controller` are this path with one controller and their own flag tables.

`--controllers` reads as kube-controller-manager's: a comma list, `*` for every controller on
by default, `-name` turns one off. A controller joins with one `CONTROLLERS` entry.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry

from local_ccm import __version__, flags
from local_ccm.cli.common import (
    Host,
    Lease,
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
from local_ccm.flags import Flag, FlagSet, Parsed, Problem, unite
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig, ConfigError, resolve_config
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.resources import NODES
from local_ccm.runtime.access import Permission
from local_ccm.runtime.metricsserver import CertError, TlsContext
from local_ccm.runtime.process import EXIT_PRECONDITION, EXIT_USAGE
from local_ccm.runtime.serve import Servers
from local_ccm.runtime.shared import SharedWatch

PROG = "local-ccm-controller-manager"
Env = tuple[Mapping[str, str], Sequence[str], Sequence[Problem]]  # fixed env, warnings, problems


@dataclass(frozen=True)
class Controller:
    """One central controller: its flags, how its options load, and how it becomes a unit."""

    name: str
    prog: str  # its own binary
    flags: Callable[[], FlagSet]
    load: Callable[[Parsed, Env], Any]  # options or list[Problem]
    fields: Callable[[Any], Mapping[str, object]]  # for the start-up line
    lease: Callable[[Any], Lease | None]
    serving: Callable[[Any], Serving]
    build: Callable[[Any, ClusterConfig, str, ListWatch | None], Unit | str]
    apiserver: Callable[[Any], str] = lambda options: ""
    fix_env: Callable[[Mapping[str, str]], Env] = lambda env: (env, (), ())
    default_on: bool = True


# Each entry imports its controller when asked for, so a binary loads only its own modules.
def _lifecycle() -> Controller:
    from local_ccm.cli import lifecycle as cli  # noqa: PLC0415
    from local_ccm.lifecycle import options  # noqa: PLC0415

    return Controller(
        "node-lifecycle", options.PROG, lambda: options.FLAGS,
        lambda parsed, env: options.options_from(parsed), options.startup_fields,
        cli.lease_of, cli.serving_of, cli.build_unit,
    )  # fmt: skip


def _ipam() -> Controller:
    from local_ccm.cli import ipam as cli  # noqa: PLC0415
    from local_ccm.ipam import options  # noqa: PLC0415

    def load(parsed: Parsed, env: Env) -> Any:
        return options.options_from(parsed, env[0], warnings=env[1], problems=env[2])

    return Controller(
        "node-ipam", options.PROG, lambda: options.FLAGS, load, options.startup_fields,
        cli.lease_of, cli.serving_of, cli.build_unit, lambda opts: opts.apiserver,
        options.resolve_resource_lock_env,
    )  # fmt: skip


CONTROLLERS: Mapping[str, Callable[[], Controller]] = {
    "node-lifecycle": _lifecycle,
    "node-ipam": _ipam,
}


# ---------------------------------------------------------------- pure: flags and selection


def select(spec: str, known: Mapping[str, bool]) -> tuple[str, ...] | str:
    """The controllers `--controllers` turns on (table order), or the problem text. `known`
    maps each name to whether it is on by default."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    unknown = [i for i in items if i != "*" and i.removeprefix("-") not in known]
    if unknown:
        return f"unknown controller {unknown[0]!r}; known: {', '.join(known)}"
    chosen = tuple(
        name for name, on in known.items()
        if f"-{name}" not in items and (name in items or ("*" in items and on))
    )  # fmt: skip
    return chosen or "no controller selected"


def manager_flags() -> FlagSet:
    """The union of the controllers' tables, `--controllers`, and the manager's own Lease."""
    own = Flag("controllers", "string", "*", "Controllers to run: a comma list, * for every "
               "controller on by default, -name to turn one off; known: "
               + ", ".join(CONTROLLERS) + ".", metavar="list")  # fmt: skip
    tables = [[own], *(CONTROLLERS[name]().flags().flags for name in CONTROLLERS)]
    lease = "leader-elect-resource-name"
    united = unite(PROG, tables, version=__version__).flags
    return FlagSet(PROG, [replace(f, default=PROG) if f.name == lease else f for f in united],
                   version=__version__)  # fmt: skip


# ---------------------------------------------------------------- the binaries


def _node_watch(cluster: ClusterConfig) -> tuple[Unit, SharedWatch]:
    """One Node list and watch for every controller of the process, as a unit of its own."""
    client = Client(cluster, field_manager=PROG, user_agent=f"{PROG}/{__version__}")
    source = KubeListWatch(AsyncClient(client), NODES)
    shared = SharedWatch(source, SystemClock(), random.Random(), "nodes")
    needed = [Permission("list", "nodes"), Permission("watch", "nodes")]
    return Unit("node-watch", client, needed, CollectorRegistry(), shared.run), shared


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run local-ccm-controller-manager."""
    return run_main(PROG, argv, env, None)


def run_main(
    prog: str,
    argv: Sequence[str] | None,
    env: Mapping[str, str] | None,
    only: tuple[str, ...] | None,
) -> int:
    """The controllers `only` names with their binary's own flags, else the manager's."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    table = CONTROLLERS[only[0]]().flags() if only else manager_flags()
    fixed = _fix_env(env, only or tuple(CONTROLLERS))
    parsed = parse_args(table, argv, fixed[0])
    if isinstance(parsed, int):
        return parsed
    names = only or select(parsed.get_str("controllers"),
                           {n: CONTROLLERS[n]().default_on for n in CONTROLLERS})  # fmt: skip
    if isinstance(names, str):
        return refuse(prog, [flags.invalid("controllers", names)])
    loaded = _load(parsed, fixed, [CONTROLLERS[name]() for name in names])
    if isinstance(loaded, list):
        return refuse(prog, loaded)
    first = loaded[0][1]
    fields = {k: v for c, o in loaded for k, v in c.fields(o).items()}
    start_logging(prog, first, {**({} if only else {"controllers": ",".join(names)}), **fields})
    return guarded(lambda: _run(prog, env, loaded))


def _fix_env(env: Mapping[str, str], names: Sequence[str]) -> Env:
    warnings: list[str] = []
    problems: list[Problem] = []
    for name in names:
        env, more_warnings, more_problems = CONTROLLERS[name]().fix_env(env)
        warnings += more_warnings
        problems += more_problems
    return env, warnings, problems


def _load(parsed: Parsed, env: Env, chosen: Sequence[Controller]) -> Any:
    """((controller, options), …) or the list of every problem (each once)."""
    loaded, problems = [], {}
    for controller in chosen:
        options = controller.load(parsed, env)
        if isinstance(options, list):
            problems.update({str(p): p for p in options})
        else:
            loaded.append((controller, options))
    return list(problems.values()) if problems else tuple(loaded)


def _run(prog: str, env: Mapping[str, str], loaded: Sequence[tuple[Controller, Any]]) -> int:
    return asyncio.run(with_signals(lambda stop: run_loaded(prog, env, loaded, stop)))


async def run_loaded(
    prog: str,
    env: Mapping[str, str],
    loaded: Sequence[tuple[Controller, Any]],
    stop: asyncio.Event,
    *,
    tls: TlsContext | None = None,
    on_running: Callable[[Servers], None] | None = None,
) -> int:
    """The loaded controllers in the process runtime; the first one's options give the
    credentials, the Lease and the servers (`tls` is made from them when not given)."""
    controller, options = loaded[0]
    serving, lease = controller.serving(options), controller.lease(options)
    try:
        tls = tls or metrics_tls_of(serving)
        cluster = resolve_config(options.kubeconfig, controller.apiserver(options), env)
    except CertError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    except (ConfigError, OSError, ValueError) as exc:
        log.error("start-up precondition failed: no usable credentials: %s", exc)
        return EXIT_PRECONDITION
    identity = identity_of(lease.identity if lease else "", env.get("POD_NAME", ""))
    shared = _node_watch(cluster) if len(loaded) > 1 else None
    nodes = shared[1].view() if shared else None
    units = [c.build(options, cluster, identity, nodes) for c, options in loaded]
    units += [shared[0]] if shared else []
    for unit in units:
        if isinstance(unit, str):
            log.error("%s", unit)
            return EXIT_PRECONDITION
    host = Host(prog, serving, lease, stop, identity, tls=tls, on_running=on_running)
    return await run_units(host, [u for u in units if not isinstance(u, str)])
