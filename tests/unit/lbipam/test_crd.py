"""The LoadBalancerIPPool CRD file: names, schema pieces, admission rules, printer columns."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.ifnames import parse_glob
from local_ccm.lbipam.core.pools import GROUP, KIND, SELECTOR_OPERATORS, parse_address_text
from local_ccm.validate import ValidationError

CRD_FILE = (
    Path(__file__).resolve().parents[3]
    / "charts"
    / "local-ccm"
    / "files"
    / "lb.local-ccm.io_loadbalancerippools.yaml"
)


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(CRD_FILE.read_text()) if d]
    assert len(docs) == 1
    return dict(docs[0])


def version(crd: dict[str, Any]) -> dict[str, Any]:
    (only,) = crd["spec"]["versions"]
    return dict(only)


def spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(version(crd)["schema"]["openAPIV3Schema"]["properties"]["spec"])


def test_names_group_version_and_scope(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"loadbalancerippools.{GROUP}"
    assert (spec["group"], spec["names"]["kind"], spec["scope"]) == (GROUP, KIND, "Cluster")
    assert version(crd)["name"] == "v1alpha1"
    assert version(crd)["subresources"] == {"status": {}}


def test_spec_fields_and_defaults(crd: dict[str, Any]) -> None:
    properties = spec_schema(crd)["properties"]
    assert set(properties) == {
        "addresses",
        "allowFirstAndLast",
        "avoidBuggyIPs",
        "priority",
        "disabled",
        "serviceSelector",
        "namespaceSelector",
        "l2Announcement",
    }
    assert properties["allowFirstAndLast"]["default"] is False
    assert properties["avoidBuggyIPs"] == {**properties["avoidBuggyIPs"], "type": "boolean",
                                           "default": False}  # fmt: skip
    assert properties["disabled"]["default"] is False
    assert properties["priority"]["type"] == "integer"
    assert spec_schema(crd)["required"] == ["addresses"]


def test_empty_address_list_is_rejected(crd: dict[str, Any]) -> None:
    addresses = spec_schema(crd)["properties"]["addresses"]
    assert addresses["minItems"] == 1
    assert addresses["x-kubernetes-validations"][0]["rule"] == "size(self) > 0"


@pytest.mark.parametrize(
    "text",
    ["10.0.0.0/24", "fd00::/120", "10.0.0.10-10.0.0.20", "fd00::5-fd00::9", "0.0.0.0/0",
     "2000::/3"],
)  # fmt: skip
def test_address_pattern_accepts_cidrs_and_ranges(crd: dict[str, Any], text: str) -> None:
    pattern = spec_schema(crd)["properties"]["addresses"]["items"]["pattern"]
    assert re.fullmatch(pattern, text)
    assert not isinstance(parse_address_text(text, allow_first_last=True), str)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("::/0", "IPv4-mapped"), ("::ffff:0:0/120", "IPv4-mapped"), ("::ffff:0:0/96", "IPv4-mapped"),
     ("::fffe:ffff:ffff-::ffff:0:1", "IPv4-mapped"), ("fe80::%eth0/120", "zone")],
)  # fmt: skip
def test_addresses_the_api_server_refuses_in_a_service_status_make_an_entry_invalid(
    text: str, problem: str
) -> None:
    """Admitted by the pattern, refused by the parse: every write of such an address would be
    refused (`status.loadBalancer.ingress[].ip`), and each retry would take another."""
    parsed = parse_address_text(text, allow_first_last=True)
    assert isinstance(parsed, str)
    assert problem in parsed


@pytest.mark.parametrize(
    "text", ["10.0.0.0/33", "10.0.0.256/24", "fd00::/129", "nope", "10.0.0.1", "10.0.0.1-", ""]
)
def test_address_pattern_rejects_bad_syntax(crd: dict[str, Any], text: str) -> None:
    pattern = spec_schema(crd)["properties"]["addresses"]["items"]["pattern"]
    assert not re.fullmatch(pattern, text)


def test_backwards_ipv4_range_rule_compares_all_four_octets(crd: dict[str, Any]) -> None:
    (rule,) = spec_schema(crd)["properties"]["addresses"]["items"]["x-kubernetes-validations"]
    assert "start after it ends" in rule["message"]
    for side in ("[0]", "[1]"):
        for octet, weight in (("[0]", " * 16777216"), ("[1]", " * 65536"), ("[2]", " * 256")):
            assert f"int(self.split('-'){side}.split('.'){octet}){weight}" in rule["rule"]


def test_selectors_allow_only_the_four_operators(crd: dict[str, Any]) -> None:
    properties = spec_schema(crd)["properties"]
    node_selector = properties["l2Announcement"]["properties"]["nodeSelector"]
    for selector in (properties["serviceSelector"], properties["namespaceSelector"], node_selector):
        expression = selector["properties"]["matchExpressions"]["items"]
        assert tuple(expression["properties"]["operator"]["enum"]) == SELECTOR_OPERATORS
        assert "In', 'NotIn'" in expression["x-kubernetes-validations"][0]["rule"]


def l2_globs(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(spec_schema(crd)["properties"]["l2Announcement"]["properties"]["interfaces"])


def admitted(crd: dict[str, Any], glob: str) -> bool:
    """The interface item's schema, its CEL rule read as Python (the rule is checked to be
    the one read here)."""
    items = l2_globs(crd)["items"]
    (rule,) = items["x-kubernetes-validations"]
    assert rule["rule"] == (
        "self.contains('*') || self.contains('?') || self.contains('[') || size(self) <= 15"
    )
    cel = any(c in glob for c in "*?[") or len(glob) <= 15
    return (
        items["minLength"] <= len(glob) <= items["maxLength"]
        and re.search(items["pattern"], glob) is not None
        and cel
    )


@pytest.mark.parametrize(
    "glob",
    ["eth0", "bond*", "en?s[0-9]", "*", "a" * 15, "a" * 16, "", "eth/0", "eth 0", "eth\t0",
     "eth[0", "x[" + "a" * 30 + "]", "a" * 65 + "*"],
)  # fmt: skip
def test_admission_refuses_no_glob_the_controller_takes(crd: dict[str, Any], glob: str) -> None:
    """Admission is never stricter than the controller, and refuses all the controller does
    but an unclosed '[' and a glob longer than the schema's bound."""
    try:
        parse_glob(glob)
    except ValidationError as error:
        controller_refuses = str(error)
    else:
        controller_refuses = ""
    if admitted(crd, glob):
        assert controller_refuses in (
            "",
            f"\"{glob}\": unclosed '[' (a character class is written [...])",
        )
    else:
        assert controller_refuses or len(glob) > l2_globs(crd)["items"]["maxLength"], glob


def test_interface_globs_are_a_set_of_at_most_32(crd: dict[str, Any]) -> None:
    assert (l2_globs(crd)["x-kubernetes-list-type"], l2_globs(crd)["maxItems"]) == ("set", 32)


def test_printer_columns(crd: dict[str, Any]) -> None:
    columns = {c["name"]: c["jsonPath"] for c in version(crd)["additionalPrinterColumns"]}
    assert columns == {
        "Addresses": ".spec.addresses",
        "Priority": ".spec.priority",
        "Disabled": ".spec.disabled",
        "IPv4-Free": ".status.ipv4.free",
        "IPv6-Free": ".status.ipv6.free",
        "Age": ".metadata.creationTimestamp",
    }


def test_status_counts_are_strings(crd: dict[str, Any]) -> None:
    status = version(crd)["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for family in ("ipv4", "ipv6"):
        assert {k: v["type"] for k, v in status[family]["properties"].items()} == {
            "total": "string",
            "used": "string",
            "free": "string",
        }
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_the_chart_installs_it_from_this_file() -> None:
    template = CRD_FILE.parents[1] / "templates" / "lb-crd.yaml"
    assert f'"files/{CRD_FILE.name}"' in template.read_text()
