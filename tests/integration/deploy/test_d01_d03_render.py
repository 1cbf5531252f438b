"""helm lint, helm template and the rendered manifests (D01-D03).
Needs only the helm binary, no API server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local_ccm.agent.rulesfile import load_rules
from tests.support.chart import (
    CHART,
    DEPLOY,
    IPAM_MINIMUM_KUBE_VERSION,
    OLDEST_KUBE_VERSION,
    OLDEST_POLICY_KUBE_VERSION,
    Helm,
    Obj,
    args_of,
    ci_values,
    component,
    container,
    flag,
    one,
    parse,
    select,
    values_set_name,
)

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("LOCAL_CCM_UPDATE_GOLDEN") == "1"
RENDER_SETS: dict[str, list[Path]] = {
    "default": [],
    **{values_set_name(p): [p] for p in ci_values()},
    "static": [DEPLOY / "values" / "static.yaml"],
}
EXPECTED_SETS = {
    "default", "original-v0.3.0", "all-features", "minimal", "nlc-unprivileged", "talos",
    "static", "ipam-only", "lifecycle-only", "controller-manager", "load-balancer",
}  # fmt: skip


#: The sets with agent.enabled=false.
AGENTLESS_SETS = {"ipam-only", "lifecycle-only", "controller-manager", "load-balancer"}


def render(chart_helm: Helm, kube_version: str, name: str = "default", **kw: object) -> list[Obj]:
    return parse(chart_helm.template(kube_version=kube_version, values=RENDER_SETS[name], **kw))


def test_d02_render_sets_cover_the_documented_ones() -> None:
    assert set(RENDER_SETS) >= EXPECTED_SETS, sorted(RENDER_SETS)


# ------------------------------------------------------------------ D01
@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d01_helm_lint_strict_passes(chart_helm: Helm, kube_version: str, name: str) -> None:
    result = chart_helm.lint(kube_version=kube_version, values=RENDER_SETS[name])
    assert result.code == 0, result.output


# ------------------------------------------------------------------ D02
@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d02_template_matches_the_golden_file(
    chart_helm: Helm, kube_version: str, name: str
) -> None:
    rendered = chart_helm.template(kube_version=kube_version, values=RENDER_SETS[name])
    assert parse(rendered), "nothing rendered"
    golden = GOLDEN / f"{name}.yaml"
    if UPDATE_GOLDEN:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert golden.is_file(), f"{golden} missing: run with LOCAL_CCM_UPDATE_GOLDEN=1"
    assert rendered == golden.read_text(), f"{name} changed: review, then LOCAL_CCM_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d02_template_at_the_oldest_claimed_versions(chart_helm: Helm, name: str) -> None:
    assert render(chart_helm, IPAM_MINIMUM_KUBE_VERSION, name)
    if name == "ipam-only":  # below 1.31 the chart refuses IPAM (D03), and then it is all
        result = chart_helm.template_result(kube_version=OLDEST_POLICY_KUBE_VERSION,
                                            values=RENDER_SETS[name])  # fmt: skip
        assert result.code != 0
        assert "nodeIpamController requires Kubernetes >= 1.31" in result.output
        return
    # Below 1.31 IPAM is refused by the chart (D03), so the older renders leave it out.
    ipam_off = {"nodeIpamController.enabled": "false"}
    assert chart_helm.template(kube_version=OLDEST_POLICY_KUBE_VERSION, values=RENDER_SETS[name],
                               set_values=ipam_off)  # fmt: skip
    no_policy = {"admissionPolicy.enabled": "false", **ipam_off}
    old = chart_helm.template(kube_version=OLDEST_KUBE_VERSION, values=RENDER_SETS[name],
                              set_values=no_policy)  # fmt: skip
    kinds = {o["kind"] for o in parse(old)}
    assert "ValidatingAdmissionPolicy" not in kinds
    assert ("DaemonSet" in kinds) == (name not in AGENTLESS_SETS)


def test_d02_original_values_render_a_consistent_root_pod(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, "original-v0.3.0")
    agent = component(objs, "agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is False
    sc = container(agent)["securityContext"]
    assert sc["runAsUser"] == 0
    assert sc["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    assert container(agent)["imagePullPolicy"] == "Always"
    assert container(agent)["image"].startswith("ghcr.io/local-ccm/local-ccm:v")
    assert container(agent)["resources"]["limits"] == {"cpu": "100m", "memory": "64Mi"}
    nlc = component(objs, "node-lifecycle-controller")
    assert nlc["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in {o["kind"] for o in objs}
    assert nlc["spec"]["template"]["spec"]["securityContext"] == {"runAsNonRoot": False}
    result = chart_helm.template_result(kube_version=kube_version,
                                        values=RENDER_SETS["original-v0.3.0"])  # fmt: skip
    notes = chart_helm.notes(values=RENDER_SETS["original-v0.3.0"])
    assert result.code == 0
    assert "Neither root nor NET_ADMIN nor NET_RAW is needed" in notes.stdout, notes.output


# ------------------------------------------------------------------ D03
@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        ({"metrics.podMonitor.enabled": "true", "metrics.podMonitor.agent": "true"},
         "metrics.podMonitor.agent=true needs metrics.enabled=true"),
        ({"nodeLifecycleController.replicaCount": "2",
          "nodeLifecycleController.leaderElection.enabled": "false"},
         "replicaCount > 1 needs nodeLifecycleController.leaderElection.enabled=true"),
    ],
)  # fmt: skip
def test_d03_render_fails_with_the_documented_message(
    chart_helm: Helm, set_values: dict[str, str], message: str
) -> None:
    result = chart_helm.template_result(kube_version=OLDEST_KUBE_VERSION, set_values=set_values)
    assert result.code != 0
    assert message in result.output, result.output


@pytest.mark.parametrize("set_values", [{}, {"admissionPolicy.enabled": "false"}])
def test_d03_below_the_oldest_supported_version_helm_refuses(
    chart_helm: Helm, set_values: dict[str, str]
) -> None:
    """1.30 is the oldest Kubernetes the tests run; below it nothing renders, with or without
    the admission policy (Chart.yaml kubeVersion)."""
    result = chart_helm.template_result(kube_version="1.29.9", set_values=set_values)
    assert result.code != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in result.output, result.output


def test_d03_ipam_below_1_31_fails_with_the_documented_message(chart_helm: Helm) -> None:
    ipam_on = {"nodeIpamController.enabled": "true"}
    result = chart_helm.template_result(kube_version="1.30.0", set_values=ipam_on)
    assert result.code != 0
    assert "nodeIpamController requires Kubernetes >= 1.31" in result.output, result.output
    at_minimum = chart_helm.template_result(
        kube_version=IPAM_MINIMUM_KUBE_VERSION, set_values=ipam_on
    )
    assert at_minimum.code == 0, at_minimum.output


def test_d03_policy_disabled_renders_at_the_oldest_version(chart_helm: Helm) -> None:
    result = chart_helm.template_result(
        kube_version=OLDEST_KUBE_VERSION, set_values={"admissionPolicy.enabled": "false"}
    )
    assert result.code == 0, result.output


@pytest.mark.parametrize(
    "set_values",
    [
        {"controller.reconcileInterval": "10"},
        {"ipDetection.internalIPTarget": "10.0.0.300"},
        {"ipDetection.externalIPTarget": "dns.example"},
        {"nodeLifecycleController.controller.icmpMode": "rawr"},
        {"controller.unknownKey": "x"},
        {"admissionPolicy.validationActions[0]": "Allow"},
    ],
)
def test_d03_schema_rejects_invalid_values(
    chart_helm: Helm, kube_version: str, set_values: dict[str, str]
) -> None:
    result = chart_helm.lint(kube_version=kube_version, set_values=set_values)
    assert result.code != 0, result.output


# ------------------------------------------------------------------ rendered assertions
def test_agent_pod_is_host_network_tolerates_everything_and_is_node_critical(
    chart_helm: Helm, kube_version: str
) -> None:
    agent = component(render(chart_helm, kube_version), "agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "Default"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    sc = container(agent)["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    assert "volumes" not in pod
    assert container(agent)["command"] == ["/usr/local/bin/local-ccm"]
    assert args_of(agent)[0] == "--node-name=$(NODE_NAME)"
    assert flag(agent, "external-ip-target") == "8.8.8.8"
    assert flag(agent, "health-probe-bind-address") == "127.0.0.1:8093"
    assert flag(agent, "metrics-bind-address") == "127.0.0.1:8092"
    assert flag(agent, "internal-ip-target") is None
    assert flag(agent, "interface-exclude") is None
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container(agent)[probe]["httpGet"]["host"] == "127.0.0.1"
    assert agent["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0


def test_selectors_are_compatible_and_never_overlap(chart_helm: Helm, kube_version: str) -> None:
    objs = render(chart_helm, kube_version, "all-features")
    agent = component(objs, "agent")
    assert agent["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "local-ccm", "app.kubernetes.io/instance": "local-ccm",
        "app": "local-ccm", "component": "node-controller",
    }  # fmt: skip
    workloads = [component(objs, c) for c in
                 ("agent", "node-lifecycle-controller", "node-ipam-controller")]  # fmt: skip
    for w in workloads:
        selector = w["spec"]["selector"]["matchLabels"].items()
        for other in workloads:
            labels = other["spec"]["template"]["metadata"]["labels"].items()
            assert (selector <= labels) == (w is other), (w["metadata"]["name"], labels)


def test_no_component_needs_cluster_dns_or_the_service_ip_when_api_server_is_set(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, "all-features")
    for name in ("agent", "node-lifecycle-controller", "node-ipam-controller"):
        w = component(objs, name)
        env = {e["name"]: e.get("value") for e in container(w)["env"]}
        assert env["KUBERNETES_SERVICE_HOST"] == "api.cluster.example", name
        assert env["KUBERNETES_SERVICE_PORT"] == "6443", name
        assert w["spec"]["template"]["spec"]["dnsPolicy"] == "Default", name
    for name in ("agent", "node-ipam-controller"):  # the lifecycle controller: its pod network
        assert component(objs, name)["spec"]["template"]["spec"]["hostNetwork"] is True, name


def api_env(objs: list[Obj], name: str) -> dict[str, str | None]:
    env = {e["name"]: e.get("value") for e in container(component(objs, name))["env"]}
    return {k: env.get(k) for k in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.0.0.53", "::1", "[::1]",
                                  "LocalHost"])  # fmt: skip
def test_a_node_local_api_server_stays_with_the_pods_on_the_host_network(
    chart_helm: Helm, kube_version: str, host: str
) -> None:
    """KubePrism (localhost:7445) or a node's own proxy answers only in the node's network
    namespace: the lifecycle controller in a namespace of its own would be refused there, so
    it keeps the in-cluster `kubernetes` Service; host-network Pods get the endpoint."""
    local = {"apiServer.host": host, "apiServer.port": "7445",
             "nodeIpamController.enabled": "true"}  # fmt: skip
    objs = render(chart_helm, kube_version, set_values=local)
    # In brackets as in a URL, it is given without them: the components add them, as for the
    # kubelet's own variable, which has none.
    bare = host.removeprefix("[").removesuffix("]")
    expected = {"KUBERNETES_SERVICE_HOST": bare, "KUBERNETES_SERVICE_PORT": "7445"}
    assert api_env(objs, "agent") == expected
    assert api_env(objs, "node-ipam-controller") == expected  # hostNetwork by default
    assert api_env(objs, "node-lifecycle-controller") == dict.fromkeys(expected)
    on_host = {**local, "nodeLifecycleController.hostNetwork": "true",
               "nodeIpamController.hostNetwork": "false"}  # fmt: skip
    objs = render(chart_helm, kube_version, set_values=on_host)
    assert api_env(objs, "node-lifecycle-controller") == expected
    assert api_env(objs, "node-ipam-controller") == dict.fromkeys(expected)
    # Any other endpoint is reachable from every network namespace: every Pod gets it.
    remote = {**local, "apiServer.host": "127.example.com"}
    objs = render(chart_helm, kube_version, set_values=remote)
    assert api_env(objs, "node-lifecycle-controller")["KUBERNETES_SERVICE_HOST"] == (
        "127.example.com"
    )


def nlc_pod(objs: list[Obj]) -> tuple[Obj, Obj]:
    """(pod spec, container) of the lifecycle controller's Deployment."""
    nlc = component(objs, "node-lifecycle-controller")
    return nlc["spec"]["template"]["spec"], container(nlc)


