"""`local-ccm-controller-manager --controllers=…`: the central controllers in one process, on
the path of `local_ccm.cli.central`.

`--controllers` reads as kube-controller-manager's: a comma list, `*` for every controller on
by default, `-name` turns one off. A controller joins with one `CONTROLLERS` entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from local_ccm import __version__
from local_ccm.cli import csr, ipam, lbipam, lifecycle
from local_ccm.cli.central import MANAGER, Controller, run_main
from local_ccm.flags import Flag, FlagSet, Parsed, unite

PROG = MANAGER
CONTROLLERS: Mapping[str, Callable[[], Controller]] = {
    "node-lifecycle": lifecycle.controller,
    "node-ipam": ipam.controller,
    "kubelet-serving-approver": csr.controller,
    "service-lb-ipam": lbipam.controller,
}


# ---------------------------------------------------------------- pure: flags and selection


def select(spec: str, known: Mapping[str, bool]) -> tuple[str, ...] | list[str]:
    """The controllers `--controllers` turns on (table order), or every problem's text. `known`
    maps each name to whether it is on by default."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    unknown = [i.removeprefix("-") for i in items if i != "*" and i.removeprefix("-") not in known]
    if unknown:
        return [f"unknown controller {name!r}; known: {', '.join(known)}" for name in unknown]
    chosen = tuple(
        name for name, on in known.items()
        if f"-{name}" not in items and (name in items or ("*" in items and on))
    )  # fmt: skip
    return chosen or ["no controller selected"]


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


# ---------------------------------------------------------------- the binary


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run local-ccm-controller-manager."""
    known = [make() for make in CONTROLLERS.values()]
    defaults = {c.name: c.default_on for c in known}

    def choose(parsed: Parsed) -> tuple[str, ...] | list[str]:
        return select(parsed.get_str("controllers"), defaults)

    return run_main(PROG, argv, env, known, table=manager_flags(), choose=choose)
