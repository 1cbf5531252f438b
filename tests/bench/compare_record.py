"""What every part of `make bench-compare` records beside its measurements: the load average
while it ran, the commit it ran, where each Go original came from, and the result file
(``test-artifacts/bench/compare-<part>-<stamp>.json``) that `tests.bench.compare_report`
turns into docs/benchmarks.md's tables."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from typing import Any

from tests.bench import plot_data
from tests.support import benchrecord, ipam_bench, originals
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.ticker import Ticker


class LoadSampler(Ticker):
    """The 1/5/15-minute load average every `every` s while the block runs, from its start."""

    def __init__(self, every: float = 15.0) -> None:
        super().__init__(every, at_once=True)
        self.samples: list[list[float]] = []

    def tick(self) -> None:
        self.samples.append([round(x, 2) for x in os.getloadavg()])


# The commit the session started at (test modules are imported first): what its processes run.
# A result is written at the end of a part, which may be an hour later.
SESSION_GIT = benchrecord.git_head()


def write(component: str, binaries: Binaries, plane: ControlPlane, body: dict[str, Any]) -> None:
    """test-artifacts/bench/compare-<component>-<stamp>.json, beside `make bench`'s results."""
    facts = ipam_bench.machine_facts(binaries, plane)  # "when": the part's end
    if samples := body.get("loadavg_samples"):  # read now, the load would be the end's
        facts["loadavg_start"] = samples[0]
    if facts["git"] != SESSION_GIT:  # committed during the run: the run is of the first
        facts["git"], facts["git_end"] = SESSION_GIT, facts["git"]
    body = {"machine": facts, **body}
    if baseline := body.get("settings", {}).get("baseline"):
        body["baseline_git"] = benchrecord.git_head(baseline)
    benchrecord.write_result("compare", component, body, echo=False)


def collect(rounds: dict[str, dict[str, list[Any]]], impl: str, values: dict[str, Any]) -> None:
    for key, value in values.items():
        rounds.setdefault(key, {"ours": [], "go": []}).setdefault(impl, []).append(value)


def provenance(built: originals.Built, name: str) -> dict[str, Any]:
    info = built.infos[name]
    return {k: info.get(k) for k in ("component", "version", "project", "commit", "license", "key")}


# ------------------------------------------------------------------ resuming a stopped run
PARTS = ("agent", "ipam", "lifecycle", "join", "lb", "stack")  # test_compare_<part>


def finished_parts(
    results: Iterable[tuple[str, dict[str, Any]]], git: str, settings: dict[str, Any]
) -> dict[str, str]:
    """Of `results` (file name, content), the newest file of each part run at commit `git` with
    exactly `settings` (``Settings.as_dict()``): what a resumed `make bench-compare`
    (BENCH_RESUME=1) keeps instead of measuring that part again. Settings are compared as
    their JSON reads back (a tuple is stored as a list)."""

    def as_read(value: Any) -> Any:
        return json.loads(json.dumps(value))

    wanted = as_read(settings)
    contents = dict(results)
    newest = plot_data.newest_by_kind(contents)
    kept = {}
    for part in PARTS:
        if (chosen := newest.get(f"compare-{part}")) is None:
            continue
        body = contents[chosen.name]
        if body.get("machine", {}).get("git") == git and as_read(body.get("settings")) == wanted:
            kept[part] = chosen.name
    return kept


def tree_commit() -> str:
    """The commit of this checkout, or "" when its tracked files differ from it (a resumed
    run must measure one commit: a dirty tree's earlier parts may have measured other code)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=benchrecord.ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    clean = status.returncode == 0 and not status.stdout.strip()
    return benchrecord.git_head() if clean else ""


def resumed_parts(settings: dict[str, Any]) -> dict[str, str]:
    """`finished_parts` of test-artifacts/bench for this checkout's commit (none if dirty)."""
    if not (git := tree_commit()):
        return {}
    files = sorted(benchrecord.RESULTS.glob("compare-*.json"))
    return finished_parts(((p.name, json.loads(p.read_text())) for p in files), git, settings)
