"""NodeSelector semantics, legacy AND mode, canonical string,
and the selector rules A7-A9 applied to stored objects."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm.ipam.core.selector import (
    EXPRESSION_VALUES_MESSAGE,
    FIELD_MESSAGE,
    Match,
    NodeSelector,
    SelectorError,
    parse_node_selector,
)
from tests.unit.ipam.builders import one_term, terms


def sel(raw: Any) -> NodeSelector:
    parsed = parse_node_selector(raw)
    assert parsed is not None
    return parsed


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def term(*expressions: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    raw: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        raw["matchFields"] = list(fields)
    return raw


def test_absent_selector_is_a_catch_all() -> None:
    assert parse_node_selector(None) is None


def test_empty_term_list_matches_every_node_with_zero_requirements() -> None:
    assert sel({"nodeSelectorTerms": []}).match({"x": "y"}, "n") == Match(0, "")


def test_i12_terms_are_ored() -> None:
    selector = sel(terms({"pool": "a"}, {"pool": "b"}))
    assert selector.match({"pool": "b"}, "n") == Match(1, "pool in (b)")
    assert selector.match({"pool": "a"}, "n") == Match(1, "pool in (a)")
    assert selector.match({"pool": "c"}, "n") is None


def test_i12_legacy_mode_ands_all_terms() -> None:
    selector = sel(terms({"pool": "a"}, {"pool": "b"}))
    assert selector.match({"pool": "b"}, "n", legacy=True) is None
    both = sel(terms({"a": "1"}, {"b": "2"}))
    assert both.match({"a": "1", "b": "2"}, "n", legacy=True) == Match(2, "a in (1),b in (2)")


def test_requirements_of_one_term_are_anded() -> None:
    selector = sel(one_term(ipv4="true", ipv6="true"))
    assert selector.match({"ipv4": "true", "ipv6": "true"}, "n") == Match(
        2, "ipv4 in (true),ipv6 in (true)"
    )
    assert selector.match({"ipv4": "true"}, "n") is None


def test_i14_empty_term_matches_nothing_but_everything_in_legacy_mode() -> None:
    selector = sel({"nodeSelectorTerms": [{}]})
    assert selector.match({"x": "y"}, "n") is None
    assert selector.match({"x": "y"}, "n", legacy=True) == Match(0, "")
    assert sel({"nodeSelectorTerms": [None]}).match({}, "n") is None


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        (expr("k", "In", "a", "b"), {"k": "b"}, True),
        (expr("k", "In", "a"), {}, False),
        (expr("k", "NotIn", "a"), {"k": "b"}, True),
        (expr("k", "NotIn", "a"), {}, True),  # absent key satisfies NotIn
        (expr("k", "NotIn", "a"), {"k": "a"}, False),
        (expr("k", "Exists"), {"k": ""}, True),
        (expr("k", "Exists"), {}, False),
        (expr("k", "DoesNotExist"), {}, True),
        (expr("k", "DoesNotExist"), {"k": "v"}, False),
        (expr("k", "Gt", "5"), {"k": "10"}, True),  # numeric, not lexical
        (expr("k", "Gt", "5"), {"k": "5"}, False),
        (expr("k", "Gt", "5"), {"k": "x"}, False),
        (expr("k", "Gt", "5"), {}, False),
        (expr("k", "Lt", "5"), {"k": "-3"}, True),
        (expr("k", "Lt", "5"), {"k": "40"}, False),
        # A label beyond int64 is no integer to Go's ParseInt: neither greater nor less.
        (expr("k", "Gt", "5"), {"k": "100000000000000000000000"}, False),
        (expr("k", "Lt", "5"), {"k": "-100000000000000000000000"}, False),
    ],
)
def test_operators_have_core_semantics(
    requirement: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    selector = sel({"nodeSelectorTerms": [term(requirement)]})
    assert (selector.match(labels, "n") is not None) is matches


def test_i13_match_fields_compare_the_node_name() -> None:
    selector = sel({"nodeSelectorTerms": [term(fields=(expr("metadata.name", "In", "node-x"),))]})
    assert selector.match({}, "node-x") == Match(1, "metadata.name in (node-x)")
    assert selector.match({"metadata.name": "node-x"}, "node-y") is None
    assert selector.match({}, "node-x", legacy=True) is not None
    not_in = sel({"nodeSelectorTerms": [term(fields=(expr("metadata.name", "NotIn", "a"),))]})
    assert not_in.match({}, "b") is not None
    assert not_in.match({}, "a") is None


def test_best_matching_term_has_most_requirements_then_smallest_string() -> None:
    selector = sel(terms({"z": "1"}, {"a": "1", "b": "1"}, {"c": "1", "b": "1"}, {"y": "1"}))
    labels = {"a": "1", "b": "1", "c": "1", "y": "1", "z": "1"}
    assert selector.match(labels, "n") == Match(2, "a in (1),b in (1)")
    assert selector.match({"y": "1", "z": "1"}, "n") == Match(1, "y in (1)")


def test_canonical_string_renders_every_operator_sorted_by_key() -> None:
    raw = term(
        expr("zone", "NotIn", "b", "a", "b"),
        expr("cpu", "Gt", "4"),
        expr("mem", "Lt", "9"),
        expr("gpu", "DoesNotExist"),
        expr("arch", "Exists"),
        expr("team", "In", "y", "x"),
        fields=(expr("metadata.name", "In", "n1"),),
    )
    match = sel({"nodeSelectorTerms": [raw]}).match(
        {"cpu": "8", "mem": "1", "arch": "amd64", "team": "x"}, "n1"
    )
    assert match == Match(
        7,
        "arch,cpu>4,!gpu,mem<9,metadata.name in (n1),team in (x,y),zone notin (a,b)",
    )


@pytest.mark.parametrize(
    ("selector", "differ"),
    [
        ({"nodeSelectorTerms": []}, False),
        (one_term(a="1", b="2"), False),
        ({"nodeSelectorTerms": [one_term(a="1")["nodeSelectorTerms"][0], {}]}, False),
        (terms({"pool": "a"}, {"pool": "b"}), True),
        (terms({"pool": "a"}, {"pool": "a"}), False),
        ({"nodeSelectorTerms": [{}]}, True),
    ],
)
def test_semantics_differ_flags_selectors_that_select_differently(
    selector: dict[str, Any], differ: bool
) -> None:
    assert sel(selector).semantics_differ() is differ


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"nodeSelectorTerms": [term(expr("k", "Equals", "a"))]}, "unsupported value"),
        ({"nodeSelectorTerms": [term(expr("k", "In"))]}, EXPRESSION_VALUES_MESSAGE),
        ({"nodeSelectorTerms": [term(expr("k", "NotIn"))]}, EXPRESSION_VALUES_MESSAGE),
        ({"nodeSelectorTerms": [term(expr("k", "Exists", "a"))]}, EXPRESSION_VALUES_MESSAGE),
        ({"nodeSelectorTerms": [term(expr("k", "Gt", "1", "2"))]}, EXPRESSION_VALUES_MESSAGE),
        ({"nodeSelectorTerms": [term(expr("k", "Lt", "x"))]}, EXPRESSION_VALUES_MESSAGE),
        (  # beyond int64: Go's ParseInt refuses it, so Kubernetes' selector does
            {"nodeSelectorTerms": [term(expr("k", "Gt", "99999999999999999999999"))]},
            EXPRESSION_VALUES_MESSAGE,
        ),
        ({"nodeSelectorTerms": [term(fields=(expr("team", "In", "a"),))]}, FIELD_MESSAGE),
        (
            {"nodeSelectorTerms": [term(fields=(expr("metadata.name", "Exists"),))]},
            FIELD_MESSAGE,
        ),
        (
            {"nodeSelectorTerms": [term(fields=(expr("metadata.name", "In", "a", "b"),))]},
            FIELD_MESSAGE,
        ),
        ({"nodeSelectorTerms": [term(expr("bad key!", "Exists"))]}, "qualified name"),
        ({"nodeSelectorTerms": [term(expr("k", "In", "-bad-"))]}, "label value"),
        ({"nodeSelectorTerms": [term({"key": "k"})]}, "required"),
        ({}, "nodeSelectorTerms is required"),
        ({"nodeSelectorTerms": "x"}, "must be a list"),
        ("x", "must be an object"),
    ],
)
def test_invalid_selectors_are_rejected_with_the_reason(raw: Any, message: str) -> None:
    with pytest.raises(SelectorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_node_selector(raw)


def test_gt_accepts_a_signed_integer() -> None:
    selector = sel({"nodeSelectorTerms": [term(expr("k", "Gt", "-2"))]})
    assert selector.match({"k": "0"}, "n") == Match(1, "k>-2")
