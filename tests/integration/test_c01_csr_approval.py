"""C01–C10: kubelet-serving-approver in `local-ccm-controller-manager` on a real apiserver
with the real kube-controller-manager signer (a dedicated plane: the signer signs every
approved CSR there). CSRs are created by real node identities (client certificates in group
`system:nodes`, allowed by the Node authorizer), built with `cryptography`.

C01: a matching CSR is approved, then signed (a certificate in `status.certificate`).
C02: a foreign IP SAN, a foreign DNS SAN, another node's name, an extra organisation, a wrong
usage, an email SAN and an extra subject attribute (shown as `OU=hackers`) are each denied
with the reason named. C03: a CSR from a still-tainted Node waits and is approved once the Node
is initialised. C04: a restart re-decides nothing.
C05: the controller runs under the ClusterRole the chart renders, with a ServiceAccount token
(and refuses to start, exit 4, without the approver's own ClusterRole). C06: with
`--csr-deny=false` a failing CSR stays pending, with a log line and an Event. C07: beside
node-lifecycle it decides from the manager's one shared Node watch. C08: an address another
Node also shows is denied naming that Node, as a node can add any address to its own status;
once the other Node lets go of it, the next CSR is approved. C09: with `--csr-ip-prefixes`
an address outside them is denied, one inside approved. C10: `spec.expirationSeconds` above
`--csr-max-expiration` is denied, within it approved and signed for no longer.
"""

from __future__ import annotations

import base64
import secrets
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from local_ccm import flags
from local_ccm.cli import csr
from local_ccm.cli.manager import manager_flags
from local_ccm.csr.api import CSRS
from local_ccm.kube.client import Client
from tests.support import chart, pki
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.controlplane import ControlPlane
from tests.support.csrs import KUBELET_USAGES, RSA_USAGES, csr_object, request_pem
from tests.support.dedicated import dedicated_plane
from tests.support.kcm import start_kcm
from tests.support.processes import Child, spawn, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.kcm
BINARY = Path(sys.executable).parent / "local-ccm-controller-manager"
TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
         "effect": "NoSchedule"}  # fmt: skip
ARGS = ("--controllers=kubelet-serving-approver", "--leader-elect=false",
        "--metrics-bind-address=0", "--health-probe-bind-address=0")  # fmt: skip
DECIDED = 20.0
SIGNING = "certificatesigningrequest-signing-controller"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries: Binaries = ensure(["etcd", "kube-apiserver", "kube-controller-manager"])
    with dedicated_plane(request.config, binaries, "csr") as started:
        signer = started.workdir / "signer"
        signer.mkdir()
        ca = pki.new_ca("kubelet-serving-signer", datetime.now(UTC))
        (signer / "ca.crt").write_bytes(ca.cert_pem)
        (signer / "ca.key").write_bytes(ca.key_pem)
        flags = [f"--cluster-signing-cert-file={signer / 'ca.crt'}",
                 f"--cluster-signing-key-file={signer / 'ca.key'}"]  # fmt: skip
        start_kcm(started, binaries, controllers=[SIGNING], extra=flags)
        yield started


@pytest.fixture
def admin(plane: ControlPlane) -> Iterator[Client]:
    client = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="c01-test")
    yield client
    client.close()


def start_manager(kubeconfig: Path, log: Path, *extra: str) -> Child:
    argv = [str(BINARY), *ARGS, f"--kubeconfig={kubeconfig}", *extra]
    return spawn("manager", argv, log, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def manager(plane: ControlPlane, test_artifacts: Path) -> Iterator[Child]:
    child = start_manager(plane.admin_kubeconfig, test_artifacts / "manager.log")
    yield child
    child.stop(grace=5)


def make_node(admin: Client, ip: str, *, tainted: bool = False) -> str:
    """A Node with an InternalIP and a Hostname, as the agent leaves it (or still tainted)."""
    name = f"n-{secrets.token_hex(4)}"
    spec = {"taints": [TAINT]} if tainted else {}
    admin.create(r.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                           "spec": spec})  # fmt: skip
    status = {"status": {"addresses": [{"type": "InternalIP", "address": ip},
                                       {"type": "Hostname", "address": name}]}}  # fmt: skip
    admin.patch(r.NODES, name, status, patch_type="merge", subresource="status")
    return name


