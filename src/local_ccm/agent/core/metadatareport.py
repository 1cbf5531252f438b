"""The node metadata part of `local-ccm detect`: the machine's facts, the rules that match, the
labels they give and, when the Node was read, what the agent would change.

Pure, no I/O: the caller reads the facts, the rules and the Node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.agent.core.config import IPAddress
from local_ccm.agent.core.labels import (
    LabelPlan,
    input_labels,
    plan_node_labels,
    with_beta_twins,
)
from local_ccm.agent.core.metadata import (
    DEFAULT_LABEL_DOMAIN,
    Decided,
    NodeView,
    Rules,
    desired_labels,
    matching_rules,
)
from local_ccm.agent.core.writes import Obj
from local_ccm.records import dataclass


@dataclass(frozen=True)
class MetadataReport:
    source: str  # the rules file, "none" or "off"
    facts: Mapping[str, str]
    dmi_missing: str | None
    matching: tuple[str, ...]
    labels: Mapping[str, Decided]
    plan: LabelPlan | None  # None: the Node was not read
    notes: tuple[str, ...] = ()  # rules that could not match here, and why


def unjudged(rules: Rules, node_name: str, node_read: bool) -> tuple[str, ...]:
    """The rules `detect` cannot judge as the agent would: a `nodeName` condition without a
    Node name matches nothing, and a `labels` condition without the Node read sees no labels."""
    notes = []
    for rule in rules.rules:
        if rule.match.node_name is not None and not node_name:
            notes.append(f"rule {rule.name} matches nodeName and no --node-name (NODE_NAME) "
                         "was given: it cannot match here")  # fmt: skip
        if rule.match.labels and not node_read:
            notes.append(f"rule {rule.name} matches Node labels and the Node was not read: "
                         "it cannot match here")  # fmt: skip
    return tuple(notes)


def metadata_report(
    *, source: str, rules: Rules, facts: Mapping[str, str], dmi_missing: str | None,
    node_name: str, addresses: Sequence[IPAddress], node: Obj | None, beta: bool,
    domains: Sequence[str] = (DEFAULT_LABEL_DOMAIN,),
) -> MetadataReport:  # fmt: skip
    """What the rules give for this machine; `node` (when read) supplies labels and the plan."""
    view = NodeView(node_name, tuple(addresses), input_labels(node or {}))
    decided = desired_labels(rules, facts, view)
    if beta:
        twins = with_beta_twins({k: d.value for k, d in decided.items()}, view.labels)
        decided = {k: decided.get(k) or Decided(v, "(beta twin)") for k, v in twins.items()}
    plan = None
    if node is not None:
        plan = plan_node_labels(node, addresses, rules, facts, beta=beta, domains=domains)
    return MetadataReport(source, dict(facts), dmi_missing,
                          tuple(matching_rules(rules, facts, view)), decided, plan,
                          unjudged(rules, node_name, node is not None))  # fmt: skip


def metadata_text(report: MetadataReport | None) -> list[str]:
    if report is None:
        return ["METADATA", "  off (--metadata=false)"]
    lines = ["METADATA", f"  rules: {report.source}"]
    if report.dmi_missing:
        lines.append(f"  dmi: none ({report.dmi_missing})")
    lines += [f"  fact {name} = {value}" for name, value in sorted(report.facts.items())]
    lines.append(f"  matching rules: {', '.join(report.matching) or '(none)'}")
    lines += [f"  note: {note}" for note in report.notes]
    lines += [
        f"  label {key}={d.value}  (rule {d.rule})" for key, d in sorted(report.labels.items())
    ]
    if not report.labels:
        lines.append("  labels: (none)")
    plan = report.plan
    if plan is not None:
        changes = [f"set {k}={v}" for k, v in plan.set.items()]
        changes += [f"remove {k}" for k in plan.remove]
        changes += [f"keep {c.key}={c.theirs} (not ours; rules want {c.ours})"
                    for c in plan.conflicts]  # fmt: skip
        lines.append(f"  on the Node: {'; '.join(changes) or 'nothing to change'}")
    return lines


def metadata_json(report: MetadataReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    plan = report.plan
    return {
        "rules": report.source,
        "facts": dict(sorted(report.facts.items())),
        "dmiMissing": report.dmi_missing,
        "matchingRules": list(report.matching),
        "notes": list(report.notes),
        "labels": {k: {"value": d.value, "rule": d.rule} for k, d in sorted(report.labels.items())},
        "node": None if plan is None else {
            "set": dict(plan.set), "remove": list(plan.remove),
            "conflicts": [{"key": c.key, "theirs": c.theirs, "ours": c.ours}
                          for c in plan.conflicts],
        },
    }  # fmt: skip
