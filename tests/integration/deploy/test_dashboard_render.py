"""The chart's Grafana dashboard (files/dashboard.json in a ConfigMap for Grafana's sidecar):
rendered only when ``monitoring.dashboard.enabled``, with the sidecar's label, a namespace and
annotations of the operator's choice, and every query one Prometheus parses once Grafana has
filled in its variables (`promtool check rules` on them as recording rules). That every series
it reads is one the processes export is checked against live scrapes in
test_monitoring_live.py. Needs only helm and promtool."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import monitoring as mon
from tests.support.binaries import ensure
from tests.support.chart import CHART, Helm, Obj, parse, select

ENABLED = {"monitoring.dashboard.enabled": "true"}
FILE = CHART / "files" / "dashboard.json"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure(["promtool"]).path("promtool")


def config_maps(chart_helm: Helm, kube_version: str, values: list[Path] | None = None,
                set_values: dict[str, str] | None = None) -> list[Obj]:  # fmt: skip
    objs = parse(chart_helm.template(kube_version=kube_version, values=values or [],
                                     set_values=set_values or {}))  # fmt: skip
    return [o for o in select(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


def dashboard_of(config_map: Obj) -> dict[str, Any]:
    [text] = config_map["data"].values()
    board: dict[str, Any] = json.loads(text)
    return board


def check_rules(promtool: Path, found: list[mon.Query], directory: Path) -> str | None:
    """promtool's complaint about the queries as recording rules, None when it has none."""
    (directory / "dashboard.rules.yaml").write_text(mon.recording_rules(found))
    done = subprocess.run([str(promtool), "check", "rules", "dashboard.rules.yaml"],
                          cwd=directory, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    return None if done.returncode == 0 else done.stdout + done.stderr


def test_off_by_default(chart_helm: Helm, kube_version: str) -> None:
    assert config_maps(chart_helm, kube_version) == []


def test_the_config_map_carries_the_file_and_the_sidecar_label(
    chart_helm: Helm, kube_version: str
) -> None:
    [config_map] = config_maps(chart_helm, kube_version, set_values=ENABLED)
    assert config_map["metadata"]["namespace"] == "kube-system"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in config_map["metadata"]
    assert list(config_map["data"]) == ["local-ccm.json"]
    assert dashboard_of(config_map) == json.loads(FILE.read_text())


def test_namespace_labels_and_annotations_are_values(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"monitoring": {"dashboard": {
        "enabled": True, "namespace": "monitoring",
        "labels": {"grafana_dashboard": None, "dashboards": "grafana"},
        "annotations": {"grafana_folder": "Kubernetes"},
    }}}))  # fmt: skip
    [config_map] = config_maps(chart_helm, kube_version, [values])
    meta = config_map["metadata"]
    assert meta["namespace"] == "monitoring"
    assert meta["labels"]["dashboards"] == "grafana"
    assert "grafana_dashboard" not in meta["labels"]  # null drops the default label
    assert meta["annotations"] == {"grafana_folder": "Kubernetes"}


def test_the_dashboard_shows_what_an_operator_looks_for() -> None:
    board = json.loads(FILE.read_text())
    titles = {p["title"] for p in mon.panels(board)}
    wanted = {"Nodes initialised", "Nodes uninitialised", "Address detection errors",
              "Requests by code", "Queue depth", "Queue latency p99", "Lifecycle circuit breaker",
              "Deletions", "CIDRs used per pool", "CIDRs free per pool", "Pool usage",
              "CSR decisions by result", "Leaders per Lease", "BMC power states",
              "BMC poll errors by reason", "Redfish latency"}  # fmt: skip
    assert wanted <= titles, sorted(wanted - titles)
    assert board["uid"] == "local-ccm"
    ids = [p["id"] for p in mon.panels(board)]
    assert len(ids) == len(set(ids))
    sources = {json.dumps(p["datasource"]) for p in mon.panels(board) if p["type"] != "row"}
    assert sources == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}


def test_every_query_parses_once_grafana_filled_it_in(
    chart_helm: Helm, kube_version: str, promtool: Path, tmp_path: Path
) -> None:
    [config_map] = config_maps(chart_helm, kube_version, set_values=ENABLED)
    found = mon.queries(dashboard_of(config_map))
    assert len(found) >= 30, found
    assert all("$" not in q.expr for q in found), found
    assert check_rules(promtool, found, tmp_path) is None


def test_a_query_that_does_not_parse_fails_the_check(promtool: Path, tmp_path: Path) -> None:
    broken = mon.Query("panel 1", "sum by (code) (rate(rest_client_requests_total[5m])")
    assert "unclosed left parenthesis" in (check_rules(promtool, [broken], tmp_path) or "")


def test_an_unknown_variable_is_an_error() -> None:
    with pytest.raises(KeyError, match="nmespace"):
        mon.expand('up{namespace=~"$nmespace"}', {"namespace": ".*"})
    assert mon.expand("rate(x[$__rate_interval])", {}) == "rate(x[5m])"
    assert mon.expand('up{a=~"${namespace:regex}", b=~"[[namespace]]"}', {"namespace": ".*"}) == (
        'up{a=~".*", b=~".*"}'
    )
