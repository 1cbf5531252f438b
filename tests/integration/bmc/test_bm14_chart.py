"""BM14: the chart with `controllerManager.bmc` on, installed by the real helm into a plane of
its own (no NodeBMC CRD there before), the credentials in a namespace of their own. The install
creates the CRD and node-bmc's RBAC; the manager, started as the chart renders its container
(command, args, env; only the listen addresses move to free loopback ports) with a token of the
chart's ServiceAccount (RBAC enforced, its start-up access review included), reads a NodeBMC's
System on the real Redfish emulator with the Secret of the credentials namespace, writes the
status and taints the NotReady Node whose System is Off. That ServiceAccount may get Secrets
in the credentials namespace and nowhere else, and list them nowhere: SelfSubjectAccessReviews
as it, and a GET of a Secret of the release namespace that the API server refuses.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.bmc.api import SECRETS
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Forbidden
from tests.support import bmc, chart, crds
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.podrun import PodFields, argv_of, container_env, pod_container
from tests.support.processes import Child, free_port, spawn, tail
from tests.support.sushy import SushyEmulator
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)
RELEASE = "bm14"
LISTEN = ("--metrics-bind-address=", "--health-probe-bind-address=")


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries: Binaries = ensure(["etcd", "kube-apiserver"])
    with dedicated_plane(request.config, binaries, "bmcchart") as started:
        yield started


def values(credentials: str) -> dict[str, Any]:
    return {
        "agent": {"enabled": False},
        "controllerManager": {"enabled": True, "bmc": {
            "enabled": True, "pollInterval": "1s", "credentialsNamespace": credentials}},
    }  # fmt: skip


def manager(rendered: list[Obj], namespace: str, kubeconfig: Path, log: Path) -> Child:
    """The chart's manager container as a kubelet would start it, on free loopback ports."""
    container = pod_container(chart.one(rendered, "Deployment"))
    env = container_env(container, PodFields(namespace, f"{RELEASE}-manager-0", "bm14-host"))
    argv = [next((f"{flag}127.0.0.1:{free_port()}" for flag in LISTEN if a.startswith(flag)), a)
            for a in argv_of(container, env)]  # fmt: skip
    argv.append(f"--kubeconfig={kubeconfig}")
    return spawn("manager", argv, log, env={"PATH": "/usr/bin:/bin", **env})


def may(kube: Client, verb: str, namespace: str, name: str = "") -> bool:
    """A SelfSubjectAccessReview as `kube`'s user: may it `verb` Secrets in `namespace`?"""
    attributes = {"verb": verb, "resource": "secrets", "namespace": namespace,
                  **({"name": name} if name else {})}  # fmt: skip
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}  # fmt: skip
    return bool(kube.create(r.SELF_SUBJECT_ACCESS_REVIEWS, body)["status"].get("allowed"))


def test_bm14_helm_install_and_the_manager_under_the_charts_service_account(
    plane: ControlPlane, helm_binary: Path, sushy: SushyEmulator, tmp_path: Path,
    test_artifacts: Path,
) -> None:  # fmt: skip
    """BM14: the chart's node-bmc, under its own RBAC, taints a NotReady Node whose System is
    Off, and its ServiceAccount reads Secrets only by name in the credentials namespace."""
    namespace = f"bm14-{secrets.token_hex(3)}"
    credentials = f"{namespace}-creds"
    admin = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="bm14")
    for name in (namespace, credentials):
        admin.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": name}})  # fmt: skip
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values(credentials)))
    with chart.helm(helm_binary) as h:
        text = h.template(kube_version=chart.pinned_kube_version(), release=RELEASE,
                          namespace=namespace, values=[file])  # fmt: skip
        common = ["--kubeconfig", str(plane.admin_kubeconfig), "--namespace", namespace]
        done = h.run("install", RELEASE, str(chart.CHART), *common, "-f", str(file))
    rendered = chart.parse(text)
    assert done.code == 0, done.output  # the CRD, its RBAC and the manager in one install
    [crd] = crds.load_crds(bmc.CRD_FILE)
    crds.wait_established(admin, crd)

    node = f"bm14-{secrets.token_hex(3)}"
    bmc.node(admin, node, "False")
    bmc.secret(admin, credentials, "node-bmc", sushy.username, sushy.password)
    bmc.secret(admin, namespace, "elsewhere", "someone", "not-for-node-bmc")
    bmc.nodebmc(admin, node, sushy.add_system(node, "Off"), "node-bmc", caBundle=sushy.ca_pem)
    account = chart.one(rendered, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = plane.token_kubeconfig(account, namespace)
    log = test_artifacts / "manager.log"
    child = manager(rendered, namespace, kubeconfig, log)
    try:
        status = bmc.power_is(admin, node, "Off")
        assert status["observedGeneration"] == 1
        eventually(lambda: bmc.tainted(admin, node), timeout=bmc.SETTLE, message="tainted")
        assert child.exited() is None, tail(log)
    finally:
        child.stop(grace=5)

    with Client.from_kubeconfig(kubeconfig, field_manager="bm14") as sa:
        assert may(sa, "get", credentials, "node-bmc")
        assert not may(sa, "list", credentials)
        assert not may(sa, "watch", credentials)
        assert not may(sa, "list", "")  # every namespace
        for elsewhere in (namespace, "kube-system", "default"):
            assert not may(sa, "get", elsewhere, "elsewhere"), elsewhere
        with pytest.raises(Forbidden):
            sa.get(SECRETS, "elsewhere", namespace=namespace)
    admin.close()
    assert "forbidden" not in tail(log, 400).lower()
