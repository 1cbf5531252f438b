"""Every rules example of docs/metadata.md loads as the agent loads it: an operator copying one
must not meet exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from local_ccm.agent.core.metadata import Rules, parse_rules

DOC = Path(__file__).resolve().parents[3] / "docs" / "metadata.md"
BLOCKS = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if "rules:" in b]


def test_the_page_has_rules_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"example-{i}" for i in range(len(BLOCKS))])
def test_a_documented_rules_example_loads(block: str) -> None:
    loaded = parse_rules(yaml.safe_load(block))
    assert isinstance(loaded, Rules), loaded
