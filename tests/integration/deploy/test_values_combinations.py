"""Every values combination the schema allows renders a working install, pairwise.

The toggles are read from charts/local-ccm/values.schema.json when the test runs (every boolean,
with null where the type allows it, and every enum), so a toggle added later is covered
without editing this file. Why pairwise covers what it covers: a rendering fault that needs one
setting shows in any row holding that value, one that needs two settings together shows in the
row holding that pair, and every pair of values of two toggles is in some rendered row (or is
reported as forbidden); faults that need three settings at once are not sought (the full
product is beyond 2^50 renders).

The chart refuses some pairs on purpose (validate.yaml: e.g. controllerManager.loadBalancer
without controllerManager): a row the chart refuses with "needs <value>=<x>" is repaired by
setting what the message names, so its other pairs still count, and a pair that cannot survive
that repair is listed as forbidden with the chart's message. A repair takes the row's pairs
with the repaired value's old value out of it: those are packed into rows of only the pairs
still wanted (the other toggles at their defaults, which trigger few repairs) for a few rounds,
and what is still missing is tried alone. Anything else that fails to render
(a template error) is a broken combination. Each rendered row is applied for real (server-side
apply, strict field validation, no Warning header) to a namespace of its own on the real
kube-apiserver; CRDs are applied once. Replicas are 1 (BASE): with the default 2 a disabled
leader election is refused outright, which would hide every pair of that toggle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path as FilePath
from typing import Any

import pytest
import yaml

from local_ccm.kube.client import Client
from local_ccm.kube.errors import NotFound
from tests.integration.deploy.release import render
from tests.support import resources as r
from tests.support.chart import CHART, Helm, apply_all, describe_failures
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.crds import wait_established
from tests.support.pairwise import Path, covering_rows, nested, pack, pairs_of, toggles

BASE: dict[Path, Any] = {
    ("nodeLifecycleController", "replicaCount"): 1,
    ("nodeIpamController", "replicaCount"): 1,
}
REFUSAL = re.compile(
    r"execution error at \(local-ccm/templates/validate\.yaml[^)]*\): (.*?)(?:\n\nUse --debug|\Z)",
    re.S,
)  # the chart lists every problem, one "- " line each, after its first line
NEEDS = re.compile(r"needs ([A-Za-z0-9_.]+)=(true|false)\b")
TRIGGER = re.compile(r"([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+)\b")  # the setting a refusal names first
MAX_REPAIRS = 6
MAX_PACK_ROUNDS = 4
# prometheus-operator's kinds the chart may render: stand-in CRDs (any spec accepted), as D04's.
OPERATOR_KINDS = {"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


def stand_in_crd(kind: str, plural: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}  # fmt: skip
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                           "singular": kind.lower()},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema}}]},
    }  # fmt: skip


class Outcome:
    """Rendered rows (their final assignment), forbidden pairs, broken renders, failures."""

    def __init__(self) -> None:
        self.rendered: list[dict[Path, Any]] = []
        self.refused: list[tuple[dict[Path, Any], str]] = []
        self.broken: list[str] = []
        self.failures: list[str] = []
        # (toggle, value) -> (toggle, value) it needs, learnt from the chart's repairs.
        self.needs: dict[tuple[Path, Any], set[tuple[Path, Any]]] = {}


# About fifty renders applied for real (31 pairwise rows, 7 packed, 11 forbidden pairs alone):
# about 45 s on an idle 2-core machine, more than twice that when the machine is busy; the
# default 60 s would fail it on load alone. (Retrying every lost pair alone, as before the
# packing, took 230-300 s with 62 toggles.)
pytestmark = pytest.mark.timeout(300)


def _exists(kube: Client, crd: str) -> bool:
    try:
        kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
    except NotFound:
        return False
    return True


def test_every_pair_of_toggle_values_renders_and_applies_or_is_refused_clearly(
    *, chart_helm: Helm, kube_version: str, control_plane: ControlPlane, kube: Client,
    track: Tracker, test_labels: dict[str, str], unique_name: str, tmp_path: FilePath,
    crds: list[object],
) -> None:  # fmt: skip
    schema = json.loads((CHART / "values.schema.json").read_text())
    found = toggles(schema)
    keys = list(found)
    rows = [{k: found[k][v] for k, v in zip(keys, row, strict=True)}
            for row in covering_rows([len(found[k]) for k in keys])]  # fmt: skip
    outcome = Outcome()
    applied_crds: set[str] = set()

    def attempt(row: dict[Path, Any], tag: str) -> None:
        final, rendered = _render_repaired(chart_helm, kube_version, row, outcome,
                                           tmp_path / f"{tag}.yaml")  # fmt: skip
        if rendered is None:
            return
        outcome.rendered.append(final)
        namespace = f"{unique_name[:52]}-{tag}"
        meta = {"name": namespace, "labels": test_labels}
        kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        track(r.NAMESPACES, namespace)
        release = f"c{unique_name[-6:]}-{tag}"  # names its cluster-wide objects: unique per run
        objs = render(
            chart_helm,
            release=release,
            namespace=namespace,
            labels=test_labels,
            kube_version=kube_version,
            values=nested({**BASE, **final}),
        ).objects
        kinds = {o["kind"] for o in objs}
        stand_ins = [stand_in_crd(k, p) for k, p in OPERATOR_KINDS.items() if k in kinds]
        crds = [o for o in [*objs, *stand_ins] if o["kind"] == "CustomResourceDefinition"
                and o["metadata"]["name"] not in applied_crds]  # fmt: skip
        for crd in crds:
            # Only what this test creates is removed after it: the chart's CRDs are the
            # session's (the `crds` fixture, installed before the first row), and deleting
            # them would take ClusterCIDR and the pools away from every later test on this
            # plane (a CRD being deleted is not established again for a while).
            if not _exists(kube, crd["metadata"]["name"]):
                track(r.CUSTOM_RESOURCE_DEFINITIONS, crd["metadata"]["name"])
        failed = apply_all(control_plane.http, crds, namespace=namespace, dry_run=False)
        applied_crds.update(c["metadata"]["name"] for c in crds)
        for crd in crds:
            wait_established(kube, crd)
        rest = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
        failed += apply_all(control_plane.http, rest, namespace=namespace, dry_run=False)
        if failed:
            outcome.failures.append(f"row {tag} {_describe(final)}:\n{describe_failures(failed)}")

    for n, row in enumerate(rows):
        attempt(row, f"{n:03d}")
    # Pairs a repair took out of their row: packed into rows of only the wanted pairs (the
    # other toggles at their defaults) while that still gains pairs, then each alone on the
    # defaults, repaired, applied, or forbidden.
    index = {(k, v): (n, found[k].index(v)) for n, k in enumerate(keys) for v in found[k]}
    lost = _missing(keys, found, outcome, [p for row in rows for p in _pairs(keys, found, row)])
    missing, rounds = lost, 0
    while missing and rounds < MAX_PACK_ROUNDS:
        close = partial(_close, keys, found, outcome.needs)
        for n, packed in enumerate(pack(((index[a], index[b]) for a, b in missing), close)):
            attempt({keys[i]: found[keys[i]][v] for i, v in packed.items()}, f"r{rounds}{n:02d}")
        rounds, before = rounds + 1, missing
        missing = _missing(keys, found, outcome, before)
        if len(missing) == len(before):
            break
    for n, ((k1, v1), (k2, v2)) in enumerate(missing):
        attempt({k1: v1, k2: v2}, f"p{n:03d}")
    forbidden = _missing(keys, found, outcome, missing)
    print(f"\n{len(keys)} toggles, {len(rows)} pairwise rows, {len(outcome.rendered)} rendered "
          f"and applied, {len(lost)} pairs lost to repairs, {rounds} rounds of packed rows, "
          f"{len(missing)} pairs retried alone, {len(forbidden)} forbidden pairs, "
          f"{len(outcome.refused)} refusals (chart messages below)")  # fmt: skip
    for _, message in outcome.refused[:20]:
        print(f"  refused: {message}")
    assert not outcome.broken, "\n".join(outcome.broken)
    assert not outcome.failures, "\n\n".join(outcome.failures)
    assert all(message for _, message in outcome.refused)


def _close(
    keys: list[Path], found: Mapping[Path, tuple[Any, ...]],
    needs: Mapping[tuple[Path, Any], set[tuple[Path, Any]]], row: dict[int, int],
) -> dict[int, int] | None:  # fmt: skip
    """`row` with every value its values are known to need, or None if they contradict."""
    closed = dict(row)
    while True:
        wanted = [need for i, v in closed.items()
                  for need in needs.get((keys[i], found[keys[i]][v]), ())]  # fmt: skip
        added = False
        for path, value in wanted:
            if path not in keys or value not in found[path]:
                continue
            i, v = keys.index(path), found[path].index(value)
            if closed.get(i, v) != v:
                return None
            added |= i not in closed
            closed[i] = v
        if not added:
            return closed


def _missing(
    keys: list[Path], found: Mapping[Path, tuple[Any, ...]], outcome: Outcome,
    wanted: list[tuple[tuple[Path, Any], tuple[Path, Any]]],
) -> list[tuple[tuple[Path, Any], tuple[Path, Any]]]:  # fmt: skip
    """The pairs of `wanted` no rendered row holds yet, each once, in a stable order."""
    covered = {p for row in outcome.rendered for p in _pairs(keys, found, row)}
    return sorted({p for p in wanted if p not in covered}, key=str)


def _pairs(
    keys: list[Path], found: Mapping[Path, tuple[Any, ...]], row: Mapping[Path, Any]
) -> list[tuple[tuple[Path, Any], tuple[Path, Any]]]:
    """The (toggle, value) pairs a final assignment holds (defaults count as unset)."""
    present = [k for k in keys if k in row]
    indexes = [found[k].index(row[k]) if row[k] in found[k] else -1 for k in present]
    return [((present[i], found[present[i]][a]), (present[j], found[present[j]][b]))
            for (i, a), (j, b) in pairs_of(indexes) if a >= 0 and b >= 0]  # fmt: skip


def _render_repaired(
    chart_helm: Helm, kube_version: str, row: dict[Path, Any], outcome: Outcome,
    values_file: FilePath,
) -> tuple[dict[Path, Any], str | None]:  # fmt: skip
    """Render `row` over BASE; on a refusal naming a fix, apply the fix and render again."""
    row = dict(row)
    for _ in range(MAX_REPAIRS):
        values_file.write_text(yaml.safe_dump(nested({**BASE, **row})))
        result = chart_helm.template_result(kube_version=kube_version, values=[values_file])
        if result.code == 0:
            return row, result.stdout
        match = REFUSAL.search(result.output)
        if match is None:
            outcome.broken.append(f"{_describe(row)}:\n{result.output}")
            return row, None
        problems = [line.strip().removeprefix("- ") for line in match.group(1).splitlines()[1:]]
        message = next((p for p in problems if NEEDS.search(p)), match.group(1).strip())
        fix = NEEDS.search(message)  # one repair per render: the first problem that names one
        if fix is None:
            outcome.refused.append((row, message))
            return row, None
        path, value = tuple(fix.group(1).split(".")), fix.group(2) == "true"
        if row.get(path) == value:
            outcome.broken.append(f"{_describe(row)}: refused for {message!r} although set")
            return row, None
        outcome.refused.append((row, message))
        trigger = TRIGGER.match(message)
        cause = tuple(trigger.group(1).split(".")) if trigger else ()
        if cause in row:
            outcome.needs.setdefault((cause, row[cause]), set()).add((path, value))
        row[path] = value
    outcome.broken.append(f"{_describe(row)}: still refused after {MAX_REPAIRS} repairs")
    return row, None


def _describe(row: Mapping[Path, Any]) -> str:
    return ", ".join(f"{'.'.join(k)}={json.dumps(v)}" for k, v in row.items())
