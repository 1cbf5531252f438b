"""The chart's controller-manager mode (`controllerManager.enabled`): one Deployment of
local-ccm-controller-manager in the lifecycle controller's place, running both controllers
under one ServiceAccount bound to the union of their RBAC, one Lease, one PodMonitor.
Needs only the helm binary, no API server."""

from __future__ import annotations

from tests.support.chart import CI_DIR, Helm, Obj, args_of, flag, parse, select

VALUES = [CI_DIR / "controller-manager-values.yaml"]


def render(helm: Helm, kube_version: str, **set_values: str) -> list[Obj]:
    return parse(helm.template(kube_version=kube_version, values=VALUES, set_values=set_values))


def component(objs: list[Obj], kind: str, name: str) -> list[Obj]:
    label = "app.kubernetes.io/component"
    return [o for o in select(objs, kind) if o["metadata"].get("labels", {}).get(label) == name]


def test_one_deployment_runs_both_controllers(chart_helm: Helm, kube_version: str) -> None:
    objs = render(chart_helm, kube_version)
    (deployment,) = select(objs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/usr/local/bin/local-ccm-controller-manager"]
    assert flag(deployment, "controllers") == "node-lifecycle,node-ipam"
    assert flag(deployment, "cluster-cidr") == "10.244.0.0/16"
    assert flag(deployment, "leader-elect-id") == "local-ccm-controller-manager"
    assert flag(deployment, "metrics-secure") == "true"
    assert "--enable-leader-election=true" not in args_of(deployment)
    tolerated = {t["key"] for t in deployment["spec"]["template"]["spec"]["tolerations"]}
    assert "node.cloudprovider.kubernetes.io/uninitialized" in tolerated  # IPAM runs first


def test_ipam_objects_of_its_own_are_not_rendered(chart_helm: Helm, kube_version: str) -> None:
    objs = render(chart_helm, kube_version, **{"metrics.podMonitor.enabled": "true"})
    for kind in ("Deployment", "PodDisruptionBudget", "ServiceAccount", "PodMonitor"):
        assert component(objs, kind, "node-ipam-controller") == [], kind
    assert len(select(objs, "PodMonitor")) == 1


def test_the_service_account_is_bound_to_the_union_of_rbac(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version)
    (deployment,) = select(objs, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = select(objs, "ClusterRoleBinding") + select(objs, "RoleBinding")
    bound = {b["roleRef"]["name"] for b in bindings
             if any(s["name"] == account for s in b["subjects"])}  # fmt: skip
    rules = [rule for kind in ("ClusterRole", "Role") for role in select(objs, kind)
             if role["metadata"]["name"] in bound for rule in role["rules"]]  # fmt: skip
    granted = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"]
               for v in r["verbs"]}  # fmt: skip
    ipam = "networking.x-k8s.io"
    wanted = [("", "nodes", "delete"), ("", "nodes", "patch"), (ipam, "clustercidrs", "watch"),
              (ipam, "clustercidrs/status", "patch"), ("", "events", "create"),
              ("coordination.k8s.io", "leases", "update")]  # fmt: skip
    for needed in wanted:
        assert needed in granted, needed
    lease_names = {
        n for r in rules if "leases" in r["resources"] for n in r.get("resourceNames", [])
    }
    assert lease_names == {"local-ccm-controller-manager"}


def test_it_needs_the_lifecycle_controller(chart_helm: Helm, kube_version: str) -> None:
    result = chart_helm.template_result(
        kube_version=kube_version, values=VALUES,
        set_values={"nodeLifecycleController.enabled": "false"},
    )  # fmt: skip
    assert result.code != 0
    assert "needs nodeLifecycleController.enabled=true" in result.output


APPROVER = "controllerManager.kubeletServingApprover"


def csr_rules(objs: list[Obj]) -> list[Obj]:
    return [rule for role in select(objs, "ClusterRole") for rule in role["rules"]
            if "certificates.k8s.io" in rule.get("apiGroups", [])]  # fmt: skip


def test_the_kubelet_serving_approver_is_off_and_grants_nothing_by_default(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version)
    (deployment,) = select(objs, "Deployment")
    assert "kubelet-serving-approver" not in str(flag(deployment, "controllers"))
    assert csr_rules(objs) == []


def test_the_kubelet_serving_approver_on_adds_its_controller_and_rules(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, **{f"{APPROVER}.enabled": "true",
                                               f"{APPROVER}.deny": "false"})  # fmt: skip
    (deployment,) = select(objs, "Deployment")
    assert flag(deployment, "controllers") == "node-lifecycle,node-ipam,kubelet-serving-approver"
    assert flag(deployment, "csr-deny") == "false"
    signers = [r for r in csr_rules(objs) if r["resources"] == ["signers"]]
    assert signers == [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                        "resourceNames": ["kubernetes.io/kubelet-serving"],
                        "verbs": ["approve"]}]  # fmt: skip
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    (binding,) = [b for b in select(objs, "ClusterRoleBinding")
                  if b["roleRef"]["name"].endswith("kubelet-serving-approver")]  # fmt: skip
    assert binding["subjects"][0]["name"] == account


