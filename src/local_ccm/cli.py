"""Composition root: parses flags, builds adapters and starts one component.

The three console scripts land here. Components are wired in later issues
(#4 node-lifecycle-controller, #5 node-ipam-controller). Imports of a component happen
inside its entry point, so each binary loads only its own modules (memory budget).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from local_ccm.agent.core.candidates import Detection, DetectorKey
    from local_ccm.agent.core.report import Plan
    from local_ccm.agent.options import AgentOptions, ConfigResolver

log = logging.getLogger(__name__)
Mode = Callable[["AgentOptions"], int]


def agent_main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    run: Mode | None = None,
    detect: Mode | None = None,
    resolve: ConfigResolver | None = None,
) -> int:
    """`local-ccm`. Tests inject argv, env, the two modes and the
    credentials resolver; the console script passes nothing."""
    from local_ccm import flags  # noqa: PLC0415
    from local_ccm.agent import options  # noqa: PLC0415

    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    parsed = flags.parse(options.FLAGS, argv, env)
    if parsed.help_requested:
        sys.stdout.write(flags.format_usage(options.FLAGS))
        return 0
    if parsed.version_requested:
        print(flags.format_version(options.FLAGS, platform.python_version()))
        return 0
    loaded = options.options_from(parsed, env, resolve=resolve)
    if isinstance(loaded, list):
        print(flags.usage_error(options.PROG, loaded), file=sys.stderr)
        return 2
    _start_logging(loaded)
    mode = (detect or _detect) if loaded.detect else (run or _run_agent)
    try:
        return mode(loaded)
    except Exception as exc:  # the last line of defence: one line, exit 1
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=loaded.verbosity >= 4)
        return 1


def _start_logging(options: AgentOptions) -> None:
    from local_ccm import __version__, names  # noqa: PLC0415
    from local_ccm.agent.options import startup_fields  # noqa: PLC0415
    from local_ccm.logs import configure_logging, kv  # noqa: PLC0415

    configure_logging(
        fmt=options.log_format,
        verbosity=options.verbosity,
        component=names.AGENT,
        bound={"node": options.node_name or ""},
    )
    if options.ignored_klog:
        flags = ", ".join(f"--{name}" for name in options.ignored_klog)
        log.warning("ignoring klog flags %s: logging is set by --v and --log-format", flags)
    if not options.detect:  # detect mode's output is its own report, no start-up line
        log.info("starting local-ccm %s", __version__, extra=kv(**startup_fields(options)))


def _run_agent(options: AgentOptions) -> int:
    """Loop and run-once modes, in ``local_ccm.agent.run``."""
    from local_ccm.agent.run import run_agent  # noqa: PLC0415

    return run_agent(options)


def _detect(options: AgentOptions) -> int:
    """Detect mode: detect, read the Node when possible, print, exit 0/1."""
    from local_ccm.agent.core.report import detect_exit_code, render_json, render_text  # noqa: PLC0415
    from local_ccm.agent.detect import detect_addresses  # noqa: PLC0415

    report = detect_addresses(options.config)
    plan = _read_plan(options, report.results)
    render = render_json if options.output == "json" else render_text
    sys.stdout.write(render(report, options.config, plan))
    return detect_exit_code(report)


def _read_plan(options: AgentOptions, detected: Mapping[DetectorKey, Detection]) -> Plan:
    """One read-only GET of the Node; any failure becomes part of the report."""
    from local_ccm import names  # noqa: PLC0415
    from local_ccm.agent.core.report import PlanUnavailable, plan_node  # noqa: PLC0415
    from local_ccm.kube.client import Client  # noqa: PLC0415
    from local_ccm.kube.errors import ApiError  # noqa: PLC0415
    from local_ccm.kube.resources import NODES  # noqa: PLC0415

    if options.node_name is None:
        return None
    if options.cluster is None:
        reason = f"no Kubernetes credentials: {options.credentials_error}"
        return PlanUnavailable(options.node_name, reason)
    try:
        with Client(options.cluster, field_manager=names.AGENT, timeout=options.api_timeout) as c:
            node = c.get(NODES, options.node_name)
    except (ApiError, OSError) as exc:
        log.warning("cannot read Node %s: %s", options.node_name, exc)
        return PlanUnavailable(options.node_name, f"cannot read the Node: {exc}")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return plan_node(node, detected, options.config, provider_id=options.provider_id, now=now)


def lifecycle_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """node-lifecycle-controller; its adapters are composed in local_ccm.lifecycle.main."""
    from local_ccm.lifecycle.main import main  # noqa: PLC0415

    return main(sys.argv[1:] if argv is None else argv, os.environ if env is None else env)


def ipam_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """node-ipam-controller; its adapters are composed in local_ccm.ipam.main."""
    from local_ccm.ipam.main import main  # noqa: PLC0415

    return main(sys.argv[1:] if argv is None else argv, os.environ if env is None else env)