UNPRIVILEGED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
UNPRIVILEGED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                          "capabilities": {"drop": ["ALL"]}}  # fmt: skip
PING_GROUP_RANGE = [{"name": "net.ipv4.ping_group_range", "value": "0 2147483647"}]


@pytest.mark.parametrize("name", ["default", "nlc-unprivileged"])
def test_nlc_is_unprivileged_by_default_with_datagram_icmp_in_its_own_network(
    chart_helm: Helm, kube_version: str, name: str
) -> None:
    pod, c = nlc_pod(render(chart_helm, kube_version, name))
    assert pod["hostNetwork"] is False
    assert pod["dnsPolicy"] == "Default"
    assert pod["securityContext"] == {**UNPRIVILEGED_POD, "sysctls": PING_GROUP_RANGE}
    assert c["securityContext"] == UNPRIVILEGED_CONTAINER
    assert "host" not in c["livenessProbe"]["httpGet"]


def test_nlc_runs_as_root_with_net_raw_only_for_icmp_mode_raw(
    chart_helm: Helm, kube_version: str
) -> None:
    raw = {"nodeLifecycleController.controller.icmpMode": "raw"}
    pod, c = nlc_pod(render(chart_helm, kube_version, set_values=raw))
    assert pod["securityContext"] == {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0,
                                      "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    assert flag(component(render(chart_helm, kube_version, set_values=raw),
                          "node-lifecycle-controller"), "icmp-mode") == "raw"  # fmt: skip
    # No ICMP probe: neither root nor the sysctl, whatever icmpMode says.
    tcp = {**raw, "nodeLifecycleController.controller.probe": "tcp:10250"}
    pod, c = nlc_pod(render(chart_helm, kube_version, set_values=tcp))
    assert pod["securityContext"] == UNPRIVILEGED_POD
    assert c["securityContext"] == UNPRIVILEGED_CONTAINER


