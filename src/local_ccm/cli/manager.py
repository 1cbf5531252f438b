"""`local-ccm-controller-manager --controllers=…`: the central controllers in one process, on
the path of `local_ccm.cli.central`.

`--controllers` reads as kube-controller-manager's: a comma list (given twice, the lists add
up), `*` for every controller on by default, `-name` turns one off. A controller joins with one
`CONTROLLERS` entry.

One process, one set of servers: /healthz and /readyz on `--health-probe-bind-address`
(:8091), /metrics on `--metrics-bind-address` (:8090), whichever controllers run.
node-ipam-controller's own web-server flags (`--webserver-bind-address`, `--health-probe-address`,
:8081) are deprecated aliases of `--health-probe-bind-address` here; the node-ipam-controller
binary keeps them as upstream has them. `--help` lists the process's flags, then each
controller's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from local_ccm import __version__
from local_ccm.bmc.options import NAME as BMC
from local_ccm.bmc.options import POLL_FLAG
from local_ccm.cli import bmc, central, csr, ipam, lbipam, lifecycle
from local_ccm.cli.central import MANAGER, Row, run_main
from local_ccm.flags import Flag, FlagSet, Loader, Parsed, Problem, unite
from local_ccm.flags.groups import by_owner
from local_ccm.gosyntax import format_go_duration
from local_ccm.lease.options import wait_flag, waited_leases
from local_ccm.lifecycle.core.bmc import CONTACT_REFRESH_NOT_READY
from local_ccm.lifecycle.options import LifecycleOptions

PROG = MANAGER
HEALTH = "health-probe-bind-address"
#: node-ipam-controller's web server flags (upstream's); in the manager, aliases of HEALTH.
IPAM_WEB_FLAGS = ("webserver-bind-address", "health-probe-address")
GENERAL = "Process flags (every controller: credentials, logging, servers, leader election)"
#: Read once for the whole process although one controller's table declares them.
PROCESS = (HEALTH, "apiserver")


def lifecycle_row() -> central.ControllerSpec[LifecycleOptions]:
    """node-lifecycle as the manager runs it: reading NodeBMCs (`--bmc-power-state`) unless
    told not to when node-bmc runs in the same process, and with a `--bmc-max-age` that
    node-bmc's polls can keep fresh."""
    row = lifecycle.controller()

    def load(parsed: Parsed, env: central.Env) -> LifecycleOptions | list[Problem]:
        chosen = select(parsed.get_str("controllers"), {n: CONTROLLERS[n]().default_on
                                                         for n in CONTROLLERS})  # fmt: skip
        together = isinstance(chosen, tuple) and BMC in chosen
        options = lifecycle.load(parsed, bmc_default=together)
        if isinstance(options, list) or not together or not options.settings.bmc_power_state:
            return options
        return _fresh_enough(options, parsed)

    return replace(row, load=load)


def _fresh_enough(options: LifecycleOptions, parsed: Parsed) -> LifecycleOptions | list[Problem]:
    """node-bmc writes the NodeBMC of a Node that is not Ready at least every 30 s, on a poll:
    a reading may be that plus one poll (and its 10 % jitter) old."""
    read = Loader(parsed)
    oldest = CONTACT_REFRESH_NOT_READY + 1.1 * float(read(POLL_FLAG))
    if options.settings.bmc_max_age < oldest:
        read.reject("bmc-max-age", f"must be at least {format_go_duration(oldest)} (30s + "
                    f"--{POLL_FLAG} + 10 %): a fresh NodeBMC may be that old")  # fmt: skip
    return read.result(options)


#: The Lease each controller's standalone binary holds by default, and the flag naming it here.
STANDALONE = {
    "node-lifecycle": ("node-lifecycle-standalone-lease", "node-lifecycle-controller"),
    "node-ipam": ("node-ipam-standalone-lease", "node-ipam-controller"),
}

