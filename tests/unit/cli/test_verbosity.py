"""`--v` means the same in every binary and in the chart: 0-5 as documented (0-1 INFO, 2-3 more
INFO, 4-5 DEBUG); higher values are accepted, as klog accepts any level, and act as 5."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from local_ccm import flags
from local_ccm.agent.options import FLAGS as AGENT_FLAGS
from local_ccm.cli import manager
from local_ccm.flags import FlagSet, Loader
from local_ccm.ipam.options import FLAGS as IPAM_FLAGS
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.logs import MAX_VERBOSITY

SCHEMA = Path(__file__).resolve().parents[3] / "charts" / "local-ccm" / "values.schema.json"
TABLES = {
    "local-ccm": AGENT_FLAGS,
    "node-lifecycle-controller": LIFECYCLE_FLAGS,
    "node-ipam-controller": IPAM_FLAGS,
    "local-ccm-controller-manager": manager.manager_flags(),
}


def verbosity(table: FlagSet, value: str) -> tuple[int, list[str]]:
    read = Loader(flags.parse(table, [f"--v={value}"], {}))
    level = read("v")
    return level, [str(p) for p in read.problems]


@pytest.mark.parametrize("table", TABLES.values(), ids=list(TABLES))
def test_the_documented_range_is_accepted_as_given(table: FlagSet) -> None:
    for level in range(MAX_VERBOSITY + 1):
        assert verbosity(table, str(level)) == (level, [])
    help_text = table.lookup("v").help  # type: ignore[union-attr]
    assert help_text.startswith(f"Log verbosity 0-{MAX_VERBOSITY}")


@pytest.mark.parametrize("table", TABLES.values(), ids=list(TABLES))
def test_higher_levels_act_as_the_highest_and_negative_ones_are_refused(table: FlagSet) -> None:
    for level in (6, 10, 99):
        assert verbosity(table, str(level)) == (MAX_VERBOSITY, [])
    level, problems = verbosity(table, "-1")
    assert problems == ["invalid flag --v: must be 0 or more, got -1"]


def _verbosities(node: Mapping[str, Any], path: str = "$") -> Iterator[tuple[str, Any]]:
    for key, sub in (node.get("properties") or {}).items():
        if key == "verbosity":
            yield f"{path}.{key}", sub
        else:
            yield from _verbosities(sub, f"{path}.{key}")


def test_the_chart_documents_the_range_the_binaries_honour_and_keeps_klog_s() -> None:
    """The chart documents 0-5 as the flag does, and still accepts up to 10 (its range before,
    klog's customary one) so that values written for it, or for the Go chart, upgrade."""
    found = list(_verbosities(json.loads(SCHEMA.read_text())))
    assert len(found) == 3  # the agent, the lifecycle and the IPAM controller
    for path, schema in found:
        assert (schema["minimum"], schema["maximum"]) == (0, 10), path
        assert f"0-{MAX_VERBOSITY}" in schema["description"], path
        assert f"act as {MAX_VERBOSITY}" in schema["description"], path
