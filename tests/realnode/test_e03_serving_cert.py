"""E03: a real kubelet with ``serverTLSBootstrap: true`` gets its serving certificate through
local-ccm's kubelet-serving-approver, and serves it on :10250.

The kubelet registers with ``--cloud-provider=external`` and no ``--node-ip``: its Node has only
a Hostname, and the kubelet asks for no serving certificate without an IP address. The packaged
chart is installed with the agent and ``local-ccm-controller-manager`` (one replica, on the
node's host network) with ``controllerManager.kubeletServingApprover.enabled``
(docs/csr.md). The agent writes the InternalIP and removes the uninitialized taint; the kubelet
then sends its ``kubernetes.io/kubelet-serving`` CSR, local-ccm approves it (the condition's
reason is the approver's), kube-controller-manager's signer signs it with the plane's client
CA, and a TLS handshake to the node's address, from inside the node's network namespace,
returns exactly the signed certificate, verified against that CA for that IP address.
"""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from local_ccm.csr.api import CSRS, FIELD_SELECTOR, REASON
from local_ccm.csr.options import NAME as APPROVER
from local_ccm.netlink.netns import run_in_netns
from tests.support.binaries import Binaries
from tests.support.realnode_chart import install_chart, node_values, package_chart
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.waiting import eventually

CERT_TIMEOUT = 240.0  # the agent's InternalIP, then the kubelet's CSR, approval and signature
KUBELET_PORT = 10250
HANDSHAKE_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries, server_tls_bootstrap=True) as started:
        yield started


def serving_csrs(cluster: Cluster) -> list[dict[str, Any]]:
    """The kubelet-serving CSRs the node's kubelet sent."""
    items = cluster.kube.list(CSRS, field_selector=FIELD_SELECTOR)["items"]
    user = f"system:node:{cluster.node.spec.name}"
    return [c for c in items if c["spec"]["username"] == user]


@pytest.fixture(scope="module")
def before_install(cluster: Cluster) -> list[dict[str, Any]]:
    """The serving CSRs while the Node (Ready, no IP address yet) waits for the agent."""
    return serving_csrs(cluster)


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster,
    binaries: Binaries,
    before_install: list[dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> float:
    chart = package_chart(tmp_path_factory.mktemp("chart"), binaries.path("helm"))
    values = {
        **node_values(cluster),
        # One replica: a second one would want the same host ports on the only node.
        "nodeLifecycleController": {"enabled": True, "replicaCount": 1},
        "controllerManager": {"enabled": True, "kubeletServingApprover": {"enabled": True}},
    }
    return install_chart(cluster, binaries.path("helm"), chart, values)


def signed(cluster: Cluster) -> dict[str, Any] | None:
    return next((c for c in serving_csrs(cluster) if c["status"].get("certificate")), None)


@pytest.fixture(scope="module")
def csr(cluster: Cluster, installed: float) -> dict[str, Any]:
    try:
        found: dict[str, Any] = eventually(lambda: signed(cluster), timeout=CERT_TIMEOUT,
                                           message="a signed serving CSR")  # fmt: skip
    except AssertionError as exc:
        csrs = serving_csrs(cluster)
        states = [(c["metadata"]["name"], c["status"].get("conditions")) for c in csrs]
        raise AssertionError(f"{exc}\nserving CSRs: {states}\n{cluster.node.tails(5)}") from None
    return found


def certificate_der(csr: dict[str, Any]) -> bytes:
    pem = base64.b64decode(csr["status"]["certificate"])
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def served_certificate(cluster: Cluster) -> bytes:
    """The certificate the kubelet presents on the node's address, verified against the
    plane's client CA (the signer's) for that IP address."""
    address = cluster.node.address
    sock = run_in_netns(cluster.node.names.node_ns, lambda: socket.create_connection(
        (address, KUBELET_PORT), timeout=HANDSHAKE_TIMEOUT))  # fmt: skip
    context = ssl.create_default_context(cadata=cluster.plane.pki.client_ca.cert_pem.decode())
    with context.wrap_socket(sock, server_hostname=address) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_e03_no_serving_csr_while_the_node_has_no_address(
    cluster: Cluster, before_install: list[dict[str, Any]]
) -> None:
    kinds = [a["type"] for a in cluster.registered["status"].get("addresses", [])]
    assert kinds == ["Hostname"]
    assert before_install == []


def test_e03_local_ccm_approves_the_kubelet_s_serving_csr(
    cluster: Cluster, csr: dict[str, Any]
) -> None:
    conditions = [(c["type"], c["status"], c["reason"]) for c in csr["status"]["conditions"]]
    assert conditions == [("Approved", "True", REASON["approve"])]
    assert "system:nodes" in csr["spec"]["groups"]
    approval = [m for m in csr["metadata"]["managedFields"] if m.get("subresource") == "approval"]
    assert [m["manager"] for m in approval] == [APPROVER]  # the field manager of that write
    certificate = x509.load_der_x509_certificate(certificate_der(csr))
    assert (
        certificate.issuer
        == x509.load_pem_x509_certificate(cluster.plane.pki.client_ca.cert_pem).subject
    )  # signed by kube-controller-manager with the plane's client CA
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == [cluster.node.address]


def test_e03_the_kubelet_serves_the_signed_certificate_on_10250(
    cluster: Cluster, csr: dict[str, Any]
) -> None:
    expected = certificate_der(csr)
    served: bool = eventually(
        lambda: served_certificate(cluster) == expected, timeout=CERT_TIMEOUT,
        message=f"the kubelet serves the signed certificate on {KUBELET_PORT}",
    )  # fmt: skip
    assert served is True
