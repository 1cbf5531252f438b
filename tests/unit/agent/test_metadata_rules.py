"""Node metadata rules: loading (every problem listed) and evaluation (first match per key)."""

from __future__ import annotations

import ipaddress

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.agent.core.facts import machine_facts
from local_ccm.agent.core.metadata import (
    DEFAULT_RULE,
    INSTANCE_TYPE,
    REGION,
    ZONE,
    Decided,
    NodeView,
    Rules,
    desired_labels,
    matching_rules,
    normalise_value,
    parse_rules,
)
from local_ccm.labels import label_value

DELL = {"sys_vendor": "Dell Inc.", "product_name": "PowerEdge R650", "chassis_type": "23"}
FACTS = machine_facts(DELL, "model name\t: Intel(R) Xeon(R) Gold 6338\n", None, "x86_64", 64)


def rules(text: str) -> Rules:
    loaded = parse_rules(yaml.safe_load(text))
    assert isinstance(loaded, Rules), loaded
    return loaded


def node(name: str = "fra1-rack3-n07", *addresses: str, **labels: str) -> NodeView:
    return NodeView(name, tuple(ipaddress.ip_address(a) for a in addresses), labels)


def test_zone_per_rack_by_address_range() -> None:
    loaded = rules(
        """
rules:
  - name: rack-a
    match: {addresses: [10.1.0.0/24]}
    zone: rack-a
  - name: rack-b
    match: {addresses: [10.1.1.0/24, "fd00:1:1::/64"]}
    zone: rack-b
"""
    )
    got = desired_labels(loaded, FACTS.values(), node("n1", "fd00:1:1::7"))
    assert got[ZONE] == Decided("rack-b", "rack-b")
    assert ZONE not in desired_labels(loaded, FACTS.values(), node("n1", "192.0.2.1"))


def test_region_from_a_named_group_of_the_node_name() -> None:
    loaded = rules(
        r"""
rules:
  - name: by-name
    match: {nodeName: '^(?P<region>[a-z]+[0-9]+)-(?P<rack>rack[0-9]+)-'}
    region: "{nodeName.region}"
    zone: "{nodeName.region}-{nodeName.rack}"
"""
    )
    got = desired_labels(loaded, FACTS.values(), node())
    assert got[REGION].value == "fra1"
    assert got[ZONE].value == "fra1-rack3"


def test_instance_type_defaults_to_the_dmi_product_name_and_a_rule_overrides_it() -> None:
    assert desired_labels(Rules(), FACTS.values(), node())[INSTANCE_TYPE] == Decided(
        "PowerEdge-R650", DEFAULT_RULE
    )
    loaded = rules(
        """
rules:
  - name: dell
    match: {dmi: {sysVendor: '^Dell'}}
    instanceType: "dell-{dmi.productName}-{cpu.count}c"
"""
    )
    assert desired_labels(loaded, FACTS.values(), node())[INSTANCE_TYPE] == Decided(
        "dell-PowerEdge-R650-64c", "dell"
    )


@pytest.mark.parametrize(
    "placeholder",
    ["To Be Filled By O.E.M.", "To be filled by O.E.M", "To Be Defined By O.E.M", "O.E.M.",
     "OEM", "System Name", "System Product Name", "Default String", " Not  Specified \n"],
)  # fmt: skip
def test_firmware_placeholders_are_no_instance_type(placeholder: str) -> None:
    facts = machine_facts({"product_name": placeholder, "board_name": "X570D4U"}, "", "", "", 1)
    assert facts.dmi == {"boardName": "X570D4U"}
    assert INSTANCE_TYPE not in desired_labels(Rules(), facts.values(), node())


def test_no_dmi_gives_no_default_instance_type_and_a_reason() -> None:
    facts = machine_facts(None, "", "MemTotal:       16384000 kB\n", "aarch64", 4)
    assert facts.dmi_missing is not None
    assert "DMI" in facts.dmi_missing
    assert desired_labels(Rules(), facts.values(), node()) == {}
    assert facts.values() == {"cpu.count": "4", "memory.gib": "16", "arch": "arm64"}


def test_first_rule_that_renders_a_value_wins_per_key() -> None:
    loaded = rules(
        """
rules:
  - name: needs-a-label
    zone: "{label.example.com/rack}"
  - name: specific
    match: {nodeName: '^fra1-'}
    region: eu-central
  - name: catch-all
    zone: unknown
    region: elsewhere
"""
    )
    got = desired_labels(loaded, FACTS.values(), node())
    assert got[ZONE] == Decided("unknown", "catch-all")
    assert got[REGION] == Decided("eu-central", "specific")
    labelled = desired_labels(loaded, FACTS.values(), node(**{"example.com/rack": "r9"}))
    assert labelled[ZONE] == Decided("r9", "needs-a-label")
    assert matching_rules(loaded, FACTS.values(), node("other")) == ["needs-a-label", "catch-all"]


def test_label_and_dmi_conditions_must_all_hold() -> None:
    loaded = rules(
        """
rules:
  - name: storage
    match:
      labels: {node-role.kubernetes.io/storage: ""}
      dmi: {chassisType: rack-mount-chassis}
    labels: {local-ccm.io/role: storage, pool.local-ccm.io/disk: "{dmi.productName}"}
"""
    )
    plain = desired_labels(loaded, FACTS.values(), node())
    assert "local-ccm.io/role" not in plain
    got = desired_labels(loaded, FACTS.values(), node(**{"node-role.kubernetes.io/storage": ""}))
    assert got["local-ccm.io/role"].value == "storage"
    assert got["pool.local-ccm.io/disk"].value == "PowerEdge-R650"


def test_every_problem_is_listed() -> None:
    problems = parse_rules(
        yaml.safe_load(
            """
colour: blue
rules:
  - name: bad one!
    match: {nodeName: '(', addresses: [10.0.0.1/8, nope], dmi: {serial: x}, colour: 1}
    zone: "{dmi.nothing}"
    region: "not a label value"
    labels:
      topology.kubernetes.io/zone: x
      example.com/foo: bar
      local-ccm.io/ok: "{nodeName.missing}"
  - name: twin
    zone: a
  - name: twin
    zone: b
  - name: empty
  - 7
"""
        )
    )
    assert isinstance(problems, list)
    text = "\n".join(problems)
    for expected in (
        "unknown top-level key 'colour'",
        "name: required",
        "invalid regular expression '('",
        "'10.0.0.1/8' is not a CIDR",
        "'nope' is not a CIDR",
        "unknown DMI field 'serial'",
        "unknown key 'colour'",
        "unknown fact {dmi.nothing}",
        "'not a label value' is not a valid label value",
        "is set by zone, region or instanceType",
        "'example.com/foo' is outside the allowed label domains (local-ccm.io)",
        "no group 'missing' in match.nodeName",
        "rules[2] (twin): duplicate rule name",
        "rules[3] (empty): sets nothing",
        "rules[4]: must be a mapping",
    ):
        assert expected in text, expected


def test_an_empty_or_missing_document_means_no_rules() -> None:
    assert parse_rules(None) == Rules()
    assert parse_rules({"rules": []}) == Rules()
    assert parse_rules({"defaultInstanceType": False}) == Rules(default_instance_type=False)
    assert parse_rules([1]) == ["the rules file must be a mapping with a `rules` list"]


@given(st.text(max_size=120))
def test_normalised_values_are_always_valid_label_values(text: str) -> None:
    value = normalise_value(text)
    assert label_value(value) == value
