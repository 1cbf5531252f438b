"""The chart's fencing (`controllerManager.bmc.fencing`, off by default): with node-bmc on, the
lifecycle controller's ClusterRole reads NodeBMCs, and with fencing also patches them (the
request annotation), the manager gets `--bmc-fencing` and `--bmc-power-off-timeout`; fencing
without node-bmc or without the out-of-service taint, and a poll interval the lifecycle
controller's `--bmc-max-age` cannot allow for, fail the render. Needs only the helm binary."""

from __future__ import annotations

from tests.support.chart import CI_DIR, Helm, Obj, flag, parse, select

VALUES = [CI_DIR / "controller-manager-values.yaml"]
BMC = "controllerManager.bmc"
OOS = "nodeLifecycleController.controller.outOfServiceTaint"


def render(helm: Helm, kube_version: str, **set_values: str) -> list[Obj]:
    return parse(helm.template(kube_version=kube_version, values=VALUES, set_values=set_values))


def nodebmc_verbs(objs: list[Obj]) -> list[str]:
    """What the lifecycle controller's own ClusterRole grants on nodebmcs."""
    (role,) = [r for r in select(objs, "ClusterRole")
               if r["metadata"]["name"].endswith("-node-lifecycle-controller")]  # fmt: skip
    return [verb for rule in role["rules"] if rule["resources"] == ["nodebmcs"]
            for verb in rule["verbs"]]  # fmt: skip


def test_node_bmc_on_lets_the_lifecycle_controller_read_nodebmcs_and_fencing_patch_them(
    chart_helm: Helm, kube_version: str
) -> None:
    off = render(chart_helm, kube_version)
    assert nodebmc_verbs(off) == []
    reading = render(chart_helm, kube_version, **{f"{BMC}.enabled": "true"})
    (deployment,) = select(reading, "Deployment")
    assert nodebmc_verbs(reading) == ["get", "list", "watch"]
    assert flag(deployment, "bmc-fencing") is None
    assert flag(deployment, "bmc-power-off-timeout") == "2m"
    fencing = render(chart_helm, kube_version, **{f"{BMC}.enabled": "true",
                                                  f"{BMC}.fencing": "true", OOS: "true",
                                                  f"{BMC}.powerOffTimeout": "90s"})  # fmt: skip
    (deployment,) = select(fencing, "Deployment")
    assert nodebmc_verbs(fencing) == ["get", "list", "watch", "patch"]
    assert flag(deployment, "bmc-fencing") == "true"
    assert flag(deployment, "out-of-service-taint") == "true"
    assert flag(deployment, "bmc-power-off-timeout") == "90s"


def test_fencing_without_what_it_needs_fails_the_render(
    chart_helm: Helm, kube_version: str
) -> None:
    cases = [
        ({f"{BMC}.fencing": "true", OOS: "true"}, "it needs controllerManager.bmc.enabled=true"),
        ({f"{BMC}.enabled": "true", f"{BMC}.fencing": "true"},
         f"it needs {OOS}=true"),
        ({f"{BMC}.enabled": "true", f"{BMC}.pollInterval": "2m"}, "--bmc-max-age (2m)"),
        ({f"{BMC}.enabled": "true", f"{BMC}.powerOffTimeout": "10ms"},
         "controllerManager.bmc.powerOffTimeout: 10ms is under 1s"),
    ]  # fmt: skip
    for values, message in cases:
        result = chart_helm.template_result(kube_version=kube_version, values=VALUES,
                                            set_values=values)  # fmt: skip
        assert result.code != 0, values
        assert message in result.output, result.output
