"""What the chart refuses at render time and the components it can leave out (D15).

Refused: values naming another project's image (the Go original, upstream node-ipam-controller),
upstream IPAM keys it cannot honour, and values the programs would refuse at start-up (CIDRs with
host bits, mask sizes, durations). Each fails `helm template` with a message naming the key. Left
out: the agent (`agent.enabled=false`), for lifecycle-only and IPAM-only installs; the lifecycle
controller of a lifecycle-only render runs under that render's own RBAC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.deploy.release import FORBIDDEN, apply_identity, render
from tests.support.chart import Helm, args_of, component, flag, parse, select
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.podrun import PodFields, run_container

UPSTREAM = Path(__file__).resolve().parent / "upstream-charts"
AGENT_KINDS = ("DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _template(h: Helm, kube_version: str, doc: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(doc))
    result = h.template_result(kube_version=kube_version, values=[values])
    return result.code, result.output


def _ipam(controller: dict[str, Any]) -> dict[str, Any]:
    return {"nodeIpamController": {"enabled": True, "controller": controller}}


# ------------------------------------------------------------------ --reuse-values
# Kubernetes objects the chart passes through whole (toYaml): a user may set them, or parts of
# them, to null, so their absence is no sign of another chart's defaults.
PASSED_THROUGH = {
    "resources", "requests", "limits", "podSecurityContext", "securityContext", "seccompProfile",
    "capabilities", "updateStrategy", "rollingUpdate", "labels",
}  # fmt: skip


def test_d15_the_reuse_values_check_knows_every_section_of_values_yaml() -> None:
    """`local-ccm.valueSections` (_helpers.tpl) lists every section of values.yaml whose keys
    the templates read: a section added without it would make `helm upgrade --reuse-values`
    from an earlier release stop on a nil pointer instead of naming --reset-then-reuse-values."""

    def sections(values: dict[str, Any], prefix: str = "") -> list[str]:
        found = []
        for key, value in values.items():
            if isinstance(value, dict) and value and key not in PASSED_THROUGH:
                found += [f"{prefix}{key}", *sections(value, f"{prefix}{key}.")]
        return found

    chart = Path(__file__).resolve().parents[3] / "charts" / "local-ccm"
    helpers = (chart / "templates" / "_helpers.tpl").read_text()
    define = '{{- define "local-ccm.valueSections" -}}\n'
    body = helpers.split(define, 1)[1].split("\n{{- end", 1)[0]
    expected = sections(yaml.safe_load((chart / "values.yaml").read_text()))
    assert body.splitlines() == expected, (
        "add each new section of values.yaml to local-ccm.valueSections in _helpers.tpl"
    )


# ------------------------------------------------------------------ other projects' values
@pytest.mark.parametrize("chart", ["local-ccm-v0.2.1", "local-ccm-v0.3.0"])
def test_d15_go_chart_values_fail_naming_every_image_key(
    chart_helm: Helm, kube_version: str, chart: str
) -> None:
    values = UPSTREAM / chart / "values.yaml"
    result = chart_helm.template_result(kube_version=kube_version, values=[values])
    assert result.code != 0
    out = result.output
    assert "nothing was changed" in out, out
    assert "- image.repository=ghcr.io/cozystack/local-ccm is the Go original's image" in out
    tag = yaml.safe_load(values.read_text())["image"]["tag"]
    assert f"- image.tag={tag} is a release of the Go original" in out, out
    if chart.endswith("v0.3.0"):
        assert "- nodeLifecycleController.image.repository=ghcr.io/cozystack/local-ccm" in out


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"image": {"tag": "v0.3.0"}}, "- image.tag=v0.3.0 is a release of the Go original"),
        (
            {"agent": {"enabled": False}, "image": {"repository": "ghcr.io/cozystack/local-ccm"}},
            "- image.repository=ghcr.io/cozystack/local-ccm is the Go original's image",
        ),
        (
            {"image": {"repository": "mirror.example/cozystack/local-ccm"}},
            "- image.repository=mirror.example/cozystack/local-ccm is the Go original's image",
        ),
        (
            {"nodeLifecycleController": {"image": {"tag": "0.2.1"}}},
            "- nodeLifecycleController.image.tag=0.2.1 is a release of the Go original",
        ),
        (
            {
                "nodeIpamController": {
                    "enabled": True,
                    "image": {"repository": "registry.k8s.io/node-ipam-controller"},
                }
            },
            "- nodeIpamController.image.repository=registry.k8s.io/node-ipam-controller is",
        ),
        (
            {"nodeIpamController": {"enabled": True, "image": {"tag": "0.0.1"}}},
            "- nodeIpamController.image.tag=0.0.1 is an upstream node-ipam-controller release",
        ),
        (
            {"nodeIpamController": {"enabled": True, "nameOverride": "ipam"}},
            "- nodeIpamController.nameOverride (upstream node-ipam-controller's chart)",
        ),
        (
            {"nodeIpamController": {"enabled": True, "service": {"port": 9000}}},
            "- nodeIpamController.service.port=9000 is not supported",
        ),
    ],
)
def test_d15_foreign_values_fail_with_the_key_to_remove(
    chart_helm: Helm, kube_version: str, tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    assert message in out, out


def test_d15_a_disabled_component_is_not_checked(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    doc = {"nodeIpamController": {"enabled": False, "image": {"tag": "0.0.1"}}}
    assert _template(chart_helm, kube_version, doc, tmp_path)[0] == 0


def test_d15_upstream_ipam_values_nested_fail_only_for_the_image(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    upstream = yaml.safe_load(
        (UPSTREAM / "node-ipam-controller-aa9996c" / "values.yaml").read_text()
    )
    nested = {"nodeIpamController": {**upstream, "enabled": True}}
    code, out = _template(chart_helm, kube_version, nested, tmp_path)
    assert code != 0
    problems = [line for line in out.splitlines() if line.startswith("- ")]
    assert problems == [
        "- nodeIpamController.image.repository=registry.k8s.io/node-ipam-controller is upstream "
        "kubernetes-sigs/node-ipam-controller's image: remove nodeIpamController.image.repository"
        " and nodeIpamController.image.tag, the chart then runs its own image"
    ], out
    del upstream["image"]["repository"]
    upstream["leaderElection"]["resourceLock"] = "leases"
    code, out = _template(
        chart_helm,
        kube_version,
        nested | {"nodeIpamController": {**upstream, "enabled": True}},
        tmp_path,
    )
    assert code == 0, out
    ipam = component(parse(out), "node-ipam-controller")
    assert flag(ipam, "leader-elect-resource-lock") == "leases"
    assert ipam["spec"]["replicas"] == 1


# ------------------------------------------------------------------ what the programs refuse
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_ipam({"clusterCIDRs": ["10.244.0.1/16"]}), "clusterCIDRs: 10.244.0.1/16 has host bits"),
        (_ipam({"clusterCIDRs": ["10.244.128.0/16"]}), "10.244.128.0/16 has host bits set"),
        (_ipam({"clusterCIDRs": ["fd00:10:244::1/56"]}), "fd00:10:244::1/56 has host bits set"),
        (_ipam({"clusterCIDRs": ["fd00:10:244:80::/56"]}), "fd00:10:244:80::/56 has host bits"),
        (_ipam({"clusterCIDRs": ["2001:db8::8/61"]}), "2001:db8::8/61 has host bits set"),
        (_ipam({"serviceClusterIPRanges": ["10.96.0.1/12"]}), "10.96.0.1/12 has host bits set"),
        (_ipam({"clusterCIDRs": ["10.0.0.0/16", "10.1.0.0/16"]}), "at most one IPv4 and one IPv6"),
        (
            _ipam({"clusterCIDRs": ["10.0.0.0/16"], "nodeCIDRMaskSizeIPv4": 8}),
            "nodeCIDRMaskSizeIPv4=8 is shorter than the prefix of 10.0.0.0/16",
        ),
        (
            _ipam({"clusterCIDRs": ["fd00::/48"], "nodeCIDRMaskSizeIPv6": 80}),
            "nodeCIDRMaskSizeIPv6=80: fd00::/48 would have more than 65536 blocks",
        ),
        (
            {"ipDetection": {"internalIPCIDRs": "10.0.0.0/8, !10.1.2.3/16"}},
            "ipDetection.internalIPCIDRs: 10.1.2.3/16 has host bits set",
        ),
        (
            {"ipDetection": {"externalIPSubnet": "192.0.2.1/24"}},
            "ipDetection.externalIPSubnet: 192.0.2.1/24 has host bits set",
        ),
        ({"controller": {"settleTime": "10m"}}, "controller.settleTime: 10m is over 5m"),
        ({"controller": {"resyncInterval": "30s"}}, "controller.resyncInterval: 30s is under 1m"),
        (
            {"controller": {"reconcileInterval": "2h"}},
            "controller.resyncInterval: 30m is shorter than controller.reconcileInterval 2h",
        ),
        ({"controller": {"reconcileInterval": "0"}}, "controller.reconcileInterval: 0 is under 1s"),
        (
            {"l2Announcement": {"enabled": True, "leaseDuration": "2s", "renewDeadline": "4s"}},
            "l2Announcement: leaseDuration 2s must be greater than renewDeadline 4s",
        ),
        (
            {"l2Announcement": {"enabled": True, "renewDeadline": "2s", "renewPeriod": "2s"}},
            "l2Announcement: renewDeadline 2s must be greater than 1.2 x renewPeriod 2s",
        ),
        (
            {"nodeLifecycleController": {"controller": {"maxUnhealthy": "101%"}}},
            "maxUnhealthy: 101% is over 100%",
        ),
        (
            {"nodeLifecycleController": {"controller": {"notReadyTimeout": "0s"}}},
            "notReadyTimeout: 0s must be more than 0",
        ),
        (
            {"nodeLifecycleController": {"controller": {"probe": "icmp,tcp:99999"}}},
            "probe: tcp:99999 needs a port 1-65535",
        ),
        (
            {"nodeIpamController": {"enabled": True, "leaderElection": {"leaseDuration": "5s"}}},
            "nodeIpamController.leaderElection: leaseDuration 5s must be greater than "
            "renewDeadline 10s",
        ),
        (
            {
                "controllerManager": {
                    "enabled": True,
                    "loadBalancer": {"enabled": True, "serviceCIDRs": ["10.96.0.1/12"]},
                }
            },
            "controllerManager.loadBalancer.serviceCIDRs: 10.96.0.1/12 has host bits set",
        ),
        ({"image": {"repository": ""}}, "image.repository is empty"),
        ({"controller": {"providerID": "local://{bogus}"}}, "unknown placeholder {bogus}"),
        ({"controller": {"providerID": "{system_uuid}"}}, "must contain ://"),
    ],
)
def test_d15_values_the_programs_refuse_fail_the_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    assert "values the chart or the binaries would refuse (every one listed)" in out, out
    assert message in out, out


def test_d15_every_refused_value_is_listed_in_one_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    """Not the first problem only: an operator fixes them all in one round."""
    doc = {
        "controller": {"settleTime": "10m"},
        "controllerManager": {"enabled": False, "kubeletServingApprover": {"enabled": True},
                              "loadBalancer": {"enabled": True},
                              "bmc": {"enabled": True, "fencing": True}},
    }  # fmt: skip
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    for part in ("settleTime", "kubeletServingApprover", "loadBalancer.enabled", "bmc.enabled",
                 "bmc.fencing"):  # fmt: skip
        assert f"controllerManager.{part}" in out or f"controller.{part}" in out, (part, out)


@pytest.mark.parametrize(
    "doc",
    [
        _ipam({"nodeCIDRMaskSizeIPv4": 33}),
        _ipam({"nodeCIDRMaskSizeIPv6": 129}),
        _ipam({"nodeCIDRMaskSizeIPv4": -1}),
        _ipam({"clusterCIDRs": ["10.0.0.0"]}),
        _ipam({"clusterCIDRs": ["10.0.0.0/33"]}),
        _ipam({"clusterCIDRs": ["fd00::/129"]}),
        _ipam({"clusterCIDRs": ["10.0.0.0/8", "fd00::/48", "10.1.0.0/16"]}),
        {"controller": {"reconcileInterval": "10 s"}},
        {"controller": {"settleTime": "5min"}},
        {"nodeLifecycleController": {"controller": {"notReadyTimeout": "-5m"}}},
        {"nodeLifecycleController": {"leaderElection": {"leaseDuration": "15"}}},
        {"nodeIpamController": {"leaderElection": {"retryPeriod": "2 s"}}},
        {"nodeIpamController": {"leaderElection": {"resourceLock": "configmaps"}}},
    ],
)
def test_d15_schema_refuses_malformed_cidrs_masks_and_durations(
    chart_helm: Helm, kube_version: str, tmp_path: Path, doc: dict[str, Any]
) -> None:
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    assert "values don't meet the specifications of the schema" in out, out


@pytest.mark.parametrize("key", ["internalIPCIDRs", "externalIPCIDRs", "externalIPSubnet"])
@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "10.0.0.0/999", "2001:db8::/129"])
def test_d15_a_prefix_longer_than_its_family_fails_naming_it(
    chart_helm: Helm, kube_version: str, tmp_path: Path, key: str, cidr: str
) -> None:
    """/999 had ended in a division by zero inside a template, /33 had rendered."""
    code, out = _template(chart_helm, kube_version, {"ipDetection": {key: cidr}}, tmp_path)
    assert code != 0
    longest = 128 if ":" in cidr else 32
    assert f"- ipDetection.{key}: {cidr} has a prefix longer than {longest} bits" in out, out
    assert "divide by zero" not in out


def test_d15_pool_addresses_admission_cannot_see_fail_the_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    """Found at install by the pools' post-install hook, they left a failed release with its
    workloads created; every one is listed at render now."""
    bad = ["10.0.0.9-10.0.0.2", "10.0.0.0/33", "10.0.0.1/24", "fd00::9-fd00::1",
           "10.0.0.1-fd00::1", "2001:db8::1/64"]  # fmt: skip
    good = ["10.1.0.0/24", "10.2.0.1-10.2.0.9", "fd00::1-fd00::ff", "2001:db8:1::/120"]
    doc = {"controllerManager": {"enabled": True, "loadBalancer": {"enabled": True, "pools": [
        {"name": "a", "addresses": bad}, {"name": "b", "addresses": good}]}}}  # fmt: skip
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    key = "controllerManager.loadBalancer.pools[0].addresses"
    whys = ["starts after it ends", "has a prefix longer than 32 bits", "has host bits set",
            "starts after it ends", "mixes IPv4 and IPv6", "has host bits set"]  # fmt: skip
    for entry, why in zip(bad, whys, strict=True):
        assert f"- {key}: {entry} {why}" in out, (entry, out)
    assert "pools[1]" not in out
    only_good = {"controllerManager": {"enabled": True, "loadBalancer": {
        "enabled": True, "pools": [{"name": "b", "addresses": good}]}}}  # fmt: skip
    code, out = _template(chart_helm, kube_version, only_good, tmp_path)
    assert code == 0, out


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"apiServer": {"host": "https://cp.example:6443"}}, 'apiServer.host: "https://cp.'),
        ({"apiServer": {"host": "cp.example:6443"}}, "the port is apiServer.port"),
        ({"apiServer": {"host": "[fd00::1]:6443"}}, 'apiServer.host: "[fd00::1]:6443" must'),
        ({"image": {"tag": "v1.0 "}}, "at '/image/tag'"),
        ({"nodeLifecycleController": {"image": {"tag": "@sha256:" + "0" * 64}}},
         "at '/nodeLifecycleController/image/tag'"),
        ({"nodeIpamController": {"image": {"tag": "v1:2"}}}, "at '/nodeIpamController/image/tag'"),
        ({"admissionPolicy": {"validationActions": ["Deny", "Warn"]}}, "Deny and Warn together"),
        ({"agent": {"enabled": False}, "nodeLifecycleController": {"enabled": False}},
         "the release would install nothing"),
    ],
)  # fmt: skip
def test_d15_values_the_api_server_or_the_pods_would_trip_on_fail_the_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path, doc: dict[str, Any], message: str
) -> None:
    """Each rendered, then failed at install (Deny with Warn), at bootstrap (a host with a
    scheme or port in KUBERNETES_SERVICE_HOST), at pull (a tag no registry takes), or installed
    nothing while NOTES said it did."""
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code != 0
    assert message in out, out


def test_d15_a_tag_with_a_digest_renders_as_the_image_reference(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    digest = "@sha256:" + "a" * 64
    code, out = _template(chart_helm, kube_version, {"image": {"tag": "v9.9.9" + digest}},
                          tmp_path)  # fmt: skip
    assert code == 0, out
    assert f"image: ghcr.io/local-ccm/local-ccm:v9.9.9{digest}" in out.replace('"', "")


@pytest.mark.parametrize("host", ["cp.example", "10.0.0.1", "fd00::1", "localhost"])
def test_d15_a_bare_host_renders(
    chart_helm: Helm, kube_version: str, tmp_path: Path, host: str
) -> None:
    code, out = _template(chart_helm, kube_version, {"apiServer": {"host": host}}, tmp_path)
    assert code == 0, out


def test_d15_a_misspelt_metadata_rule_key_fails_naming_each_rule(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    """The agent would exit 2 on every node; the schema stops it at render, every rule listed."""
    rules = [{"name": "a", "match": {"nodeName": "^x", "dmi": {"sysVendor": "Dell"}},
              "zone": "z1", "colour": "red"},
             {"name": "b", "mtch": {"nodeName": "^y"}, "zone": 3},
             {"zone": "z3"}]  # fmt: skip
    code, out = _template(chart_helm, kube_version, {"nodeMetadata": {"rules": {"rules": rules}}},
                          tmp_path)  # fmt: skip
    assert code != 0
    assert "at '/nodeMetadata/rules/rules/0': additional properties 'colour' not allowed" in out
    assert "at '/nodeMetadata/rules/rules/1': additional properties 'mtch' not allowed" in out
    assert "at '/nodeMetadata/rules/rules/2': missing property 'name'" in out, out


def test_d15_unquoted_numbers_in_metadata_rules_fail_the_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    """Helm reads an unquoted `zone: 07` as 7 and `010` as 8: the label would silently differ
    from the values file, so label values and patterns must be strings."""
    values = tmp_path / "values.yaml"
    rule = "{name: a, zone: 07, labels: {local-ccm.io/rack: 010}}"
    values.write_text(f"nodeMetadata:\n  rules:\n    rules:\n      - {rule}\n")
    result = chart_helm.template_result(kube_version=kube_version, values=[values])
    assert result.code != 0
    assert "at '/nodeMetadata/rules/rules/0/zone': got number, want string" in result.output
    assert "/nodeMetadata/rules/rules/0/labels/local-ccm.io~1rack" in result.output, result.output
    values.write_text("nodeMetadata:\n  rules:\n    rules: [{name: a, zone: '07'}]\n")
    assert chart_helm.template_result(kube_version=kube_version, values=[values]).code == 0


def test_d15_the_documented_metadata_rules_render(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    rule = {"name": "rack-a",
            "match": {"nodeName": "^(?P<region>fra[0-9])-", "addresses": ["10.1.0.0/24"],
                      "dmi": {"sysVendor": "^Dell"},
                      "labels": {"node-role.kubernetes.io/storage": ""}},
            "zone": "rack-a", "region": "{nodeName.region}", "instanceType": "{dmi.productName}",
            "labels": {"local-ccm.io/rack": "a"}}  # fmt: skip
    doc = {"nodeMetadata": {"rules": {"defaultInstanceType": True, "rules": [rule]}}}
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code == 0, out


def test_d15_default_pool_values_render_the_controller_flags(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    doc = _ipam(
        {
            "clusterCIDRs": ["10.244.128.0/17", "fd00:10:244:100::/56"],
            "nodeCIDRMaskSizeIPv4": 26,
            "nodeCIDRMaskSizeIPv6": 72,
            "serviceClusterIPRanges": ["10.96.0.0/12", "::/0"],
        }
    )
    code, out = _template(chart_helm, kube_version, doc, tmp_path)
    assert code == 0, out
    ipam = component(parse(out), "node-ipam-controller")
    assert flag(ipam, "cluster-cidr") == "10.244.128.0/17,fd00:10:244:100::/56"
    assert flag(ipam, "node-cidr-mask-size-ipv4") == "26"
    assert flag(ipam, "node-cidr-mask-size-ipv6") == "72"
    assert flag(ipam, "service-cluster-ip-range") == "10.96.0.0/12,::/0"
    default = component(
        parse(_template(chart_helm, kube_version, _ipam({}), tmp_path)[1]), "node-ipam-controller"
    )
    assert flag(default, "cluster-cidr") is None
    assert flag(default, "node-cidr-mask-size-ipv4") == "24"
    ipam_on = {"nodeIpamController.enabled": "true"}
    assert "There is no default pool" in chart_helm.notes(set_values=ipam_on).stdout
    pool = {**ipam_on, "nodeIpamController.controller.clusterCIDRs": "{10.244.0.0/16}"}
    notes = chart_helm.notes(set_values=pool)
    assert "from the default pool 10.244.0.0/16." in notes.stdout, notes.output


# ------------------------------------------------------------------ leaving the agent out
def test_d15_without_the_agent_nothing_of_it_is_rendered(
    chart_helm: Helm, kube_version: str, tmp_path: Path
) -> None:
    code, out = _template(chart_helm, "1.30.0", {"agent": {"enabled": False}}, tmp_path)
    assert code == 0, out
    objs = parse(out)
    assert not [o for o in objs if o["kind"] in AGENT_KINDS]
    labels = [o["metadata"].get("labels", {}).get("app.kubernetes.io/component") for o in objs]
    assert "agent" not in labels
    assert [w["metadata"]["name"] for w in select(objs, "Deployment")] == [
        "local-ccm-node-lifecycle-controller"
    ]
    notes = chart_helm.notes(set_values={"agent.enabled": "false"})
    assert "The agent is disabled" in notes.stdout, notes.output
    assert "--cloud-provider=external" not in notes.stdout


def test_d15_lifecycle_only_install_runs_under_its_own_rbac(
    *,
    control_plane: ControlPlane,
    chart_helm: Helm,
    track: Tracker,
    make_node: NodeFactory,
    unique_name: str,
    test_namespace: str,
    test_labels: dict[str, str],
    kube_version: str,
    test_artifacts: Path,
) -> None:
    values = {
        "agent": {"enabled": False},
        "nodeLifecycleController": {"leaderElection": {"resourceName": unique_name}},
    }
    rel = render(
        chart_helm,
        release=unique_name,
        namespace=test_namespace,
        labels=test_labels,
        kube_version=kube_version,
        values=values,
    )
    assert not [o for o in rel.objects if o["kind"] in AGENT_KINDS]
    apply_identity(control_plane, track, rel)
    nlc = component(rel.objects, "node-lifecycle-controller")
    assert "--namespace=$(POD_NAMESPACE)" in args_of(nlc)
    sa = nlc["spec"]["template"]["spec"]["serviceAccountName"]
    node = make_node()["metadata"]["name"]
    fields = PodFields(test_namespace, f"{unique_name[:50]}-nlc", node)
    outcome = run_container(
        nlc,
        fields=fields,
        log_path=test_artifacts / "nlc.log",
        kubeconfig=control_plane.token_kubeconfig(sa, test_namespace),
    )
    assert outcome.healthy, outcome.log
    assert outcome.exit_code == 0, outcome.log
    assert not FORBIDDEN.search(outcome.log), outcome.log
