"""`local-ccm detect`: what the agent would write on this machine, printed, then exit 0 or 1."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from local_ccm import names
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.report import (
    Plan,
    PlanUnavailable,
    detect_exit_code,
    plan_node,
    render_json,
    render_text,
)
from local_ccm.agent.detect import detect_addresses
from local_ccm.agent.options import AgentOptions
from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from local_ccm.kube.resources import NODES

log = logging.getLogger(__name__)


def detect_mode(options: AgentOptions) -> int:
    """Detect, read the Node when possible, print, exit 0/1."""

    report = detect_addresses(options.config)
    plan = _read_plan(options, report.results)
    render = render_json if options.output == "json" else render_text
    sys.stdout.write(render(report, options.config, plan))
    return detect_exit_code(report)


def _read_plan(options: AgentOptions, detected: Mapping[DetectorKey, Detection]) -> Plan:
    """One read-only GET of the Node; any failure becomes part of the report."""

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