def as_node(plane: ControlPlane, node: str) -> Client:
    """A client with `node`'s own credentials, as its kubelet has them."""
    kubeconfig = plane.user_kubeconfig(f"system:node:{node}", ["system:nodes"])
    return Client.from_kubeconfig(kubeconfig, field_manager="kubelet")


def submit(
    plane: ControlPlane,
    node: str,
    pem: bytes,
    usages: list[str] | None = None,
    expiration_seconds: int | None = None,
) -> str:
    """Create the CSR as the node itself; its name."""
    name = f"csr-{secrets.token_hex(4)}"
    with as_node(plane, node) as kubelet:
        kubelet.create(CSRS, csr_object(name, pem, usages or KUBELET_USAGES, expiration_seconds))
    return name


def show_addresses(client: Client, node: str, *ips: str) -> None:
    """Replace `node`'s status addresses by `ips` (InternalIP) and its Hostname."""
    addresses = [*({"type": "InternalIP", "address": ip} for ip in ips),
                 {"type": "Hostname", "address": node}]  # fmt: skip
    body = {"status": {"addresses": addresses}}
    client.patch(r.NODES, node, body, patch_type="merge", subresource="status")


def conditions(admin: Client, name: str) -> list[dict[str, Any]]:
    return list((admin.get(CSRS, name).get("status") or {}).get("conditions") or [])


def decided(admin: Client, name: str) -> dict[str, Any] | None:
    found = conditions(admin, name)
    return found[0] if found else None


def events_about(admin: Client, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name}"
    return list(admin.list(r.EVENTS, namespace="default", field_selector=selector)["items"])


@pytest.mark.timeout(120)
def test_c01_matching_csr_is_approved_and_signed(
    plane: ControlPlane, admin: Client, manager: Child
) -> None:
    node = make_node(admin, "127.1.0.7")
    name = submit(plane, node, request_pem(node, ips=["127.1.0.7"], dns=[node]))
    condition = eventually(lambda: decided(admin, name), timeout=DECIDED,
                           message="the CSR is decided")  # fmt: skip
    assert (condition["type"], condition["reason"]) == ("Approved", "KubeletServingApproved")
    certificate = eventually(
        lambda: (admin.get(CSRS, name).get("status") or {}).get("certificate"),
        timeout=DECIDED, message="the kube-controller-manager signer issues the certificate",
    )  # fmt: skip
    assert certificate
    assert manager.exited() is None, tail(manager.log_path)


@pytest.mark.timeout(120)
def test_c02_each_bad_request_is_denied_with_its_reason(
    plane: ControlPlane, admin: Client, manager: Child
) -> None:
    node, other = make_node(admin, "127.1.0.8"), make_node(admin, "127.1.0.9")
    cases = {
        "IP SAN 127.1.0.9": request_pem(node, ips=["127.1.0.8", "127.1.0.9"]),
        "DNS SAN 'evil.example'": request_pem(node, dns=[node, "evil.example"]),
        # Another node's name: the API server's NodeRestriction already refuses a CN other
        # than the requester's, so the other node's name is asked for as a SAN.
        f"DNS SAN {other!r}": request_pem(node, dns=[node, other]),
        "subject": request_pem(node, ips=["127.1.0.8"], orgs=("system:nodes", "system:masters")),
        "email SAN 'root@example.com'": request_pem(node, ips=["127.1.0.8"],
                                                    emails=["root@example.com"]),
        "OU=hackers": request_pem(node, ips=["127.1.0.8"], units=["hackers"]),
    }  # fmt: skip
    names = {submit(plane, node, pem): what for what, pem in cases.items()}
    usage = submit(plane, node, request_pem(node, ips=["127.1.0.8"]), usages=RSA_USAGES)
    names[usage] = "usages"
    for name, what in names.items():
        condition = eventually(lambda n=name: decided(admin, n), timeout=DECIDED,  # type: ignore[misc]
                               message=f"the CSR with a bad {what} is decided")  # fmt: skip
        assert condition["type"] == "Denied", condition
        assert what in condition["message"], condition


