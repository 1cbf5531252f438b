"""The metadata JSON Patch that writes planned labels and the ownership record."""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml

from local_ccm.agent.core.labels import (
    LabelPlan,
    label_conflicts,
    owned_annotation,
    plan_label_patch,
    plan_labels,
    plan_node_labels,
    with_labels,
)
from local_ccm.agent.core.metadata import Rules, parse_rules
from local_ccm.agent.core.writes import patch_kinds, plan_taint_patch
from local_ccm.names import OWNED_LABELS_ANNOTATION

ZONE = "topology.kubernetes.io/zone"
RV_TEST = {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}


def node(labels: dict[str, str] | None, annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "n1", "resourceVersion": "7"}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata}


def test_nothing_to_change_and_record_stored_is_no_patch() -> None:
    n = node({ZONE: "a"}, {OWNED_LABELS_ANNOTATION: '{"topology.kubernetes.io/zone":"a"}'})
    plan = plan_labels({ZONE: "a"}, {ZONE: "a"}, {ZONE: "a"})
    assert plan_label_patch(n, plan) is None


def test_first_write_creates_labels_and_annotations_guarded_by_resource_version() -> None:
    patch = plan_label_patch(node(None, None), plan_labels({}, {}, {ZONE: "a"}))
    assert patch is not None
    assert patch.subresource is None
    assert patch.body() == [
        RV_TEST,
        {"op": "add", "path": "/metadata/labels", "value": {ZONE: "a"}},
        {"op": "add", "path": "/metadata/annotations",
         "value": {OWNED_LABELS_ANNOTATION: '{"topology.kubernetes.io/zone":"a"}'}},
    ]  # fmt: skip


def test_owned_label_no_longer_wanted_is_removed_and_the_record_emptied() -> None:
    n = node(
        {ZONE: "a", "x": "y"}, {OWNED_LABELS_ANNOTATION: '{"topology.kubernetes.io/zone":"a"}'}
    )
    patch = plan_label_patch(n, plan_labels({ZONE: "a", "x": "y"}, {ZONE: "a"}, {}))
    assert patch is not None
    assert patch.body() == [
        RV_TEST,
        {"op": "remove", "path": "/metadata/labels/topology.kubernetes.io~1zone"},
        {"op": "add", "path": "/metadata/annotations/local-ccm.io~1owned-labels", "value": "{}"},
    ]


def test_foreign_label_is_left_alone_and_only_the_conflict_reported() -> None:
    labels = {ZONE: "theirs"}
    plan = plan_labels(labels, {}, {ZONE: "ours"})
    assert plan.set == {}
    assert [c.key for c in plan.conflicts] == [ZONE]
    assert plan_label_patch(node(labels, {}), plan) is None


def test_node_labels_come_from_rules_addresses_and_beta_twins() -> None:
    rules = parse_rules(
        yaml.safe_load("rules: [{name: r1, match: {addresses: [10.1.0.0/24]}, zone: r1}]")
    )
    assert isinstance(rules, Rules)
    n = node(None, None)
    addresses = [ipaddress.ip_address("10.1.0.5")]
    facts = {"dmi.productName": "PowerEdge R650"}
    plan = plan_node_labels(n, addresses, rules, facts, beta=True)
    assert plan.set == {
        ZONE: "r1",
        "node.kubernetes.io/instance-type": "PowerEdge-R650",
        "failure-domain.beta.kubernetes.io/zone": "r1",
        "beta.kubernetes.io/instance-type": "PowerEdge-R650",
    }
    assert plan_node_labels(n, [], rules, facts, beta=False).set == {
        "node.kubernetes.io/instance-type": "PowerEdge-R650"
    }


def test_each_label_conflict_is_reported_once() -> None:
    plan = plan_labels({ZONE: "theirs"}, {}, {ZONE: "ours"})
    events, seen = label_conflicts(plan.conflicts, frozenset())
    assert [e.reason for e in events] == ["MetadataLabelConflict"]
    assert ZONE in events[0].message
    again, seen = label_conflicts(plan.conflicts, seen)
    assert again == []
    other = plan_labels({ZONE: "theirs"}, {}, {ZONE: "other"})
    assert len(label_conflicts(other.conflicts, seen)[0]) == 1


def test_labels_go_first_in_the_write_that_removes_the_taint() -> None:
    n = node(None, None)
    n["spec"] = {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized"}]}
    taint = plan_taint_patch(n, remove_taint=True, provider_id="local://n1")
    labels = plan_label_patch(n, plan_labels({}, {}, {ZONE: "a"}))
    merged = with_labels(taint, labels)
    assert merged is not None
    assert labels is not None
    assert taint is not None
    ops = list(merged.operations)
    assert ops[0] == RV_TEST  # one guard for the whole write
    assert [op for op in ops if op == RV_TEST] == [RV_TEST]
    label_at = ops.index({"op": "add", "path": "/metadata/labels", "value": {ZONE: "a"}})
    removal = ops.index({"op": "remove", "path": "/spec/taints/0"})
    assert label_at < removal
    assert {"op": "add", "path": "/spec/providerID", "value": "local://n1"} in ops
    assert patch_kinds(merged) == ["labels", "taint", "provider_id"]
    assert with_labels(taint, None) == taint
    assert with_labels(None, labels) == labels


def applied(n: dict[str, Any], plan: LabelPlan) -> dict[str, Any]:
    """``n`` as the API server stores it after ``plan``'s write."""
    labels = {k: v for k, v in (n["metadata"].get("labels") or {}).items() if k not in plan.remove}
    labels |= plan.set
    annotations = {OWNED_LABELS_ANNOTATION: owned_annotation(plan)}
    return node(labels, annotations)


def test_rules_on_labels_the_agent_wrote_settle_after_one_write() -> None:
    """A rule meant to refine the default instance type must not see the default it set:
    matching on the agent's own output flips the label on every pass."""
    rules = parse_rules(yaml.safe_load("""
rules:
  - name: dell
    match: {labels: {node.kubernetes.io/instance-type: '^PowerEdge'}}
    instanceType: 'dell-{cpu.count}c'
  - name: copy
    labels: {local-ccm.io/type: '{label.node.kubernetes.io/instance-type}'}
"""))  # fmt: skip
    assert isinstance(rules, Rules)
    facts = {"dmi.productName": "PowerEdge R650", "cpu.count": "64"}
    n = node(None, None)
    seen = []
    for _ in range(4):
        plan = plan_node_labels(n, [], rules, facts, beta=False)
        seen.append(dict(plan.set))
        n = applied(n, plan)
    assert seen == [{"node.kubernetes.io/instance-type": "PowerEdge-R650"}, {}, {}, {}]
