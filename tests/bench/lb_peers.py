"""The three LoadBalancer allocators of the comparison, set up and started the same way: ours
(`local-ccm-controller-manager --controllers=service-lb-ipam`), MetalLB v0.16.1's controller
alone and kube-vip-cloud-provider v0.0.12, each out of cluster with a kubeconfig of its own
user.

What the peers need is made here from their own sources, at test time: MetalLB's CRDs from
`config/crd/bases` of its pinned tarball (tests/bench/originals.toml `keep`: copied into the
build's cache entry, so a cached build needs no tarball), its namespace,
ServiceAccount and its own Pod object (it reads the Pod at start-up for owner references; no
kubelet runs it), an `IPAddressPool` per run; kube-vip-cloud-provider's `kubevip` ConfigMap in
kube-system with a `cidr-<namespace>` key per run. Ours gets a `LoadBalancerIPPool` per run.
Every pool is the same: `POOL_V4` and `POOL_V6`.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

import local_ccm
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Conflict, NotFound
from local_ccm.kube.resources import NODES, Resource
from local_ccm.lbipam.api import POOLS, SERVICES
from tests.support import crds, lb, originals
from tests.support import resources as r
from tests.support.processes import AS_SHIPPED, Child, free_port, spawn

IMPLS = ("ours", "metallb", "kube-vip-cp")
POOL_V4, POOL_V6 = "10.200.0.0/16", "fd00:200::/112"
METALLB, KUBEVIP = "go-metallb-controller", "go-kube-vip-cloud-provider"
CRD_FOLDER = "config/crd/bases"  # in MetalLB's source; its entry in originals.toml keeps it
METALLB_NAMESPACE, METALLB_NAME = "metallb-system", "controller"
IPADDRESSPOOLS = Resource("metallb.io", "v1beta1", "ipaddresspools", "IPAddressPool", True)
KUBEVIP_NAMESPACE, KUBEVIP_CONFIGMAP = "kube-system", "kubevip"
NODE = "lb-bench-node"
PATH_ONLY = {"PATH": "/usr/bin:/bin"}
# Ours runs the code this test imported (a worktree's, when the bench runs from one with
# PYTHONPATH), not whatever checkout the venv's editable install points at.
OURS_ENV = {**PATH_ONLY, **AS_SHIPPED,
            "PYTHONPATH": str(Path(local_ccm.__file__).resolve().parents[1])}  # fmt: skip


# ------------------------------------------------------------------ once per plane
def metallb_crds(built: originals.Built) -> list[Obj]:
    """MetalLB's CRDs as its pinned tarball ships them (config/crd/bases, which the build keeps
    in its cache entry; the kustomize patch there only adds the BGPPeer conversion webhook,
    which a controller alone without webhooks does not serve)."""
    folder = built.path(METALLB, CRD_FOLDER)
    found = []
    for path in sorted(folder.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    crds_found = [d for d in found if d.get("kind") == "CustomResourceDefinition"]
    if not crds_found:  # else the first IPAddressPool would fail, far from the cause
        raise AssertionError(f"no MetalLB CRDs under {folder}: {METALLB}'s `keep` in "
                             f"tests/bench/originals.toml must name {CRD_FOLDER!r}")  # fmt: skip
    return crds_found


def prepare(kube: Client, built: originals.Built) -> None:
    """What every run needs on the plane: the CRDs, MetalLB's namespace with its Pod and
    ServiceAccount, kube-vip-cloud-provider's ConfigMap, and one Ready Node (without one the
    cloud-provider's service controller posts a warning Event per Service)."""
    crds.install(kube, (crds.POOL_CRD,))
    found = metallb_crds(built)
    for crd in found:
        crds.apply_crd(kube, crd)
    for crd in found:
        crds.wait_established(kube, crd)
    _create(kube, r.NAMESPACES, {"metadata": {"name": METALLB_NAMESPACE}})
    meta = {"name": METALLB_NAME, "namespace": METALLB_NAMESPACE}
    _create(kube, r.SERVICE_ACCOUNTS, {"metadata": meta}, METALLB_NAMESPACE)
    pod = {
        "serviceAccountName": METALLB_NAME,
        "automountServiceAccountToken": False,
        "containers": [{"name": "controller", "image": "metallb-controller:v0.16.1"}],
    }
    _create(kube, r.PODS, {"metadata": {**meta, "labels": {"app": "metallb"}}, "spec": pod},
            METALLB_NAMESPACE)  # fmt: skip
    _create(kube, r.CONFIG_MAPS, {"metadata": {"name": KUBEVIP_CONFIGMAP,
                                               "namespace": KUBEVIP_NAMESPACE}, "data": {}},
            KUBEVIP_NAMESPACE)  # fmt: skip
    _create(kube, NODES, {"metadata": {"name": NODE}})
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
              "addresses": [{"type": "InternalIP", "address": "127.0.0.2"}]}  # fmt: skip
    kube.patch(NODES, NODE, {"status": status}, patch_type="merge", subresource="status")