def test_nlc_on_the_host_network_leaves_the_range_to_the_host_and_notes_say_so(
    chart_helm: Helm, kube_version: str
) -> None:
    """The API server refuses net.* sysctls in a hostNetwork Pod."""
    host = {"nodeLifecycleController.hostNetwork": "true"}
    pod, c = nlc_pod(render(chart_helm, kube_version, set_values=host))
    assert pod["hostNetwork"] is True
    assert pod["securityContext"] == UNPRIVILEGED_POD
    assert c["securityContext"] == UNPRIVILEGED_CONTAINER
    notes = chart_helm.notes(set_values=host)
    assert "net.ipv4.ping_group_range must contain gid 65532" in notes.stdout, notes.output
    assert "must contain gid 65532" not in chart_helm.notes().stdout


def test_nlc_args_deployment_and_pdb(chart_helm: Helm, kube_version: str) -> None:
    objs = render(chart_helm, kube_version)
    nlc = component(objs, "node-lifecycle-controller")
    assert nlc["metadata"]["name"] == "local-ccm-node-lifecycle-controller"
    assert nlc["spec"]["replicas"] == 2
    assert container(nlc)["command"] == ["/usr/local/bin/node-lifecycle-controller"]
    for name, value in {"namespace": "$(POD_NAMESPACE)", "node-name": "$(NODE_NAME)",
                        "leader-elect": "true", "leader-elect-id": "node-lifecycle-controller",
                        "health-probe-bind-address": ":8091", "metrics-bind-address": ":8090",
                        "probe": "icmp", "icmp-mode": "auto",
                        "max-unhealthy": "40%"}.items():  # fmt: skip
        assert flag(nlc, name) == value, name
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == nlc["spec"]["selector"]["matchLabels"]
    unprobed = render(
        chart_helm, kube_version, set_values={"nodeLifecycleController.controller.pingCount": "0"}
    )
    assert flag(component(unprobed, "node-lifecycle-controller"), "probe") is None


