"""Detect mode: what the agent would write for this host, as a text table or one JSON object,
plus — when the Node could be read — the plan: current and desired addresses, the ownership
value, the JSON Patch operations and the taint decision.

Pure, no I/O, no clock: the caller detects, GETs the Node, passes the time and prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from local_ccm.agent.core.addresses import Finding, NodeAddress
from local_ccm.agent.core.candidates import Candidate, Detected, Disabled, Failed, Found, Verdict
from local_ccm.agent.core.config import (
    ADDRESS_TYPES,
    DETECTORS,
    FAMILIES,
    AddressType,
    AgentConfig,
    Family,
    family_name,
)
from local_ccm.agent.core.gates import (
    NO_INTERNAL_IP,
    ProviderIDAction,
    TaintDecision,
    decide_taint,
    desired_condition,
    desired_provider_id,
)
from local_ccm.agent.core.writes import (
    Condition,
    Obj,
    Patch,
    current_addresses,
    is_tainted,
    owned_annotation,
    plan_addresses,
    plan_status_patch,
    plan_taint_patch,
)
from local_ccm.records import dataclass

# Minimum column widths, the layout of docs/development.md's example; longer values widen a column.
_DETECTION_WIDTHS = (12, 8, 14, 20)
_CANDIDATE_WIDTHS = (13, 19)
_NO_ROUTE = re.compile(r"(no route to \S+): .* (\(E[A-Z0-9]+\))")


class DetectionReport(Protocol):
    """What ``agent.detect.detect_addresses`` returns (its ``DetectionReport``), read-only."""

    @property
    def results(self) -> Detected: ...

    @property
    def candidates(self) -> Sequence[Candidate]: ...

    @property
    def verdicts(self) -> Mapping[AddressType, Sequence[Verdict]]: ...


def detect_exit_code(report: DetectionReport) -> int:
    """0 when every enabled detector produced an address (none enabled counts), else 1."""
    return 1 if any(isinstance(d, Failed) for d in report.results.values()) else 0


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class NodePlan:
    """What one pass would do to the Node, computed from one GET."""

    node_name: str
    current: tuple[NodeAddress, ...]
    desired: tuple[NodeAddress, ...]
    owned_current: str | None  # None: annotation absent (never written)
    owned_desired: str
    findings: tuple[Finding, ...]
    condition: Condition | None  # None: --report-condition=false
    status_patch: Patch | None
    tainted: bool
    taint: TaintDecision
    taint_reasons: tuple[str, ...]
    provider_id: ProviderIDAction
    node_patch: Patch | None


@dataclass(frozen=True)
class PlanUnavailable:
    """A node name is known but the Node could not be read (no credentials, 404, 403...)."""

    node_name: str
    reason: str


Plan = NodePlan | PlanUnavailable | None


def plan_node(
    node: Obj,
    detected: Detected,
    config: AgentConfig,
    *,
    provider_id: str = "",
    now: str,
) -> NodePlan:
    """A loop pass without its writes. ``provider_id`` is the --provider-id template;
    ``now`` (RFC 3339) stamps the condition. The taint decision assumes the status patch
    lands (gate 2); Azure IMDS is not queried in detect mode and never blocks."""
    addresses = plan_addresses(node, detected, config)
    action = desired_provider_id(node, template=provider_id, fetched=None)
    blocks = action.kind == "unavailable"
    tainted = is_tainted(node)
    taint = decide_taint(
        config, tainted=tainted, addresses_synced=True, plan=addresses, provider_id_blocks=blocks
    )
    # The same gates the loop passes (core.decide), so detect mode shows what the loop writes.
    condition = desired_condition(addresses, detected, blocked=taint.blocked)
    status = plan_status_patch(
        node, addresses, condition=condition if config.report_condition else None, now=now
    )
    set_id = action.value if action.kind == "set" else None
    return NodePlan(
        node_name=str(node.get("metadata", {}).get("name", "")),
        current=current_addresses(node),
        desired=addresses.addresses,
        owned_current=owned_annotation(node),
        owned_desired=addresses.annotation,
        findings=addresses.findings,
        condition=condition if config.report_condition else None,
        status_patch=status,
        tainted=tainted,
        taint=taint,
        taint_reasons=_taint_reasons(config, tainted, taint, addresses.findings, provider_id),
        provider_id=action,
        node_patch=plan_taint_patch(node, remove_taint=taint.remove, provider_id=set_id),
    )


def _taint_reasons(
    config: AgentConfig,
    tainted: bool,
    taint: TaintDecision,
    findings: Sequence[Finding],
    template: str,
) -> tuple[str, ...]:
    if not tainted:
        return ("the Node has no uninitialized taint",)
    if not config.remove_taint:
        return ("--remove-taint=false",)
    reasons: list[str] = []
    for gate in taint.blocked:
        if gate == "no_internal_ip":
            reasons.append(
                NO_INTERNAL_IP if config.require_internal_ip else "no InternalIP or ExternalIP"
            )
        elif gate == "provided_node_ip_mismatch":
            reasons += [f.message for f in findings if f.kind == "provided_mismatch"]
        else:
            reasons.append(f"--provider-id {template}: a placeholder is empty on this Node")
    return tuple(reasons) or ("every gate holds (addresses written first)",)


# ------------------------------------------------------------------ text


def render_text(report: DetectionReport, config: AgentConfig, plan: Plan = None) -> str:
    rows = [["TYPE", "FAMILY", "ADDRESS", "SOURCE", "DETAIL"]]
    rows += [_detection_row(report, config, kind, f) for kind, f in DETECTORS]
    lines = _table(rows, _DETECTION_WIDTHS)
    lines.append("CANDIDATES")
    candidates = [
        [c.ifname, str(c.interface), _status(report, config, c)] for c in report.candidates
    ]
    lines += _table(candidates, _CANDIDATE_WIDTHS) if candidates else ["(no addresses)"]
    if plan is not None:
        lines += _plan_text(plan)
    return "\n".join(lines) + "\n"


def _detection_row(
    report: DetectionReport, config: AgentConfig, kind: AddressType, family: Family
) -> list[str]:
    d = report.results.get((kind, family), Disabled())
    head = [kind, family_name(family)]
    if isinstance(d, Found):
        where = f"dev {d.interface}" if d.interface else ""
        return [*head, str(d.address), " ".join(_source(d, config, kind)), where]
    if isinstance(d, Failed):
        return [*head, "-", "failed", _NO_ROUTE.sub(r"\1 \2", d.detail or d.reason)]
    return [*head, "-", "disabled", ""]


def _source(d: Found, config: AgentConfig, kind: AddressType) -> tuple[str, str]:
    """("route", target), ("interface", target) or ("cidr", the CIDR that selected it)."""
    settings = config.settings(kind)
    if d.source == "cidr":
        cidr = next((n for n in settings.positive_cidrs(d.address.version) if d.address in n), "")
        return ("cidr", str(cidr))
    return (d.source, str(settings.target(d.address.version) or ""))


def _table(rows: Sequence[Sequence[str]], minimum: Sequence[int]) -> list[str]:
    """Left-aligned columns, two spaces apart at least; the last column is not padded."""
    widths = [max(low, *(len(r[i]) + 2 for r in rows)) for i, low in enumerate(minimum)]
    return [
        ("".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + r[-1]).rstrip()
        for r in rows
    ]


def _verdicts(report: DetectionReport, config: AgentConfig, c: Candidate) -> dict[str, str | None]:
    """Each relevant type's rejection of ``c`` (None = eligible). Relevant: the types with an
    enabled detector, or both when none is enabled."""
    kinds = [k for k in ADDRESS_TYPES if any(config.enabled(k, f) for f in FAMILIES)]
    result: dict[str, str | None] = {}
    for kind in kinds or ADDRESS_TYPES:
        by_candidate = {v.candidate: v.rejection for v in report.verdicts.get(kind, ())}
        result[kind] = by_candidate.get(c)
    return result


def _status(report: DetectionReport, config: AgentConfig, c: Candidate) -> str:
    verdicts = _verdicts(report, config, c)
    texts = {k: "ok" if why is None else f"excluded: {why}" for k, why in verdicts.items()}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return "; ".join(f"{kind} {text}" for kind, text in texts.items())


def _plan_text(plan: NodePlan | PlanUnavailable) -> list[str]:
    lines = [f"PLAN for node {plan.node_name}"]
    if isinstance(plan, PlanUnavailable):
        return [*lines, f"  not available: {plan.reason}"]
    owned_now = "(absent)" if plan.owned_current is None else json.dumps(plan.owned_current)
    items = [
        ("current", _addresses_text(plan.current)),
        ("desired", _addresses_text(plan.desired)),
        ("ownership", f"{owned_now} -> {json.dumps(plan.owned_desired)}"),
        ("condition", _condition_text(plan.condition)),
        *(("finding", f"{f.kind}: {f.message}") for f in plan.findings),
        ("status patch", _patch_text(plan.status_patch)),
        ("taint", _taint_text(plan)),
        ("provider ID", _provider_id_text(plan.provider_id)),
        ("node patch", _patch_text(plan.node_patch)),
    ]
    return lines + [f"  {name + ':':<14}{value}" for name, value in items]


def _addresses_text(addresses: Sequence[NodeAddress]) -> str:
    return ", ".join(f"{a.type} {a.address}" for a in addresses) or "(none)"


def _condition_text(condition: Condition | None) -> str:
    if condition is None:
        return "not reported (--report-condition=false)"
    return f"{condition.status} {condition.reason}: {condition.message}"


def _patch_text(patch: Patch | None) -> str:
    if patch is None:
        return "none (nothing to change)"
    return json.dumps(patch.body(), separators=(",", ":"))


def _taint_text(plan: NodePlan) -> str:
    if not plan.tainted:
        return "absent"
    verdict = "would be removed" if plan.taint.remove else "kept"
    return f"present, {verdict}: {'; '.join(plan.taint_reasons)}"


def _provider_id_text(action: ProviderIDAction) -> str:
    if action.kind == "none":
        return f"unchanged ({action.existing or 'not set'})"
    if action.kind == "set":
        return f"would set {action.value}"
    if action.kind == "mismatch":
        return f"set to {action.existing}, configured {action.value}: left unchanged"
    return "configured template has an empty placeholder on this Node"


# ------------------------------------------------------------------ JSON


def render_json(
    report: DetectionReport, config: AgentConfig, plan: Plan = None, **extra: object
) -> str:
    document = {
        "detections": [_detection_json(report, config, k, f) for k, f in DETECTORS],
        "candidates": [_candidate_json(report, config, c) for c in report.candidates],
        "plan": _plan_json(plan),
        **extra,
    }
    return json.dumps(document, indent=2) + "\n"


def _detection_json(
    report: DetectionReport, config: AgentConfig, kind: AddressType, family: Family
) -> dict[str, Any]:
    d = report.results.get((kind, family), Disabled())
    head: dict[str, Any] = {"type": kind, "family": family_name(family)}
    if isinstance(d, Found):
        source, origin = _source(d, config, kind)
        key = "cidr" if source == "cidr" else "target"
        found = {"address": str(d.address), "source": source, key: origin or None}
        return {**head, "result": "found", **found, "interface": d.interface}
    if isinstance(d, Failed):
        target = config.settings(kind).target(family)
        where = {"target": str(target) if target else None}
        return {**head, "result": "failed", "reason": d.reason, "detail": d.detail, **where}
    return {**head, "result": "disabled"}


def _candidate_json(report: DetectionReport, config: AgentConfig, c: Candidate) -> dict[str, Any]:
    return {
        "interface": c.ifname,
        "ifindex": c.ifindex,
        "address": str(c.interface),
        "family": family_name(c.family),
        "flags": sorted(c.flags),
        "scope": c.scope,
        "operstate": c.operstate,
        "status": _status(report, config, c),
        "rejections": _verdicts(report, config, c),
    }


def _plan_json(plan: Plan) -> dict[str, Any] | None:
    if plan is None:
        return None
    if isinstance(plan, PlanUnavailable):
        return {"node": plan.node_name, "error": plan.reason}
    return {
        "node": plan.node_name,
        "current": [a.to_api() for a in plan.current],
        "desired": [a.to_api() for a in plan.desired],
        "ownership": {"current": plan.owned_current, "desired": plan.owned_desired},
        "findings": [{"kind": f.kind, "message": f.message} for f in plan.findings],
        "condition": None if plan.condition is None else asdict(plan.condition),
        "patches": {
            "status": plan.status_patch.body() if plan.status_patch else [],
            "node": plan.node_patch.body() if plan.node_patch else [],
        },
        "taint": {
            "present": plan.tainted,
            "remove": plan.taint.remove,
            "blocked": list(plan.taint.blocked),
            "reasons": list(plan.taint_reasons),
        },
        "providerID": {
            "action": plan.provider_id.kind,
            "value": plan.provider_id.value,
            "existing": plan.provider_id.existing,
        },
    }
