"""What every binary's composition does the same way: flags to options, logging, the last line
of defence, the signals. The central controllers' process host is `local_ccm.runtime.host`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from local_ccm import __version__, flags
from local_ccm.flags import FlagSet, Parsed, Problem
from local_ccm.logs import configure_logging, kv
from local_ccm.runtime import process as proc
from local_ccm.runtime.procmetrics import python_version

log = logging.getLogger("local_ccm.cli")
T = TypeVar("T")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = proc.EXIT_OK, proc.EXIT_FAILED, proc.EXIT_USAGE


class Logging(Protocol):
    """The logging settings a binary's options carry (the agent's, `runtime.host.Shared`)."""

    @property
    def log_format(self) -> Literal["text", "json"]: ...
    @property
    def verbosity(self) -> int: ...


# ---------------------------------------------------------------- flags and logging


def parse_args(table: FlagSet, argv: Sequence[str], env: Mapping[str, str]) -> Parsed | int:
    """The parsed flags, or the exit status once --help or --version is answered."""
    parsed = flags.parse(table, argv, env)
    if parsed.help_requested:
        sys.stdout.write(flags.format_usage(table))
        return EXIT_OK
    if parsed.version_requested:
        print(flags.format_version(table, python_version()))
        return EXIT_OK
    return parsed


def refuse(prog: str, problems: Sequence[Problem]) -> int:
    print(flags.usage_error(prog, problems), file=sys.stderr)
    return EXIT_USAGE


def start_logging(
    prog: str,
    options: Logging,
    fields: Mapping[str, object],
    *,
    bound: Mapping[str, str] | None = None,
    announce: bool = True,
) -> None:
    """Logging as the options say; the ignored klog flags and option warnings; the start line."""
    configure_logging(fmt=options.log_format, verbosity=options.verbosity, component=prog,
                      bound=bound or {})  # fmt: skip
    ignored = getattr(options, "ignored_klog", ())
    if ignored:
        given = ", ".join(f"--{name}" for name in ignored)
        log.warning("ignoring klog flags %s: logging is set by --v and --log-format", given)
    for warning in getattr(options, "warnings", ()):
        log.warning("%s", warning)
    if announce:
        log.info("starting %s %s", prog, __version__, extra=kv(**fields))


def guarded(run: Callable[[], int], *, traceback: bool = True) -> int:
    """`run()`, with any unexpected exception as one line and exit 1."""
    try:
        return run()
    except Exception as exc:  # the last line of defence
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=traceback)
        return EXIT_FAILED


async def with_signals(main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
    """`main(stop)`: the first SIGTERM/SIGINT sets `stop` (a graceful stop), a second one
    exits at once."""
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(EXIT_FAILED)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return await main(stop)