CONTROLLERS: Mapping[str, Callable[[], Row]] = {
    "node-lifecycle": lifecycle_row,
    "node-ipam": ipam.controller,
    "kubelet-serving-approver": csr.controller,
    "service-lb-ipam": lbipam.controller,
    "node-bmc": bmc.controller,
}


# ---------------------------------------------------------------- pure: flags and selection


def select(spec: str, known: Mapping[str, bool]) -> tuple[str, ...] | list[str]:
    """The controllers `--controllers` turns on (table order), or every problem's text. `known`
    maps each name to whether it is on by default."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    unknown = [i.removeprefix("-") for i in items if i != "*" and i.removeprefix("-") not in known]
    if unknown:
        return [f"unknown controller {name!r}; known: {', '.join(known)}" for name in unknown]
    chosen = tuple(name for name, on in known.items() if is_enabled(name, on, items))
    return chosen or ["no controller selected"]


def is_enabled(name: str, on_by_default: bool, items: Sequence[str]) -> bool:
    """kube-controller-manager's rule: the first item naming the controller (`name` or
    `-name`) decides; without one, `*` turns on those on by default."""
    for item in items:
        if item in (name, f"-{name}"):
            return item == name
    return "*" in items and on_by_default


def standalone_flags() -> list[Flag]:
    """The Leases of the standalone binaries the manager waits for (`Host.standalone`)."""
    return [
        wait_flag(flag, lease, f"The Lease {lease} holds when it runs alone, in "
                  f"--leader-elect-resource-namespace: {name} starts only once no one else "
                  "holds it, so the two never act side by side while a switch to this manager "
                  "rolls out. Empty: start at once.")
        for name, (flag, lease) in STANDALONE.items()
    ]  # fmt: skip


def standalone_leases(parsed: Parsed) -> dict[str, str] | list[Problem]:
    """Controller name → the standalone Lease it waits for (empty: none), or every problem."""
    return waited_leases(parsed, {name: flag for name, (flag, _) in STANDALONE.items()})


def manager_flags() -> FlagSet:
    """The union of the controllers' tables, `--controllers`, the standalone Leases, the
    manager's own Lease and one health-probe flag; `--help` in sections: the process's flags,
    then each controller's."""
    own = [Flag("controllers", "string", "*", "Controllers to run: a comma list (repeats add "
                "up), * for every controller on by default, -name to turn one off; known: "
                + ", ".join(CONTROLLERS) + ".", metavar="list", accumulates=True),
           *standalone_flags()]  # fmt: skip
    owned = [(f"{name} flags", CONTROLLERS[name]().flags().flags) for name in CONTROLLERS]
    united = unite(PROG, [own, *(table for _, table in owned)], version=__version__).flags
    flags = [_manager_flag(f) for f in united if f.name not in IPAM_WEB_FLAGS]
    names = {f.name for f in flags}
    sections = [replace(s, names=tuple(n for n in s.names if n in names))
                for s in by_owner(GENERAL, own, owned, process=PROCESS)]  # fmt: skip
    return FlagSet(PROG, flags, version=__version__, sections=tuple(sections))


def _manager_flag(flag: Flag) -> Flag:
    if flag.name == "leader-elect-resource-name":
        return replace(flag, default=PROG)
    if flag.name == HEALTH:
        return replace(flag, aliases=(*flag.aliases, *IPAM_WEB_FLAGS), help=(
            "Address of /healthz and /readyz of every controller; 0 disables. "
            "node-ipam-controller's -webserver-bind-address and -health-probe-address are "
            "deprecated aliases here."))  # fmt: skip
    return flag


# ---------------------------------------------------------------- the binary


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run local-ccm-controller-manager."""
    known: list[Row] = [make() for make in CONTROLLERS.values()]
    defaults = {c.name: c.default_on for c in known}

    def choose(parsed: Parsed) -> tuple[str, ...] | list[str]:
        return select(parsed.get_str("controllers"), defaults)

    return run_main(PROG, argv, env, known, table=manager_flags(), choose=choose,
                    standalone=standalone_leases)  # fmt: skip
