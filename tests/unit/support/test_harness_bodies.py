"""Pure builders of the harness: command lines, Node and kwok bodies, PKI."""

from __future__ import annotations

import base64
import ipaddress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support import binaries, cpargs, gobuild, kwok, nodes, pki, recipes

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
STAGE = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: {}\nspec: {{}}\n"


def _apiserver_args() -> list[str]:
    p = Path("/p")
    s = cpargs.ApiserverSettings("http://127.0.0.1:2379", 6443, p, p, p, p, p)
    return cpargs.apiserver_args(Path("/bin/kube-apiserver"), s)


def test_apiserver_flags_follow_the_table() -> None:
    args = _apiserver_args()
    for flag in (
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=127.0.0.1",
        "--advertise-address=192.0.2.1",
        "--service-cluster-ip-range=10.96.0.0/16,fd00:5e::/112",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
        "--allow-privileged=true",
        "--profiling=false",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    ):
        assert flag in args
    assert not any("inflight" in a for a in args)


def test_flags_checked_in_help_include_scale_and_audit_flags() -> None:
    used = cpargs.apiserver_flags_used()
    assert {"secure-port", "audit-log-path", "enable-priority-and-fairness"} <= set(used)


def test_the_audit_log_is_never_rotated_under_a_reader() -> None:
    """The apiserver's log writer rotates at 100 MB unless told a size: a 5 000-Service run
    passed that, and a reader following the file saw nothing more."""
    used = cpargs.apiserver_flags_used()
    assert "audit-log-maxsize" in used
    p = Path("/x")
    settings = cpargs.ApiserverSettings("http://e", 1, p, p, p, p, p, Path("/a"), Path("/l"))
    (size,) = [
        a for a in cpargs.apiserver_args(p, settings) if a.startswith("--audit-log-maxsize=")
    ]
    assert int(size.split("=")[1]) >= 100_000  # MB: more than any run writes


def test_shared_kcm_runs_only_harmless_controllers() -> None:
    s = cpargs.KcmSettings(Path("/kc"), 1, Path("/d"), Path("/ca"))
    args = cpargs.kcm_args(Path("/kcm"), s)
    controllers = next(a for a in args if a.startswith("--controllers=")).split("=", 1)[1]
    assert "node-ipam-controller" not in controllers
    assert "node-lifecycle-controller" not in controllers
    assert "--allocate-node-cidrs=false" in args


def test_etcd_scale_flags_only_for_scale_runs() -> None:
    base = cpargs.EtcdSettings(Path("/d"), 1, 2)
    assert "--unsafe-no-fsync" in cpargs.etcd_args(Path("/etcd"), base)
    assert not any("quota" in a for a in cpargs.etcd_args(Path("/etcd"), base))
    scale = cpargs.EtcdSettings(Path("/d"), 1, 2, scale=True)
    assert "--quota-backend-bytes=8589934592" in cpargs.etcd_args(Path("/etcd"), scale)


def test_units_for_maps_binaries_to_their_build() -> None:
    assert binaries.units_for(["kube-controller-manager", "etcd"]) == {
        "kubernetes": ("kube-controller-manager",),
        "etcd": ("etcd",),
    }
    assert set(binaries.units_for(None)) == {
        "kubernetes", "kubernetes-policy-minimum", "kubernetes-node", "etcd", "kwok", "helm",
        "cosign", "actionlint", "prometheus",
    }  # fmt: skip


def test_the_release_tools_check_the_version_each_prints() -> None:
    assert binaries.units_for(["promtool"]) == {"prometheus": ("promtool",)}
    assert gobuild.prometheus_release("v0.316.0") == "3.16.0"
    assert gobuild.prometheus_release("v0.309.12") == "3.9.12"
    promtool = "promtool, version 3.16.0 (branch: , revision: unknown)\n"
    assert gobuild.version_problem("promtool", "v0.316.0", promtool) is None
    assert gobuild.version_problem("prometheus", "v0.315.0", promtool) is not None
    assert gobuild.version_command("cosign") == ["version"]
    assert gobuild.version_command("actionlint") == ["-version"]
    with pytest.raises(ValueError, match="not a Prometheus module version"):
        gobuild.prometheus_release("v3.16.0")


def test_the_node_binaries_build_from_the_control_plane_pin_in_a_unit_of_their_own() -> None:
    assert binaries.units_for(["kubelet", "kubectl"]) == {"kubernetes-node": ("kubelet", "kubectl")}
    assert recipes.UNITS["kubernetes-node"].pin == recipes.UNITS["kubernetes"].pin
    assert gobuild.version_command("kubectl") == ["version", "--client"]
    assert gobuild.version_problem("kubectl", "v1.37.1", "Client Version: v1.37.1\n") is None
    assert gobuild.version_problem("kubelet", "v1.37.1", "Kubernetes v1.37.1\n") is None
    assert gobuild.version_problem("kube-scheduler", "v1.37.1", "Kubernetes v1.36.0") is not None


