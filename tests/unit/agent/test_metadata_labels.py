"""Label ownership: never overwrite a foreign label, update and remove only the agent's own."""

from __future__ import annotations

from local_ccm.agent.core.labels import (
    Conflict,
    LabelPlan,
    owned_annotation,
    plan_labels,
    read_owned,
    with_beta_twins,
)
from local_ccm.agent.core.metadata import INSTANCE_TYPE, ZONE
from local_ccm.names import OWNED_LABELS_ANNOTATION

ROLE = "local-ccm.io/rack"


def test_free_keys_are_set_and_owned() -> None:
    plan = plan_labels({"kubernetes.io/os": "linux"}, {}, {ZONE: "a", ROLE: "r1"})
    assert plan == LabelPlan({ZONE: "a", ROLE: "r1"}, (), {ROLE: "r1", ZONE: "a"})
    assert plan.changes


def test_a_pre_existing_label_is_kept_and_a_different_wish_is_a_conflict() -> None:
    plan = plan_labels({ZONE: "set-by-kubelet"}, {}, {ZONE: "a", INSTANCE_TYPE: "x"})
    assert plan.set == {INSTANCE_TYPE: "x"}
    assert plan.conflicts == (Conflict(ZONE, "set-by-kubelet", "a"),)
    assert ZONE not in plan.owned


def test_an_equal_foreign_label_is_neither_a_conflict_nor_adopted() -> None:
    plan = plan_labels({ZONE: "a"}, {}, {ZONE: "a"})
    assert plan == LabelPlan({}, (), {})


def test_owned_labels_follow_rule_changes() -> None:
    labels = {ZONE: "a", ROLE: "r1", "other": "x"}
    owned = {ZONE: "a", ROLE: "r1"}
    plan = plan_labels(labels, owned, {ZONE: "b"})
    assert plan.set == {ZONE: "b"}
    assert plan.remove == (ROLE,)
    assert plan.owned == {ZONE: "b"}


def test_a_label_changed_by_someone_else_is_no_longer_ours() -> None:
    plan = plan_labels({ZONE: "edited"}, {ZONE: "a"}, {ZONE: "b"})
    assert plan.set == {}
    assert plan.remove == ()
    assert plan.conflicts == (Conflict(ZONE, "edited", "b"),)
    assert plan.owned == {}
    removed_by_someone = plan_labels({}, {ZONE: "a"}, {ZONE: "a"})
    assert removed_by_someone.set == {ZONE: "a"}


def test_nothing_to_do_when_the_node_already_matches() -> None:
    plan = plan_labels({ZONE: "a"}, {ZONE: "a"}, {ZONE: "a"})
    assert not plan.changes
    assert owned_annotation(plan) == '{"topology.kubernetes.io/zone":"a"}'


def test_a_damaged_ownership_record_owns_nothing() -> None:
    assert read_owned({OWNED_LABELS_ANNOTATION: "not json"}) == {}
    assert read_owned({OWNED_LABELS_ANNOTATION: "[1]"}) == {}
    assert read_owned({OWNED_LABELS_ANNOTATION: '{"a":"1","b":2}'}) == {"a": "1"}


def test_beta_twins_mirror_the_ga_keys() -> None:
    got = with_beta_twins({ZONE: "a", INSTANCE_TYPE: "x", ROLE: "r"})
    assert got["failure-domain.beta.kubernetes.io/zone"] == "a"
    assert got["beta.kubernetes.io/instance-type"] == "x"
    assert len(got) == 5


def test_an_owned_key_outside_the_domains_now_is_disowned_not_removed() -> None:
    owned = {ZONE: "a", "hw.example.org/rack": "1", ROLE: "r"}
    plan = plan_labels(dict(owned), owned, {ZONE: "a"}, ("local-ccm.io",))
    assert plan.remove == (ROLE,)
    assert plan.owned == {ZONE: "a"}


def test_beta_twins_are_removed_after_beta_labels_were_turned_off() -> None:
    owned = {ZONE: "a", "failure-domain.beta.kubernetes.io/zone": "a"}
    plan = plan_labels(dict(owned), owned, {ZONE: "a"}, ("local-ccm.io",))
    assert plan.remove == ("failure-domain.beta.kubernetes.io/zone",)


def test_no_beta_twin_contradicts_a_key_someone_else_holds() -> None:
    theirs = {ZONE: "theirs", INSTANCE_TYPE: "x"}
    got = with_beta_twins({ZONE: "a", INSTANCE_TYPE: "x"}, theirs)
    assert "failure-domain.beta.kubernetes.io/zone" not in got
    assert got["beta.kubernetes.io/instance-type"] == "x"  # the same value: no contradiction
