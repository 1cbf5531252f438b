"""The chart's node-bmc (`controllerManager.bmc`): off by default and granting nothing; on, the
manager runs it with its flags, the NodeBMC CRD is installed and kept on uninstall, and its
rules are bound to the manager's ServiceAccount: NodeBMCs cluster-wide, Nodes patched, and
Secrets only by `get` in the credentials namespace (the release namespace by default).
Needs only the helm binary, no API server."""

from __future__ import annotations

from typing import Any

import yaml

from local_ccm.bmc.core.observation import POWER_STATUSES
from tests.support.chart import CHART, CI_DIR, Helm, Obj, flag, parse, select

VALUES = [CI_DIR / "controller-manager-values.yaml"]
BMC = "controllerManager.bmc"
CRD_FILE = CHART / "files" / "bmc.local-ccm.io_nodebmcs.yaml"


def render(helm: Helm, kube_version: str, **set_values: str) -> list[Obj]:
    return parse(helm.template(kube_version=kube_version, values=VALUES, set_values=set_values))


def bmc_objects(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if "node-bmc" in o["metadata"]["name"]
            or o["metadata"]["name"] == "nodebmcs.bmc.local-ccm.io"]  # fmt: skip


def secret_rules(objs: list[Obj]) -> list[tuple[str, Any]]:
    return [(role["kind"], rule) for kind in ("ClusterRole", "Role") for role in select(objs, kind)
            for rule in role["rules"] if "secrets" in rule.get("resources", [])]  # fmt: skip


def test_off_by_default_nothing_is_rendered_and_no_secret_is_readable(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version)
    (deployment,) = select(objs, "Deployment")
    assert "node-bmc" not in str(flag(deployment, "controllers"))
    assert flag(deployment, "bmc-poll-interval") is None
    assert bmc_objects(objs) == []
    assert secret_rules(objs) == []


def test_on_the_manager_runs_it_with_its_flags_and_the_crd(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, **{f"{BMC}.enabled": "true",
                                               f"{BMC}.pollInterval": "1m",
                                               f"{BMC}.concurrentPolls": "4"})  # fmt: skip
    (deployment,) = select(objs, "Deployment")
    assert flag(deployment, "controllers") == "node-lifecycle,node-ipam,node-bmc"
    assert flag(deployment, "bmc-poll-interval") == "1m"
    assert flag(deployment, "bmc-concurrent-polls") == "4"
    assert flag(deployment, "bmc-credentials-namespace") == "kube-system"  # the release's
    (crd,) = select(objs, "CustomResourceDefinition", "nodebmcs.bmc.local-ccm.io")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    [source] = [d for d in yaml.safe_load_all(CRD_FILE.read_text()) if d]
    assert crd["spec"] == source["spec"]
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Power", "Reachable", "Reason", "Last Contact", "Age"]
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    # The states the controller writes, as strings (YAML 1.1 reads a bare On/Off as a bool).
    assert status["properties"]["powerState"]["enum"] == list(POWER_STATUSES)
    off = render(chart_helm, kube_version, **{f"{BMC}.enabled": "true",
                                              f"{BMC}.installCRDs": "false"})  # fmt: skip
    assert select(off, "CustomResourceDefinition", "nodebmcs.bmc.local-ccm.io") == []


def test_secrets_are_read_by_get_only_in_the_credentials_namespace(
    chart_helm: Helm, kube_version: str
) -> None:
    values = {f"{BMC}.enabled": "true", f"{BMC}.credentialsNamespace": "bmc-creds"}
    objs = render(chart_helm, kube_version, **values)
    (deployment,) = select(objs, "Deployment")
    assert flag(deployment, "bmc-credentials-namespace") == "bmc-creds"
    [(kind, rule)] = secret_rules(objs)
    assert (kind, rule["verbs"]) == ("Role", ["get"])
    (role,) = [r for r in select(objs, "Role") if r["metadata"]["name"].endswith("-credentials")]
    assert role["metadata"]["namespace"] == "bmc-creds"
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    (binding,) = [b for b in select(objs, "RoleBinding")
                  if b["roleRef"]["name"] == role["metadata"]["name"]]  # fmt: skip
    assert binding["metadata"]["namespace"] == "bmc-creds"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": "kube-system"}]  # fmt: skip
    (cluster,) = [b for b in select(objs, "ClusterRoleBinding")
                  if b["roleRef"]["name"].endswith("-node-bmc")]  # fmt: skip
    assert cluster["subjects"][0]["name"] == account


def test_it_needs_the_controller_manager(chart_helm: Helm, kube_version: str) -> None:
    result = chart_helm.template_result(
        kube_version=kube_version, values=VALUES,
        set_values={"controllerManager.enabled": "false", f"{BMC}.enabled": "true"},
    )  # fmt: skip
    assert result.code != 0
    assert "controllerManager.bmc.enabled runs in local-ccm-controller-manager" in result.output


def test_values_the_binary_would_refuse_fail_the_render(
    chart_helm: Helm, kube_version: str
) -> None:
    for key, value in (("concurrentPolls", "0"), ("concurrentPolls", "500"),
                       ("pollInterval", "soon"), ("pollInterval", "500ms"),
                       ("credentialsNamespace", "Bad_NS")):  # fmt: skip
        result = chart_helm.template_result(
            kube_version=kube_version, values=VALUES,
            set_values={f"{BMC}.enabled": "true", f"{BMC}.{key}": value},
        )  # fmt: skip
        assert result.code != 0, (key, value)
        named = (f"/controllerManager/bmc/{key}", f"controllerManager.bmc.{key}: {value} is under")
        assert any(n in result.output for n in named), result.output
