"""values.schema.json describes every key of values.yaml: a key without a
schema would pass `helm lint` with any type, and a typo'd key would never be rejected."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "local-ccm"
FREE_FORM = {"object", "array"}


def leaves(values: Mapping[str, Any], schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Paths of values.yaml keys the schema does not describe."""
    props = schema.get("properties", {})
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        sub = props.get(key)
        if sub is None:
            yield here
        elif isinstance(value, dict) and "properties" in sub:
            yield from leaves(value, sub, here)


def test_schema_describes_every_default_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert list(leaves(values, schema)) == []


def test_schema_rejects_unknown_keys_in_every_closed_object() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())

    def closed(node: Mapping[str, Any], path: str) -> Iterator[str]:
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                yield path
            for key, sub in node["properties"].items():
                yield from closed(sub, f"{path}.{key}")

    assert list(closed(schema, "$")) == []


def test_original_chart_keys_are_kept() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    original = yaml.safe_load((CHART / "ci" / "original-v0.3.0-values.yaml").read_text())
    assert list(leaves(original, schema)) == []