@pytest.mark.timeout(120)
def test_c03_csr_of_a_tainted_node_is_approved_once_initialised(
    plane: ControlPlane, admin: Client, manager: Child
) -> None:
    node = make_node(admin, "127.1.0.10", tainted=True)
    name = submit(plane, node, request_pem(node, ips=["127.1.0.10"]))
    waiting = eventually(lambda: events_about(admin, name), timeout=DECIDED,
                         message="the controller reports the CSR waiting")  # fmt: skip
    assert [e["reason"] for e in waiting] == ["KubeletServingWaiting"]
    assert conditions(admin, name) == []
    admin.patch(r.NODES, node, {"spec": {"taints": None}}, patch_type="merge")  # as the agent
    condition = eventually(lambda: decided(admin, name), timeout=DECIDED,
                           message="the CSR is decided after initialisation")  # fmt: skip
    assert condition["type"] == "Approved"


@pytest.mark.timeout(120)
def test_c04_a_restart_redecides_nothing(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    node = make_node(admin, "127.1.0.11")
    good = submit(plane, node, request_pem(node, ips=["127.1.0.11"]))
    bad = submit(plane, node, request_pem(node, ips=["127.1.0.12"]))
    first = start_manager(plane.admin_kubeconfig, test_artifacts / "first.log")
    try:
        for name in (good, bad):
            eventually(lambda n=name: decided(admin, n), timeout=DECIDED,  # type: ignore[misc]
                       message="decided by the first run")  # fmt: skip
        eventually(lambda: len(events_about(admin, good)) == 1, timeout=DECIDED,
                   message="the approval Event is posted")  # fmt: skip
    finally:
        first.stop(grace=5)
    before = {n: (conditions(admin, n), len(events_about(admin, n))) for n in (good, bad)}
    second = start_manager(plane.admin_kubeconfig, test_artifacts / "second.log")
    try:
        late = submit(plane, node, request_pem(node, ips=["127.1.0.11"]))  # proves it runs
        eventually(lambda: decided(admin, late), timeout=DECIDED, message="the second run works")
    finally:
        second.stop(grace=5)
    after = {n: (conditions(admin, n), len(events_about(admin, n))) for n in (good, bad)}
    assert after == before
    assert all(len(c) == 1 for c, _ in after.values())


@pytest.mark.timeout(120)
def test_c06_without_deny_a_bad_csr_stays_pending_with_an_event(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    log = test_artifacts / "manager.log"
    node = make_node(admin, "127.1.0.15")
    name = submit(plane, node, request_pem(node, ips=["127.1.0.16"]))
    child = start_manager(plane.admin_kubeconfig, log, "--csr-deny=false")
    try:
        events = eventually(lambda: events_about(admin, name), timeout=DECIDED,
                            message="the controller reports the CSR it would deny")  # fmt: skip
    finally:
        child.stop(grace=5)
    assert [e["reason"] for e in events] == ["KubeletServingNotApproved"]
    assert "127.1.0.16" in events[0]["message"]
    assert conditions(admin, name) == []
    assert "left pending" in tail(child.log_path, 200)


@pytest.mark.timeout(120)
def test_c07_beside_node_lifecycle_it_reads_the_shared_node_watch(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    both = (
        "--controllers=node-lifecycle,kubelet-serving-approver",
        "--node-selector=local-ccm.io/c07-none=1",
    )  # the lifecycle controller touches nothing
    child = start_manager(plane.admin_kubeconfig, test_artifacts / "manager.log", *both)
    try:
        node = make_node(admin, "127.1.0.17", tainted=True)
        name = submit(plane, node, request_pem(node, ips=["127.1.0.17"]))
        admin.patch(r.NODES, node, {"spec": {"taints": None}}, patch_type="merge")
        condition = eventually(lambda: decided(admin, name), timeout=DECIDED,
                               message="decided from the shared Node watch")  # fmt: skip
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert condition["type"] == "Approved"
    assert "controllers=node-lifecycle,kubelet-serving-approver" in tail(child.log_path, 400)


def chart_rbac(helm_binary: Path, namespace: str) -> list[dict[str, Any]]:
    """The manager's RBAC as the chart renders it with the approver on, for `namespace`."""
    on = {"controllerManager.enabled": "true",
          "controllerManager.kubeletServingApprover.enabled": "true"}  # fmt: skip
    with chart.helm(helm_binary) as h:
        text = h.template(kube_version=chart.pinned_kube_version(), release=chart.DEFAULT_RELEASE,
                          namespace=chart.DEFAULT_NAMESPACE, set_values=on)  # fmt: skip
    rendered = chart.parse(text)
    shipped = chart.ShippedRbac.of(rendered, "node-lifecycle-controller")
    target = chart.RbacTarget(f"{namespace}-", "manager", namespace, {})
    return shipped.for_test(target)


def granted(objs: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    rules = [rule for o in objs if o["kind"] == "ClusterRole" for rule in o["rules"]]
    return {(verb, group, resource, name)
            for rule in rules for verb in rule["verbs"] for group in rule["apiGroups"]
            for resource in rule["resources"]
            for name in rule.get("resourceNames", [""])}  # fmt: skip


def needed() -> set[tuple[str, ...]]:
    """What the approver checks at start-up but Events (the events Role grants them) and the
    Node watch (the lifecycle controller's ClusterRole)."""
    options = csr.controller().load(flags.parse(manager_flags(), [], {}), ({}, (), ()))
    assert not isinstance(options, list), options
    return {(a.verb, a.group, a.resource + (f"/{a.subresource}" if a.subresource else ""), a.name)
            for a in csr.permissions(options) if a.resource not in ("events", "nodes")}  # fmt: skip


@pytest.mark.timeout(120)
def test_c05_runs_under_the_rbac_the_chart_renders(
    plane: ControlPlane, admin: Client, test_artifacts: Path, helm_binary: Path
) -> None:
    namespace = f"c05-{secrets.token_hex(3)}"
    admin.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": namespace}})  # fmt: skip
    objs = chart_rbac(helm_binary, namespace)
    own = [o for o in objs if o["metadata"]["name"].endswith("kubelet-serving-approver")]
    assert {o["kind"] for o in own} == {"ClusterRole", "ClusterRoleBinding"}
    assert granted(own) == needed()  # the chart grants exactly what the controller checks
    others = [o for o in objs if o not in own]
    failures = chart.apply_all(plane.http, others, namespace=namespace, dry_run=False)
    assert not failures, chart.describe_failures(failures)
    kubeconfig = plane.token_kubeconfig("manager", namespace)
    without = start_manager(kubeconfig, test_artifacts / "without.log")
    assert without.proc.wait(timeout=30) == 4, tail(without.log_path)  # its rules are needed
    failures = chart.apply_all(plane.http, own, namespace=namespace, dry_run=False)
    assert not failures, chart.describe_failures(failures)
    child = start_manager(kubeconfig, test_artifacts / "manager.log")
    try:
        node = make_node(admin, "127.1.0.13")
        good = submit(plane, node, request_pem(node, ips=["127.1.0.13"]))
        bad = submit(plane, node, request_pem(node, ips=["127.1.0.14"]))
        got = eventually(lambda: decided(admin, good), timeout=DECIDED, message="approved")
        assert got["type"] == "Approved"
        denied = eventually(lambda: decided(admin, bad), timeout=DECIDED, message="denied")
        assert denied["type"] == "Denied"
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert "forbidden" not in tail(child.log_path, 400).lower()


def wait_decided(admin: Client, name: str, what: str) -> dict[str, Any]:
    return eventually(lambda: decided(admin, name), timeout=DECIDED,
                      message=f"the CSR {what} is decided")  # fmt: skip


def approved_on_retry(plane: ControlPlane, admin: Client, node: str, ips: list[str]) -> str:
    """A new CSR per attempt, as the kubelet asks again after a denial, until one is approved
    (the Node watch and the CSR watch are separate streams); the approved one's name."""

    def attempt() -> str | None:
        name = submit(plane, node, request_pem(node, ips=ips))
        return name if wait_decided(admin, name, "retried")["type"] == "Approved" else None

    return eventually(attempt, timeout=2 * DECIDED, message="a retried CSR is approved")


@pytest.mark.timeout(120)
def test_c08_an_address_another_node_shows_is_denied_until_it_lets_go(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    a, b = make_node(admin, "127.1.0.20"), make_node(admin, "127.1.0.21")
    with as_node(plane, a) as kubelet:  # NodeRestriction lets a node write its own status
        show_addresses(kubelet, a, "127.1.0.20", "127.1.0.21")
    child = start_manager(plane.admin_kubeconfig, test_artifacts / "manager.log")
    try:  # started after the status change: its first Node list has it
        stolen = submit(plane, a, request_pem(a, ips=["127.1.0.20", "127.1.0.21"]))
        denied = wait_decided(admin, stolen, "for another Node's address")
        owners = submit(plane, b, request_pem(b, ips=["127.1.0.21"]))  # while a shows it
        blocked = wait_decided(admin, owners, "of the address's owner")
        show_addresses(admin, b, "127.1.0.22")  # the address moved to a: b lets go of it
        approved_on_retry(plane, admin, a, ["127.1.0.20", "127.1.0.21"])
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert denied["type"] == "Denied", denied
    assert f"IP SAN 127.1.0.21 is also an address of Node {b!r}" in denied["message"], denied
    assert blocked["type"] == "Denied", blocked
    assert f"also an address of Node {a!r}" in blocked["message"], blocked


@pytest.mark.timeout(120)
def test_c09_with_ip_prefixes_an_address_outside_them_is_denied(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    inside, outside = make_node(admin, "127.1.1.5"), make_node(admin, "127.1.2.5")
    child = start_manager(plane.admin_kubeconfig, test_artifacts / "manager.log",
                          "--csr-ip-prefixes=127.1.1.0/28,2001:db8::/64")  # fmt: skip
    try:
        good = submit(plane, inside, request_pem(inside, ips=["127.1.1.5"]))
        bad = submit(plane, outside, request_pem(outside, ips=["127.1.2.5"]))
        approved, denied = wait_decided(admin, good, "inside"), wait_decided(admin, bad, "out")
    finally:
        child.stop(grace=5)
    assert approved["type"] == "Approved", approved
    assert denied["type"] == "Denied", denied
    want = "IP SAN 127.1.2.5 is in none of --csr-ip-prefixes 127.1.1.0/28, 2001:db8::/64"
    assert want in denied["message"], denied


@pytest.mark.timeout(120)
def test_c10_expiration_above_the_bound_is_denied_within_it_signed_for_no_longer(
    plane: ControlPlane, admin: Client, test_artifacts: Path
) -> None:
    node = make_node(admin, "127.1.0.30")
    child = start_manager(plane.admin_kubeconfig, test_artifacts / "manager.log",
                          "--csr-max-expiration=1h")  # fmt: skip
    try:
        pem = request_pem(node, ips=["127.1.0.30"])
        long = submit(plane, node, pem, expiration_seconds=7200)
        short = submit(plane, node, request_pem(node, ips=["127.1.0.30"]),
                       expiration_seconds=3600)  # fmt: skip
        denied, approved = wait_decided(admin, long, "2h"), wait_decided(admin, short, "1h")
        signed = eventually(
            lambda: (admin.get(CSRS, short).get("status") or {}).get("certificate"),
            timeout=DECIDED, message="the kube-controller-manager signer issues the certificate",
        )  # fmt: skip
    finally:
        child.stop(grace=5)
    assert denied["type"] == "Denied", denied
    want = "spec.expirationSeconds 7200 (2h0m0s) is more than --csr-max-expiration 1h0m0s"
    assert want in denied["message"], denied
    assert approved["type"] == "Approved", approved
    certificate = x509.load_pem_x509_certificate(base64.b64decode(signed))
    left = certificate.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(minutes=55) < left <= timedelta(hours=1), certificate.not_valid_after_utc
