"""LB13: the chart with `controllerManager.loadBalancer` on, installed by the real helm into a
plane of its own (no CRD there before): the first `helm install` creates the CRD and the
pools of the values in one release, and an upgrade keeps the same pool objects; the rules it
renders are exactly what the controller checks at start-up; and the controller, running as
the chart's ServiceAccount (a real token, RBAC enforced), allocates from the chart's pool and
reads the kube-vip ConfigMap the chart's Role names.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm import flags
from local_ccm.cli import lbipam
from local_ccm.cli.manager import manager_flags
from local_ccm.kube.client import Client
from local_ccm.lbipam.api import CONFIGMAPS, POOLS
from tests.support import chart, lb
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.controlplane import ControlPlane
from tests.support.dedicated import dedicated_plane
from tests.support.processes import tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)
RELEASE = "lb13"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries: Binaries = ensure(["etcd", "kube-apiserver"])
    with dedicated_plane(request.config, binaries, "lbchart") as started:
        yield started


def values(namespace: str, net: str) -> dict[str, Any]:
    return {
        "agent": {"enabled": False},
        "nodeLifecycleController": {"enabled": True},
        "controllerManager": {"enabled": True, "loadBalancer": {
            "enabled": True,
            "kubeVipConfigMap": f"{namespace}/kubevip",
            "pools": [{"name": f"{namespace}-pool", "addresses": [f"{net}.0/28"],
                       "namespaceSelector": {"matchLabels": {"lbtest": namespace}}}],
        }},
    }  # fmt: skip


def granted(objs: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for obj in objs:
        namespace = obj["metadata"].get("namespace", "") if obj["kind"] == "Role" else ""
        for rule in obj.get("rules") or ():
            for verb in rule["verbs"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for name in rule.get("resourceNames", [""]):
                            found.add((verb, group, resource, namespace, name))
    return found - {("patch", "", "events", "", "")}  # Event series (count) updates


def needed(namespace: str) -> set[tuple[str, ...]]:
    """What it checks at start-up but the Node watch (the lifecycle controller's ClusterRole)."""
    argv = [f"--lb-kubevip-configmap={namespace}/kubevip"]
    options = lbipam.controller().load(flags.parse(manager_flags(), argv, {}), ({}, (), ()))
    assert not isinstance(options, list), options
    return {(a.verb, a.group, a.resource + (f"/{a.subresource}" if a.subresource else ""),
             a.namespace, a.name) for a in lbipam.permissions(options)
            if a.resource != "nodes"}  # fmt: skip


def test_lb13_helm_install_with_pools_and_the_controller_under_its_rbac(
    plane: ControlPlane, helm_binary: Path, tmp_path: Path, test_artifacts: Path
) -> None:
    namespace, net = f"lb13-{secrets.token_hex(3)}", lb.block()
    admin = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="lb13")
    meta = {"name": namespace, "labels": {"lbtest": namespace}}
    admin.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values(namespace, net)))
    with chart.helm(helm_binary) as h:
        text = h.template(kube_version=chart.pinned_kube_version(), release=RELEASE,
                          namespace=namespace, values=[file])  # fmt: skip
        rendered = chart.parse(text)
        own = [o for o in rendered if "service-lb-ipam" in o["metadata"]["name"]]
        assert granted(own) == needed(namespace)  # exactly what it checks at start-up
        common = ["--kubeconfig", str(plane.admin_kubeconfig), "--namespace", namespace]
        done = h.run("install", RELEASE, str(chart.CHART), *common, "-f", str(file))
        assert done.code == 0, done.output  # the CRD and its pool in one first install
        pool = admin.get(POOLS, f"{namespace}-pool")
        assert pool["spec"]["addresses"] == [f"{net}.0/28"]
        done = h.run("upgrade", RELEASE, str(chart.CHART), *common, "-f", str(file))
        assert done.code == 0, done.output  # the upgrade adopts the pool as an ordinary object
        manifest = h.run("get", "manifest", RELEASE, *common)
        assert f"name: {namespace}-pool" in manifest.stdout
    assert admin.get(POOLS, f"{namespace}-pool")["metadata"]["uid"] == pool["metadata"]["uid"]
    space = lb.Space(admin, namespace, namespace)
    kubevip = {f"range-{namespace}": f"{net}.100-{net}.100"}
    admin.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "data": kubevip,
                              "metadata": {"name": "kubevip", "namespace": namespace}})  # fmt: skip
    account = chart.one(rendered, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = plane.token_kubeconfig(account, namespace)
    child = lb.start(kubeconfig, test_artifacts / "lb.log",
                     f"--lb-kubevip-configmap={namespace}/kubevip")  # fmt: skip
    try:
        space.service("web")
        space.service("vip", annotations={"lb.local-ccm.io/ips": f"{net}.100"})
        assert eventually(lambda: lb.ips(space.get("web")), timeout=30) == [f"{net}.1"]
        assert eventually(lambda: lb.ips(space.get("vip")), timeout=30) == [f"{net}.100"]
        eventually(lambda: lb.pool_status(admin, f"{namespace}-pool").get("ipv4"), timeout=30)
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
        admin.close()
    assert "forbidden" not in tail(child.log_path, 400).lower()


@pytest.fixture
def fresh_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A plane of its own without the pool CRD: the upgrade below is the one that creates it."""
    binaries: Binaries = ensure(["etcd", "kube-apiserver"])
    with dedicated_plane(request.config, binaries, "lbupgrade") as started:
        yield started


def test_lb13_the_upgrade_that_turns_the_allocator_on_creates_its_pools_kept_on_uninstall(
    fresh_plane: ControlPlane, helm_binary: Path, tmp_path: Path
) -> None:
    """An install without the allocator, then the upgrade that turns it on (and so creates
    the CRD): its pools exist after that one upgrade; the next upgrade adopts them (same uid);
    uninstalling the release keeps every pool, as it keeps the CRD."""
    namespace, net = f"lb13u-{secrets.token_hex(3)}", lb.block()
    admin = Client.from_kubeconfig(fresh_plane.admin_kubeconfig, field_manager="lb13")
    admin.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": namespace}})  # fmt: skip
    off, on = tmp_path / "off.yaml", tmp_path / "on.yaml"
    without = values(namespace, net)
    without["controllerManager"]["loadBalancer"] = {"enabled": False}
    off.write_text(yaml.safe_dump(without))
    on.write_text(yaml.safe_dump(values(namespace, net)))
    pool = f"{namespace}-pool"
    common = ["--kubeconfig", str(fresh_plane.admin_kubeconfig), "--namespace", namespace]
    try:
        with chart.helm(helm_binary) as h:
            done = h.run("install", RELEASE, str(chart.CHART), *common, "-f", str(off))
            assert done.code == 0, done.output
            done = h.run("upgrade", RELEASE, str(chart.CHART), *common, "-f", str(on))
            assert done.code == 0, done.output
            first = admin.get(POOLS, pool)  # created by this one upgrade
            assert first["spec"]["addresses"] == [f"{net}.0/28"]
            done = h.run("upgrade", RELEASE, str(chart.CHART), *common, "-f", str(on))
            assert done.code == 0, done.output
            assert f"name: {pool}" in h.run("get", "manifest", RELEASE, *common).stdout
            assert admin.get(POOLS, pool)["metadata"]["uid"] == first["metadata"]["uid"]
            done = h.run("uninstall", RELEASE, *common, "--wait=false")
            assert done.code == 0, done.output
        kept = admin.get(POOLS, pool)
        assert kept["metadata"]["uid"] == first["metadata"]["uid"]
    finally:
        admin.close()
