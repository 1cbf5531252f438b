"""PodMonitors per component: the controllers' can be on while the agent's plain ``/metrics``
stays on 127.0.0.1 (``metrics.enabled=false``). Each component's key under
``metrics.podMonitor`` is null (follow that component's own metrics switch), true (required:
the render fails while its metrics are off) or false (none). Needs only the helm binary."""

from __future__ import annotations

import pytest

from tests.support.chart import Helm, Obj, component, flag, parse, select

AGENT, LIFECYCLE, IPAM = "agent", "node-lifecycle-controller", "node-ipam-controller"
MONITORED = {"metrics.podMonitor.enabled": "true", "nodeIpamController.enabled": "true"}


def render(chart_helm: Helm, kube_version: str, **set_values: str) -> list[Obj]:
    sets = {**MONITORED, **set_values}
    return parse(chart_helm.template(kube_version=kube_version, set_values=sets))


def monitored(objs: list[Obj]) -> set[str]:
    """The components that have a PodMonitor."""
    return {o["metadata"]["labels"]["app.kubernetes.io/component"]
            for o in select(objs, "PodMonitor")}  # fmt: skip


def test_the_controllers_are_monitored_while_the_agent_s_metrics_stay_on_loopback(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version)
    assert monitored(objs) == {LIFECYCLE, IPAM}
    assert flag(component(objs, AGENT), "metrics-bind-address") == "127.0.0.1:8092"


def test_the_agent_is_monitored_when_its_metrics_are_open(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, **{"metrics.enabled": "true"})
    assert monitored(objs) == {AGENT, LIFECYCLE, IPAM}
    assert flag(component(objs, AGENT), "metrics-bind-address") == ":8092"


@pytest.mark.parametrize(
    ("key", "gone"),
    [("agent", AGENT), ("nodeLifecycleController", LIFECYCLE), ("nodeIpamController", IPAM)],
)
def test_a_component_s_podmonitor_can_be_turned_off(
    chart_helm: Helm, kube_version: str, key: str, gone: str
) -> None:
    objs = render(chart_helm, kube_version, **{"metrics.enabled": "true",
                                               f"metrics.podMonitor.{key}": "false"})  # fmt: skip
    assert monitored(objs) == {AGENT, LIFECYCLE, IPAM} - {gone}


@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        ({"metrics.podMonitor.agent": "true"},
         "metrics.podMonitor.agent=true needs metrics.enabled=true"),
        ({"metrics.podMonitor.nodeLifecycleController": "true",
          "nodeLifecycleController.metrics.enabled": "false"},
         "metrics.podMonitor.nodeLifecycleController=true needs "
         "nodeLifecycleController.metrics.enabled=true"),
        ({"metrics.podMonitor.nodeIpamController": "true",
          "nodeIpamController.metrics.enabled": "false"},
         "metrics.podMonitor.nodeIpamController=true needs "
         "nodeIpamController.metrics.enabled=true"),
    ],
)  # fmt: skip
def test_a_required_podmonitor_fails_while_its_metrics_are_off(
    chart_helm: Helm, kube_version: str, set_values: dict[str, str], message: str
) -> None:
    result = chart_helm.template_result(kube_version=kube_version,
                                        set_values={**MONITORED, **set_values})  # fmt: skip
    assert result.code != 0, result.output
    assert message in result.output, result.output


def test_a_controller_with_its_metrics_off_simply_has_none(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, **{"nodeLifecycleController.metrics.enabled": "false"})
    assert monitored(objs) == {IPAM}


def test_the_controller_manager_s_podmonitor_follows_the_lifecycle_key(
    chart_helm: Helm, kube_version: str
) -> None:
    manager = {"controllerManager.enabled": "true", "agent.enabled": "false"}
    assert len(select(render(chart_helm, kube_version, **manager), "PodMonitor")) == 1
    off = {**manager, "metrics.podMonitor.nodeLifecycleController": "false"}
    assert select(render(chart_helm, kube_version, **off), "PodMonitor") == []


def test_notes_warn_about_401_only_for_a_monitored_secure_controller(chart_helm: Helm) -> None:
    warning = "every scrape answers 401"
    assert warning in chart_helm.notes(set_values={"metrics.podMonitor.enabled": "true"}).stdout
    unmonitored = {"metrics.podMonitor.enabled": "true",
                   "metrics.podMonitor.nodeLifecycleController": "false"}  # fmt: skip
    assert warning not in chart_helm.notes(set_values=unmonitored).stdout
