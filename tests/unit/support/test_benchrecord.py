"""`tests.support.benchrecord`: what every benchmark result records and where it goes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import benchrecord


def test_git_head_names_this_checkout_and_unknown_outside_one(tmp_path: Path) -> None:
    assert re.fullmatch(r"[0-9a-f]{7,}", benchrecord.git_head())
    assert benchrecord.git_head(tmp_path) == "unknown"


def test_machine_facts_carry_the_commit_and_the_extras() -> None:
    facts = benchrecord.machine_facts(kube_apiserver="v1.37.1")
    assert facts["git"] == benchrecord.git_head()
    assert facts["kube_apiserver"] == "v1.37.1"
    assert {"when", "nproc", "loadavg_start", "python", "kernel"} <= facts.keys()


def test_a_result_is_written_under_its_kind_and_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(benchrecord, "RESULTS", tmp_path / "bench")
    path = benchrecord.write_result("ipam", "scale-5000", {"nodes": 5000})
    assert re.fullmatch(r"ipam-scale-5000-\d{8}T\d{6}\.json", path.name)
    assert path.parent == tmp_path / "bench"
    written = json.loads(path.read_text())
    assert written["nodes"] == 5000
    assert len(written["loadavg_end"]) == 3


def test_a_command_that_cannot_run_reads_as_unknown() -> None:
    assert benchrecord.command_output("/nonexistent/go", "version") == "unknown"
    assert benchrecord.command_output("true") == "unknown"  # ran, printed nothing