def test_ipam_is_opt_in_and_documents_kcm_allocate_node_cidrs(
    chart_helm: Helm, kube_version: str
) -> None:
    assert not [w for w in select(render(chart_helm, kube_version), "Deployment")
                if "ipam" in w["metadata"]["name"]]  # fmt: skip
    objs = render(chart_helm, kube_version, set_values={"nodeIpamController.enabled": "true"})
    ipam = component(objs, "node-ipam-controller")
    assert container(ipam)["command"] == ["/usr/local/bin/node-ipam-controller"]
    assert flag(ipam, "leader-elect-resource-name") == "node-ipam-controller"
    assert flag(ipam, "webserver-bind-address") == ":8081"
    keys = {
        (t.get("key"), t.get("effect")) for t in ipam["spec"]["template"]["spec"]["tolerations"]
    }
    assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
    assert ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule") in keys
    crd = one(objs, "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    notes = chart_helm.notes(set_values={"nodeIpamController.enabled": "true"})
    assert "--allocate-node-cidrs=false" in notes.stdout, notes.output
    docs = (CHART.parents[1] / "docs" / "install.md").read_text()
    assert "--allocate-node-cidrs=false" in docs


def test_one_image_for_all_components_with_the_app_version_tag(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, set_values={"nodeIpamController.enabled": "true"})
    chart = (CHART / "Chart.yaml").read_text()
    app_version = next(line.split(":", 1)[1].strip() for line in chart.splitlines()
                       if line.startswith("appVersion:"))  # fmt: skip
    images = {container(w)["image"] for w in select(objs, "DaemonSet") + select(objs, "Deployment")}
    assert images == {f"ghcr.io/local-ccm/local-ccm:{app_version}"}


def test_static_set_uses_the_original_names(chart_helm: Helm, kube_version: str) -> None:
    objs = render(chart_helm, kube_version, "static")
    assert one(objs, "DaemonSet")["metadata"]["name"] == "local-ccm"
    assert one(objs, "DaemonSet")["spec"]["selector"]["matchLabels"] == {"app": "local-ccm"}
    nlc = one(objs, "Deployment")
    assert nlc["metadata"]["name"] == "node-lifecycle-controller"
    assert nlc["spec"]["selector"]["matchLabels"] == {"app": "node-lifecycle-controller"}
    names = {o["metadata"]["name"] for o in select(objs, "ClusterRole")}
    # The metrics-reader role is new (the original had none), named like the chart's.
    assert names == {"system:local-ccm", "system:node-lifecycle-controller",
                     "local-ccm-metrics-reader"}  # fmt: skip
    for obj in objs:
        labels = obj["metadata"].get("labels") or {}
        assert "helm.sh/chart" not in labels, obj["metadata"]["name"]
        assert "app.kubernetes.io/managed-by" not in labels, obj["metadata"]["name"]


def test_m07_the_charts_metadata_rules_are_what_the_agent_loads(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    objs = render(chart_helm, kube_version, "all-features")
    (rules,) = [o for o in objs if o["kind"] == "ConfigMap"]
    args = container(component(objs, "agent"))["args"]
    path = "/etc/local-ccm/metadata/rules.yaml"
    assert f"--metadata-rules={path}" in args
    assert "--metadata-beta-labels=true" in args
    assert "--metadata-label-domains=local-ccm.io,example.com" in args
    mounts = container(component(objs, "agent"))["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/etc/local-ccm/metadata"]  # no subPath
    copy = tmp_path / "rules.yaml"
    copy.write_text(rules["data"]["rules.yaml"])
    loaded = load_rules(copy, ("local-ccm.io", "example.com"))
    assert not isinstance(loaded, list), loaded
    assert [r.name for r in loaded.rules] == ["rack-1", "by-name"]
    default = render(chart_helm, kube_version)
    assert not [o for o in default if o["kind"] == "ConfigMap"]
    assert not [a for a in container(component(default, "agent"))["args"] if "metadata" in a]