def test_the_policy_minimum_apiserver_is_its_own_unit_under_its_own_name() -> None:
    assert binaries.units_for(["kube-apiserver-policy-minimum", "kube-apiserver"]) == {
        "kubernetes-policy-minimum": ("kube-apiserver-policy-minimum",),
        "kubernetes": ("kube-apiserver",),
    }
    unit = recipes.UNITS["kubernetes-policy-minimum"]
    assert unit.binaries == ("kube-apiserver",)  # the file `go build` writes
    assert unit.file_name(recipes.APISERVER_POLICY_MINIMUM) == "kube-apiserver"
    assert binaries.units_for(["kubernetes-policy-minimum"]) == {
        "kubernetes-policy-minimum": (recipes.APISERVER_POLICY_MINIMUM,)
    }


def test_binaries_report_the_pin_of_each_name() -> None:
    pins = gobuild.Pins(
        "v1.37.1", "v1.30.14", "v3.6.16", "v0.8.0", "v4.3.1", "v3.1.3", "v1.7.12", "v0.316.0"
    )
    found = binaries.Binaries(pins, {})
    assert found.version("kube-apiserver") == "v1.37.1"
    assert found.version("kube-apiserver-policy-minimum") == "v1.30.14"
    assert found.version("etcd") == "v3.6.16"


def test_status_patch_carries_the_full_address_list() -> None:
    addrs = [
        {"type": "InternalIP", "address": "192.0.2.10"},
        {"type": "InternalIP", "address": "2001:db8::10"},
    ]
    patch = nodes.status_patch(addresses=addrs)
    assert patch == {"status": {"addresses": addrs}}
    assert nodes.status_patch() is None


def test_ready_condition_uses_the_chosen_transition_time() -> None:
    cond = nodes.ready_condition("False", NOW - timedelta(minutes=10), NOW)
    assert cond["lastTransitionTime"] == "2026-11-21T11:50:00Z"
    assert cond["lastHeartbeatTime"] == "2026-11-21T12:00:00Z"
    with pytest.raises(ValueError, match="True, False or Unknown"):
        nodes.ready_condition("Maybe", NOW, NOW)


def test_node_body_adds_uninitialized_taint_and_provided_ip() -> None:
    body = nodes.node_body("n", {"a": "b"}, uninitialized=True, provided_node_ip="192.0.2.5")
    assert body["spec"]["taints"] == [nodes.UNINITIALIZED_TAINT]
    assert body["metadata"]["annotations"] == {nodes.PROVIDED_NODE_IP: "192.0.2.5"}
    assert "providerID" not in body["spec"]


def test_kwok_config_holds_the_three_stages_and_settings() -> None:
    docs = [STAGE.format(n) for n in (*kwok.STAGES, "node-heartbeat")]
    rendered = list(yaml.safe_load_all(kwok.render_kwok_config(docs, {"nodeLeaseParallelism": 4})))
    assert [d["metadata"]["name"] for d in rendered[:-1]] == list(kwok.STAGES)
    assert rendered[-1]["kind"] == "KwokConfiguration"


def test_kwok_config_without_stages_is_a_harness_bug() -> None:
    with pytest.raises(ValueError, match="missing stages"):
        kwok.render_kwok_config([STAGE.format("node-initialize")])


def test_fake_node_is_selected_by_annotation_with_preset_addresses() -> None:
    addr = {"type": "InternalIP", "address": kwok.loopback_address(300)}
    body = kwok.fake_node_body("n", {"l": "v"}, addresses=[addr], taint=True)
    assert body["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert body["status"]["addresses"] == [
        {"type": "InternalIP", "address": "127.1.1.47"},
        {"type": "Hostname", "address": "n"},
    ]
    assert body["spec"]["taints"][0]["key"] == "kwok.x-k8s.io/node"


def test_serving_certificate_has_the_documented_sans() -> None:
    ca = pki.new_ca("ca", NOW)
    cert = pki.issue_serving(ca, NOW).cert
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert ips == {"127.0.0.1", "::1", "10.96.0.1", "192.0.2.1"}
    assert "kubernetes.default.svc.cluster.local" in san.get_values_for_type(x509.DNSName)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.not_valid_before_utc == NOW - timedelta(minutes=5)
    assert ipaddress.ip_address("::1") in san.get_values_for_type(x509.IPAddress)


def test_client_certificate_has_one_o_per_group() -> None:
    ca = pki.new_ca("ca", NOW)
    cert = pki.issue_client(ca, "alice", ["g1", "g2"], NOW).cert
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["g1", "g2"]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)


def test_kubeconfig_embeds_ca_cert_and_key() -> None:
    ca = pki.new_ca("ca", NOW)
    client = pki.issue_client(ca, "bob", [], NOW)
    doc = yaml.safe_load(
        pki.render_kubeconfig("https://127.0.0.1:1", ca.cert_pem, user="bob", client=client)
    )
    user = doc["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == client.key_pem
    cluster = doc["clusters"][0]["cluster"]
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca.cert_pem
    assert doc["current-context"] == doc["contexts"][0]["name"]
