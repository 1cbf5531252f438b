"""What an operator reads after `helm install`: NOTES warns when no InternalIP source is
configured (the default, as in the original: only the kubelet's --node-ip gives one), and the
chart renders at the oldest and newest Kubernetes the tests run (Chart.yaml kubeVersion)."""

from __future__ import annotations

import pytest

from tests.integration.deploy.conftest import PLANE_VERSIONS
from tests.support.chart import Helm

WARNING = "WARNING: no InternalIP source is configured"


def notes(chart_helm: Helm, **set_values: str) -> str:
    result = chart_helm.notes(set_values=set_values)
    assert result.code == 0, result.output
    return result.stdout


def test_the_default_install_warns_that_only_the_kubelet_s_node_ip_gives_an_internal_ip(
    chart_helm: Helm,
) -> None:
    text = notes(chart_helm)
    assert WARNING in text
    assert "only when its kubelet runs with --node-ip" in text
    assert "an ExternalIP (the source address of its route to 8.8.8.8)" in text
    assert "ipDetection.internalIPCIDRs=<the nodes' subnet>" in text


@pytest.mark.parametrize(
    "set_values",
    [
        {"ipDetection.internalIPCIDRs": "192.0.2.0/24"},
        {"ipDetection.internalIPTarget": "192.0.2.1"},
        {"controller.extraArgs[0]": "--internal-ip-cidrs=192.0.2.0/24"},
        {"agent.enabled": "false"},
    ],
)
def test_no_warning_with_an_internal_ip_source_or_without_the_agent(
    chart_helm: Helm, set_values: dict[str, str]
) -> None:
    assert WARNING not in notes(chart_helm, **set_values)


def test_ignoring_the_kubelet_s_node_ip_leaves_no_internal_ip_at_all(chart_helm: Helm) -> None:
    text = notes(chart_helm, **{"ipDetection.providedNodeIPPolicy": "ignore"})
    assert "Nodes get NO InternalIP" in text
    text = notes(chart_helm, **{"ipDetection.externalIPTarget": ""})
    assert "otherwise it has only\nits Hostname." in text


@pytest.mark.parametrize("version", [v.removeprefix("v") for v in PLANE_VERSIONS])
def test_the_chart_renders_at_the_oldest_and_newest_tested_kubernetes(
    chart_helm: Helm, version: str
) -> None:
    assert chart_helm.template(kube_version=version)