def test_the_kubelet_serving_approver_needs_the_controller_manager(
    chart_helm: Helm, kube_version: str
) -> None:
    result = chart_helm.template_result(
        kube_version=kube_version, values=VALUES,
        set_values={"controllerManager.enabled": "false", f"{APPROVER}.enabled": "true"},
    )  # fmt: skip
    assert result.code != 0
    assert "needs controllerManager.enabled=true" in result.output


def test_the_kubelet_serving_approver_policy_values_reach_its_flags(
    chart_helm: Helm, kube_version: str
) -> None:
    on = {f"{APPROVER}.enabled": "true"}
    (default,) = select(render(chart_helm, kube_version, **on), "Deployment")
    assert flag(default, "csr-ip-prefixes") is None  # no allow-list unless given
    assert flag(default, "csr-max-expiration") == "8808h"  # kubelet-csr-approver's 367 days
    objs = render(chart_helm, kube_version, **on, **{
        f"{APPROVER}.ipPrefixes": "{10.0.0.0/8,fd00::/8}", f"{APPROVER}.maxExpiration": "24h",
    })  # fmt: skip
    (deployment,) = select(objs, "Deployment")
    assert flag(deployment, "csr-ip-prefixes") == "10.0.0.0/8,fd00::/8"
    assert flag(deployment, "csr-max-expiration") == "24h"


def test_approver_prefixes_with_host_bits_or_a_bad_duration_fail_the_render(
    chart_helm: Helm, kube_version: str
) -> None:
    on = {f"{APPROVER}.enabled": "true"}
    host_bits = chart_helm.template_result(
        kube_version=kube_version, values=VALUES,
        set_values={**on, f"{APPROVER}.ipPrefixes": "{10.0.0.1/8}"},
    )  # fmt: skip
    assert host_bits.code != 0
    assert f"{APPROVER}.ipPrefixes: 10.0.0.1/8 has host bits set" in host_bits.output
    bad = chart_helm.template_result(
        kube_version=kube_version, values=VALUES,
        set_values={**on, f"{APPROVER}.maxExpiration": "1 year"},
    )  # fmt: skip
    assert bad.code != 0
    assert "values don't meet the specifications of the schema" in bad.output


NLC_OFF_HOST = {"nodeLifecycleController.hostNetwork": "false",
                "nodeLifecycleController.controller.icmpMode": "datagram"}  # fmt: skip


def pod_spec(objs: list[Obj]) -> Obj:
    (deployment,) = select(objs, "Deployment")
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


def test_the_manager_hosting_node_ipam_runs_on_the_host_network(
    chart_helm: Helm, kube_version: str
) -> None:
    """Pod CIDRs must exist before a CNI that reads them starts, so the manager that assigns
    them cannot wait for a pod network: with node IPAM it is on the host network even when the
    lifecycle controller alone would not be (its unprivileged, datagram-ICMP form)."""
    spec = pod_spec(render(chart_helm, kube_version, **NLC_OFF_HOST))
    assert spec["hostNetwork"] is True
    # The node's resolver: cluster DNS needs the pod network this manager runs before.
    assert spec["dnsPolicy"] == "Default"
    assert "sysctls" not in spec["securityContext"]  # refused with the host's network
    probe = spec["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["host"] == "127.0.0.1"


def test_the_manager_without_node_ipam_keeps_the_lifecycle_controller_s_network(
    chart_helm: Helm, kube_version: str
) -> None:
    off = {"nodeIpamController.enabled": "false", **NLC_OFF_HOST}
    spec = pod_spec(render(chart_helm, kube_version, **off))
    assert spec["hostNetwork"] is False
    assert spec["dnsPolicy"] == "Default"  # the node's resolver: no cluster name is resolved
    assert spec["securityContext"]["sysctls"][0]["name"] == "net.ipv4.ping_group_range"
