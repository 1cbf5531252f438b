"""The node metadata section of `local-ccm detect` (pure)."""

from __future__ import annotations

import ipaddress
from typing import Any

from local_ccm.agent.core.metadata import parse_rules
from local_ccm.agent.core.metadatareport import (
    MetadataReport,
    metadata_json,
    metadata_report,
    metadata_text,
)

ZONE = "topology.kubernetes.io/zone"
RULES = parse_rules(
    {"rules": [{"name": "rack-1", "match": {"addresses": ["10.0.1.0/24"]}, "zone": "rack-1"}]}
)
FACTS = {"dmi.productName": "PowerEdge R650", "arch": "amd64"}
ADDRESSES = [ipaddress.ip_address("10.0.1.7")]


def rack_report(node: dict[str, Any] | None, *, beta: bool) -> MetadataReport:
    """The rack-1 rules on a PowerEdge R650 at 10.0.1.7, with or without its Node."""
    assert not isinstance(RULES, list)
    return metadata_report(source="/rules.yaml", rules=RULES, facts=FACTS, dmi_missing=None,
                           node_name="n1", addresses=ADDRESSES, node=node, beta=beta)  # fmt: skip


def test_without_the_node_it_shows_facts_matching_rules_and_labels() -> None:
    report = rack_report(None, beta=True)
    text = metadata_text(report)
    assert "  matching rules: rack-1" in text
    assert "  label topology.kubernetes.io/zone=rack-1  (rule rack-1)" in text
    assert "  label failure-domain.beta.kubernetes.io/zone=rack-1  (rule (beta twin))" in text
    default = "  label node.kubernetes.io/instance-type=PowerEdge-R650  (rule (default: DMI"
    assert f"{default} product name))" in text
    assert not any(line.startswith("  on the Node") for line in text)
    document = metadata_json(report)
    assert document is not None
    assert document["node"] is None
    assert document["labels"][ZONE] == {"value": "rack-1", "rule": "rack-1"}


def test_with_the_node_it_shows_what_would_change_and_what_is_kept() -> None:
    node = {"metadata": {"name": "n1", "resourceVersion": "1", "labels": {ZONE: "theirs"}}}
    report = rack_report(node, beta=False)
    (line,) = [line for line in metadata_text(report) if line.startswith("  on the Node")]
    assert line == (
        "  on the Node: set node.kubernetes.io/instance-type=PowerEdge-R650; "
        "keep topology.kubernetes.io/zone=theirs (not ours; rules want rack-1)"
    )


def test_off_and_no_dmi_are_said_plainly() -> None:
    assert metadata_text(None) == ["METADATA", "  off (--metadata=false)"]
    assert metadata_json(None) is None
    assert not isinstance(RULES, list)
    report = metadata_report(
        source="none",
        rules=RULES,
        facts={},
        dmi_missing="no /sys/class/dmi",
        node_name="n1",
        addresses=[],
        node=None,
        beta=False,
    )
    text = metadata_text(report)
    assert "  dmi: none (no /sys/class/dmi)" in text
    assert "  labels: (none)" in text


def test_rules_it_cannot_judge_here_are_named_not_silently_unmatched() -> None:
    """`detect` without --node-name (or without the Node) would show a nodeName or labels rule
    as not matching, although the agent, which has both, would apply it."""
    rules = parse_rules({"rules": [
        {"name": "by-name", "match": {"nodeName": "^rack(?P<rack>[0-9]+)-"}, "zone": "r"},
        {"name": "by-label", "match": {"labels": {"example.com/pool": "gpu"}}, "zone": "g"},
        {"name": "by-address", "match": {"addresses": ["10.0.1.0/24"]}, "zone": "rack-1"},
    ]})  # fmt: skip
    assert not isinstance(rules, list)
    report = metadata_report(source="/rules.yaml", rules=rules, facts=FACTS, dmi_missing=None,
                             node_name="", addresses=ADDRESSES, node=None, beta=False)  # fmt: skip
    assert report.matching == ("by-address",)
    notes = [line for line in metadata_text(report) if line.startswith("  note: ")]
    assert notes == [
        "  note: rule by-name matches nodeName and no --node-name (NODE_NAME) was given: it "
        "cannot match here",
        "  note: rule by-label matches Node labels and the Node was not read: it cannot match here",
    ]
    document = metadata_json(report)
    assert document is not None
    assert len(document["notes"]) == 2
    node = {"metadata": {"name": "rack7-a", "resourceVersion": "1", "labels": {}}}
    named = metadata_report(source="/rules.yaml", rules=rules, facts=FACTS, dmi_missing=None,
                            node_name="rack7-a", addresses=ADDRESSES, node=node,
                            beta=False)  # fmt: skip
    assert named.notes == ()
    assert named.matching == ("by-name", "by-address")
