"""The chart's PrometheusRule (files/alerts.yaml): rendered only when
``monitoring.prometheusRule.enabled``, valid for ``promtool check rules``, each alert firing and
quiet as ``promtool test rules`` (promtool/alerts_test.yaml) shows, and reading only series the
processes export (tests/unit/metric_names.txt is what the registries hold; the generic
families are declared in local_ccm.runtime.metrics). Needs only helm and promtool."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.binaries import ensure
from tests.support.chart import Helm, parse, select

HERE = Path(__file__).parent
NAMES = HERE.parents[1] / "unit" / "metric_names.txt"
# Families the processes export besides tests/unit/metric_names.txt's declared ones
GENERIC = {
    "leader_election_master_status", "rest_client_requests_total",
    "rest_client_request_duration_seconds", "workqueue_depth", "workqueue_adds_total",
    "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
}  # fmt: skip
ENABLED = {"monitoring.prometheusRule.enabled": "true"}


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure(["promtool"]).path("promtool")


def rules_of(chart_helm: Helm, kube_version: str, **set_values: str) -> dict[str, object]:
    objs = parse(chart_helm.template(kube_version=kube_version,
                                     set_values={**ENABLED, **set_values}))  # fmt: skip
    [rule] = select(objs, "PrometheusRule")
    spec: dict[str, object] = rule["spec"]
    return spec


def exported() -> set[str]:
    """Every family name the processes expose (counters with `_total`)."""
    names = set(GENERIC)
    for line in NAMES.read_text().splitlines():
        name, kind = line.split()[:2]
        names.add(name + "_total" if kind == "counter" and not name.endswith("_total") else name)
    return names


def run(*argv: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_off_by_default(chart_helm: Helm, kube_version: str) -> None:
    objs = parse(chart_helm.template(kube_version=kube_version))
    assert select(objs, "PrometheusRule") == []


def test_rules_check_and_every_alert_fires_and_stays_quiet_as_tested(
    chart_helm: Helm, kube_version: str, promtool: Path, tmp_path: Path
) -> None:
    spec = rules_of(chart_helm, kube_version)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "alerts_test.yaml").write_text((HERE / "promtool" / "alerts_test.yaml").read_text())
    checked = run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in spec["groups"] for r in g["rules"]}  # type: ignore[attr-defined]
    tested_alerts = set(
        re.findall(r"alertname: (\w+)", (tmp_path / "alerts_test.yaml").read_text())
    )
    assert alerts == tested_alerts


def test_the_rules_read_only_exported_series(chart_helm: Helm, kube_version: str) -> None:
    spec = rules_of(chart_helm, kube_version)
    exprs = [r["expr"] for g in spec["groups"] for r in g["rules"]]  # type: ignore[attr-defined]
    used = {
        m
        for e in exprs
        for m in re.findall(r"\b((?:local_ccm|leader|rest|workqueue|controller_runtime)_\w+)", e)
    }
    assert used
    assert used <= exported(), sorted(used - exported())


def test_thresholds_labels_and_namespace_are_values(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"monitoring": {"prometheusRule": {
        "enabled": True, "namespace": "monitoring", "labels": {"release": "kps"},
        "ruleLabels": {"team": "platform"},
        "alerts": {"lbPoolNearlyExhausted": {"ratio": 0.8}, "noLeader": {"for": "2m"}},
    }}}))  # fmt: skip
    objs = parse(chart_helm.template(kube_version=kube_version, values=[values]))
    [rule] = select(objs, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kps"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["LocalCcmNoLeader"]["for"] == "2m"
    assert ">= 0.8" in rules["LocalCcmLoadBalancerPoolNearlyExhausted"]["expr"]
    assert {r["labels"]["team"] for r in rules.values()} == {"platform"}