def _create(kube: Client, res: Resource, body: Obj, namespace: str | None = None) -> None:
    body = {"apiVersion": res.api_version, "kind": res.kind, **body}
    with contextlib.suppress(Conflict):  # a plane kept from an earlier session
        kube.create(res, body, namespace=namespace)


# ------------------------------------------------------------------ per run
def add_pool(kube: Client, impl: str, namespace: str) -> str:
    """The run's pool, in the form `impl` reads; its name."""
    name = f"bench-{namespace}"
    if impl == "ours":
        kube.create(POOLS, {"apiVersion": POOLS.api_version, "kind": POOLS.kind,
                            "metadata": {"name": name},
                            "spec": {"addresses": [POOL_V4, POOL_V6]}})  # fmt: skip
    elif impl == "metallb":
        kube.create(IPADDRESSPOOLS, {
            "apiVersion": IPADDRESSPOOLS.api_version, "kind": IPADDRESSPOOLS.kind,
            "metadata": {"name": name, "namespace": METALLB_NAMESPACE},
            "spec": {"addresses": [POOL_V4, POOL_V6]},
        }, namespace=METALLB_NAMESPACE)  # fmt: skip
    else:
        data = {f"cidr-{namespace}": f"{POOL_V4},{POOL_V6}"}
        kube.patch(r.CONFIG_MAPS, KUBEVIP_CONFIGMAP, {"data": data}, patch_type="merge",
                   namespace=KUBEVIP_NAMESPACE)  # fmt: skip
    return name


def drop_pool(kube: Client, impl: str, namespace: str, name: str) -> None:
    try:
        if impl == "ours":
            kube.delete(POOLS, name)
        elif impl == "metallb":
            kube.delete(IPADDRESSPOOLS, name, namespace=METALLB_NAMESPACE)
        else:
            kube.patch(r.CONFIG_MAPS, KUBEVIP_CONFIGMAP, {"data": {f"cidr-{namespace}": None}},
                       patch_type="merge", namespace=KUBEVIP_NAMESPACE)  # fmt: skip
    except NotFound:
        pass


@dataclass(frozen=True)
class Started:
    child: Child
    metrics_port: int  # ours: /metrics over plain HTTP; 0 for the peers


def start(impl: str, binary: Path, kubeconfig: Path, log: Path) -> Started:
    """One controller process, leader election off, its servers on free loopback ports."""
    port = free_port()
    if impl == "ours":
        argv = [str(lb.BINARY), "--controllers=service-lb-ipam", "--leader-elect=false",
                f"--kubeconfig={kubeconfig}", f"--metrics-bind-address=127.0.0.1:{port}",
                "--metrics-secure=false", f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--lb-kubevip-configmap="]  # fmt: skip
        return Started(spawn("lb-ours", argv, log, env=OURS_ENV), port)
    if impl == "metallb":
        argv = [str(binary), f"--kubeconfig={kubeconfig}", "--webhook-mode=disabled",
                "--disable-cert-rotation", f"--namespace={METALLB_NAMESPACE}",
                f"--pod-name={METALLB_NAME}", f"--port={port}",
                f"--health-probe-port={free_port()}"]  # fmt: skip
        return Started(spawn("lb-metallb", argv, log, env=PATH_ONLY), 0)
    home = _kubevip_home(kubeconfig, log)
    argv = [str(binary), "--OutSideCluster=true", f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={home / 'certs'}"]  # fmt: skip
    return Started(spawn("lb-kube-vip-cp", argv, log, env={**PATH_ONLY, "HOME": str(home)}), 0)


def _kubevip_home(kubeconfig: Path, log: Path) -> Path:
    """With --OutSideCluster=true the provider's own client reads $HOME/.kube/config (not
    --kubeconfig, which only the cloud-provider framework's clients use): the same user's."""
    home = log.with_suffix(".home")
    (home / ".kube").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kubeconfig, home / ".kube" / "config")
    return home


def purge(kube: Client, namespace: str, names: Iterator[str]) -> None:
    """Delete what a failed run left, finalizers and all, so the next controller (MetalLB
    lists every Service of the cluster) starts from the same state."""
    for name in names:
        try:
            kube.patch(SERVICES, name, {"metadata": {"finalizers": None}}, patch_type="merge",
                       namespace=namespace)  # fmt: skip
            kube.delete(SERVICES, name, namespace=namespace)
        except NotFound:
            continue
