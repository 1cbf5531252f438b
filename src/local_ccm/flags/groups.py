"""Flag groups every binary repeats: logging, and /metrics beside the health probes; and the
sections of `--help` of a binary that unites several components' tables (`by_owner`).

Each binary adds its own environment variables and aliases (`customize`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from local_ccm.flags.table import Flag, Section, customize
from local_ccm.flags.values import LOG_FORMATS, Loader, choice, verbosity
from local_ccm.validate import parse_bind_address

Env = Mapping[str, tuple[str, ...]]


def logging_flags(*, env: Env | None = None, aliases: Env | None = None) -> list[Flag]:
    """`--v` (klog's verbosity) and `--log-format`."""
    flags = [
        Flag("v", "int", 0, "Log verbosity 0-5: 0-1 INFO, 2-3 more INFO, 4-5 DEBUG; higher "
             "values act as 5 (klog accepts any level).", value=verbosity),
        Flag("log-format", "string", "text", "text or json.", metavar="format",
             value=choice(*LOG_FORMATS)),
    ]  # fmt: skip
    return customize(flags, env, aliases)


def metrics_flags(
    address: str,
    help: str,
    *,
    env: Env | None = None,
    value: Callable[[str], Any] = parse_bind_address,
) -> list[Flag]:
    """`--metrics-bind-address` (default `address`), `--metrics-secure` and its certificate."""
    flags = [
        Flag("metrics-bind-address", "string", address, help, metavar="host:port", value=value),
        Flag("metrics-secure", "bool", True, "Serve /metrics over HTTPS on its own address, only "
             "to bearer tokens allowed to get /metrics (TokenReview, SubjectAccessReview); "
             "false: plain HTTP, no authentication."),
        Flag("metrics-cert-dir", "string", "", "Directory holding tls.crt and tls.key for "
             "/metrics; empty: a self-signed certificate made on the first scrape.", metavar="dir"),
    ]  # fmt: skip
    return customize(flags, env)


def check_metrics_port(read: Loader, metrics: object, health: object, health_flag: str) -> None:
    """HTTPS metrics cannot share the port of the plain-HTTP health probes."""
    if read("metrics-secure") and metrics is not None and metrics == health:
        read.reject("metrics-bind-address", f"must differ from --{health_flag} with "
                    "--metrics-secure=true (the health probes stay plain HTTP)")  # fmt: skip


def by_owner(
    general: str,
    own: Sequence[Flag],
    owners: Sequence[tuple[str, Sequence[Flag]]],
    process: Sequence[str] = (),
) -> tuple[Section, ...]:
    """`--help` sections of a binary made of several owners' tables: first `general`, with the
    binary's `own` flags, every flag all owners declare (credentials, logging, the Lease,
    /metrics) and the flags named in `process`; then one section per owner, in order, with the
    flags it is the first to declare. An owner left with no flag gets no section."""
    common = (
        set.intersection(*({f.name for f in table} for _, table in owners)) if owners else set()
    )
    every = [f.name for _, table in owners for f in table]
    shared = dict.fromkeys([*(f.name for f in own), *(n for n in every if n in common), *process])
    sections, claimed = [Section(general, tuple(shared))], set(shared)
    for title, table in owners:
        mine = tuple(dict.fromkeys(f.name for f in table if f.name not in claimed))
        claimed.update(mine)
        sections += [Section(title, mine)] if mine else []
    return tuple(sections)
