"""`local-ccm detect`: what the agent would write on this machine, printed, then exit 0 or 1."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from local_ccm import names
from local_ccm.agent.core.candidates import Detection, DetectorKey, Found
from local_ccm.agent.core.labels import address_ips
from local_ccm.agent.core.metadata import Rules
from local_ccm.agent.core.metadatareport import (
    MetadataReport,
    metadata_json,
    metadata_report,
    metadata_text,
)
from local_ccm.agent.core.report import (
    NodePlan,
    Plan,
    PlanUnavailable,
    detect_exit_code,
    plan_node,
    render_json,
    render_text,
)
from local_ccm.agent.detect import detect_addresses
from local_ccm.agent.machine import read_facts
from local_ccm.agent.options import AgentOptions
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError
from local_ccm.kube.resources import NODES

log = logging.getLogger(__name__)


def detect_mode(options: AgentOptions) -> int:
    """Detect, read the Node when possible, print, exit 0/1."""

    report = detect_addresses(options.config)
    plan, node = _read_plan(options, report.results)
    metadata = _metadata(options, report.results, plan, node)
    if options.output == "json":
        sys.stdout.write(
            render_json(report, options.config, plan, metadata=metadata_json(metadata))
        )
    else:
        text = render_text(report, options.config, plan)
        sys.stdout.write(text + "\n".join(metadata_text(metadata)) + "\n")
    return detect_exit_code(report)


def _read_plan(
    options: AgentOptions, detected: Mapping[DetectorKey, Detection]
) -> tuple[Plan, Obj | None]:
    """One read-only GET of the Node; any failure becomes part of the report."""

    if options.node_name is None:
        return None, None
    if options.cluster is None:
        reason = f"no Kubernetes credentials: {options.credentials_error}"
        return PlanUnavailable(options.node_name, reason), None
    try:
        with Client(options.cluster, field_manager=names.AGENT, timeout=options.api_timeout) as c:
            node = c.get(NODES, options.node_name)
    except (ApiError, OSError) as exc:
        log.warning("cannot read Node %s: %s", options.node_name, exc)
        return PlanUnavailable(options.node_name, f"cannot read the Node: {exc}"), None
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    planned = plan_node(node, detected, options.config, provider_id=options.provider_id, now=now)
    return planned, node


def _metadata(
    options: AgentOptions, detected: Mapping[DetectorKey, Detection], plan: Plan, node: Obj | None
) -> MetadataReport | None:
    """The metadata the agent would write: the addresses it would write when the Node was
    read, else the detected ones."""
    chosen = options.metadata
    if chosen is None:
        return None
    facts = read_facts()
    if isinstance(plan, NodePlan):
        addresses = address_ips(plan.desired)
    else:
        addresses = [d.address for d in detected.values() if isinstance(d, Found)]
    rules = chosen.rules
    return metadata_report(
        source=str(rules.path) if rules else "none (instance type from DMI only)",
        rules=rules.rules if rules else Rules(), facts=facts.values(),
        dmi_missing=facts.dmi_missing, node_name=options.node_name or "",
        addresses=addresses, node=node, beta=chosen.beta_labels, domains=chosen.label_domains,
    )  # fmt: skip
