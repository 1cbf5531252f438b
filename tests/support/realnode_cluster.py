"""A cluster of one real node for a test module of the real-node tier (tests/realnode).

Each cluster has a plane of its own (tests/support/dedicated.py): the shared plane's tests make
Nodes by hand, and a scheduler, the node-lifecycle controller or a real kubelet there would
disturb them, as their IPAM and lifecycle controllers would disturb the real node. On it run
kube-controller-manager with what a node needs (:data:`cpargs.REAL_NODE_CONTROLLERS`: the
not-ready taint goes at Ready, DaemonSets get Pods, the client CA signs kubelet certificates)
and kube-scheduler; then the node (tests/support/realnode.py), with the pause image and the
project's image (`make image`) imported into its containerd.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from local_ccm.kube.client import Client
from tests.support import cpargs
from tests.support import nodeconf as nc
from tests.support.binaries import Binaries, cache_dir
from tests.support.cgroup import MOUNTINFO, v1_cpu_hierarchy
from tests.support.controlplane import ControlPlane
from tests.support.cpargs import ADVERTISE_ADDRESS, FIRST_SERVICE_IP
from tests.support.dedicated import dedicated_plane
from tests.support.kcm import start_kcm
from tests.support.netns import Namespace
from tests.support.oci import REPO, image_archive, image_ref
from tests.support.pause import ensure_pause_image
from tests.support.realnode import NODE_BASE, NodeSpec, RealNode, real_node
from tests.support.relay import LoopbackRelay
from tests.support.scheduler import start_scheduler

FIELD_MANAGER = "local-ccm-realnode-test"
# The project's image is imported under a name no registry serves, so a Pod that runs it can
# only have found it in the node's containerd.
IMAGE_REPOSITORY = "local-ccm.test/local-ccm"
COMMANDS = ("ip", "setpriv", "nsenter", "unshare", "bash", "containerd", "ctr", "runc", "gcc",
            "iptables", "conntrack", "ebtables", "ethtool", "socat")  # fmt: skip
CNI_PLUGINS = ("bridge", "host-local", "loopback")
COUNTER = pytest.StashKey[Iterator[int]]()


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    node: RealNode
    kube: Client  # admin
    # The Node as it was when it first reported Ready (without a CNI network: when the kubelet
    # first reported its conditions, NotReady).
    registered: dict[str, Any]

    @property
    def image(self) -> tuple[str, str]:
        """(repository, tag) of the project's image in the node's containerd."""
        return IMAGE_REPOSITORY, image_ref()


@dataclass(frozen=True)
class NodeOptions:
    """What a cluster may add to the tier's usual node: more images to import, a kubelet that
    can be stopped and started (RealNode.stop_kubelet/start_kubelet), more KCM controllers."""

    images: tuple[nc.ImageImport, ...] = ()
    restartable_kubelet: bool = False
    kcm_controllers: tuple[str, ...] = ()
    # kube-proxy on the node (iptables mode, nodeconf.kube_proxy_config), as user
    # system:kube-proxy (the bootstrap binding to system:node-proxier)
    kube_proxy: bool = False


def missing_prerequisites() -> list[str]:
    """What this machine lacks for a real node (scripts/setup.sh installs the packages)."""
    missing = [] if os.geteuid() == 0 else ["root (namespaces, cgroups, mounts)"]
    missing += [f"`{c}` on PATH" for c in COMMANDS if shutil.which(c) is None]
    missing += [
        str(nc.CNI_BINARIES / p) for p in CNI_PLUGINS if not (nc.CNI_BINARIES / p).is_file()
    ]
    if v1_cpu_hierarchy(MOUNTINFO.read_text()) is None:
        missing.append("cgroup v1 (the tier runs the kubelet with failCgroupV1: false)")
    return missing


def require_real_node() -> None:
    """Skip (an error under CI=true, tests/conftest.py) without the prerequisites; fail without
    the image archive, as the image tests do."""
    if missing := missing_prerequisites():
        pytest.skip("realnode: missing " + ", ".join(missing))
    if not image_archive().exists():
        pytest.fail(f"no {image_archive().relative_to(REPO)}: run `make image` (`make test` does)",
                    pytrace=False)  # fmt: skip


def write_signer(plane: ControlPlane) -> tuple[Path, Path]:
    """The client CA's certificate and key, for KCM's signer of kubelet certificates."""
    ca = plane.pki.client_ca
    cert, key = plane.workdir / "pki" / "signer.crt", plane.workdir / "pki" / "signer.key"
    cert.write_bytes(ca.cert_pem)
    key.touch(mode=0o600)
    key.write_bytes(ca.key_pem)
    return cert, key


def node_number(config: pytest.Config) -> int:
    """1, 2, ... per pytest process: the ``<n>`` of ``lcrn-<pid>-<n>``."""
    counter: Iterator[int] = config.stash.setdefault(COUNTER, itertools.count(1))
    return next(counter)


@contextmanager
def realnode_cluster(
    config: pytest.Config,
    binaries: Binaries,
    *,
    node_ip: bool = False,
    server_tls_bootstrap: bool = False,
    cni: bool = True,
    kcm_extra: Sequence[str] = (),
    options: NodeOptions = NodeOptions(),
) -> Iterator[Cluster]:
    """A plane, KCM, the scheduler and one Ready node (``cni=False``: one registered node with no
    pod network, NotReady); all stopped and removed on exit."""
    require_real_node()
    with dedicated_plane(config, binaries, "realnode-plane") as plane:
        number = node_number(config)
        with cluster_on(plane, binaries, number, node_ip=node_ip, kcm_extra=kcm_extra,
                        server_tls_bootstrap=server_tls_bootstrap, cni=cni,
                        options=options) as cluster:  # fmt: skip
            yield cluster


@contextmanager
def cluster_on(
    plane: ControlPlane,
    binaries: Binaries,
    number: int,
    *,
    node_ip: bool = False,
    server_tls_bootstrap: bool = False,
    cni: bool = True,
    kcm_extra: Sequence[str] = (),
    options: NodeOptions = NodeOptions(),
) -> Iterator[Cluster]:
    """:func:`realnode_cluster` on a plane the caller started (`make demo` has no pytest
    config): KCM, the scheduler and node ``lcrn-<pid>-<number>``."""
    kcm_args = (*cpargs.real_node_kcm_extra(*write_signer(plane)), *kcm_extra)
    controllers = (*cpargs.REAL_NODE_CONTROLLERS, *options.kcm_controllers)
    start_kcm(plane, binaries, controllers=controllers, extra=kcm_args)
    start_scheduler(plane, binaries)
    names = nc.NodeNames(os.getpid(), number, NODE_BASE)
    spec = node_spec(plane, binaries, names, node_ip=node_ip,
                     server_tls_bootstrap=server_tls_bootstrap, cni=cni)  # fmt: skip
    spec = replace(spec, images=(*spec.images, *options.images),
                   restartable_kubelet=options.restartable_kubelet)  # fmt: skip
    if options.kube_proxy:
        proxy_kubeconfig = plane.user_kubeconfig("system:kube-proxy", [])
        spec = replace(spec, kube_proxy=binaries.path("kube-proxy"),
                       kube_proxy_kubeconfig=proxy_kubeconfig)  # fmt: skip
    with (
        Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as kube,
        real_node(spec, names) as node,
        kubernetes_service(node),
    ):
        yield Cluster(plane, node, kube,
                      node.wait_ready(kube) if cni else node.wait_registered(kube))  # fmt: skip


@contextmanager
def another_node(
    cluster: Cluster, config: pytest.Config, binaries: Binaries, *, v4: IPv4Interface
) -> Iterator[RealNode]:
    """One more Ready node on ``cluster``'s plane: namespaces, cgroups and files of its own,
    eth0 at ``v4`` (another address of the same /25, behind a gateway of its own: the nodes
    cannot reach each other). Stopped and removed on exit."""
    with another_node_numbered(cluster, binaries, node_number(config), v4=v4) as node:
        yield node


@contextmanager
def another_node_numbered(
    cluster: Cluster, binaries: Binaries, number: int, *, v4: IPv4Interface
) -> Iterator[RealNode]:
    """:func:`another_node` as node ``lcrn-<pid>-<number>``, for callers without pytest."""
    names = nc.NodeNames(os.getpid(), number, NODE_BASE)
    spec = replace(node_spec(cluster.plane, binaries, names), v4=v4)
    with real_node(spec, names) as node, kubernetes_service(node):
        node.wait_ready(cluster.kube)
        yield node


@contextmanager
def kubernetes_service(node: RealNode) -> Iterator[None]:
    """The `kubernetes` Service's ClusterIP (443) on the node, as kube-proxy would make it
    reachable there: the address on the node's ``lo`` and a relay from it to the apiserver.
    Every node of a cluster has it: Pods in a network namespace of their own (the lifecycle
    controller, the controller manager off the host network) and manifests with no API server
    endpoint (in-cluster config: the Go original's chart) reach the API through it, from the
    node's namespace or through the pod network's gateway; only this one Service.

    A node that runs kube-proxy DNATs the ClusterIP to the Service's endpoint, the apiserver's
    advertise address (on no interface of the host): that address goes on the node's ``lo``
    too, with a relay on the apiserver's port, so in-cluster clients work either way."""
    ns = Namespace(node.names.node_ns)
    ns.batch(f"addr add {FIRST_SERVICE_IP}/32 dev lo")
    target = ("127.0.0.1", node.spec.api_port)
    with contextlib.ExitStack() as relays:
        relays.enter_context(LoopbackRelay(node.names.node_ns, target, port=443,
                                           host=FIRST_SERVICE_IP))  # fmt: skip
        if node.spec.kube_proxy is not None:
            ns.batch(f"addr add {ADVERTISE_ADDRESS}/32 dev lo")
            relays.enter_context(LoopbackRelay(node.names.node_ns, target,
                                               host=ADVERTISE_ADDRESS))  # fmt: skip
        yield


def node_spec(
    plane: ControlPlane,
    binaries: Binaries,
    names: nc.NodeNames,
    *,
    node_ip: bool = False,
    server_tls_bootstrap: bool = False,
    cni: bool = True,
) -> NodeSpec:
    """The node ``names.tag`` of ``plane``: a client certificate for ``system:node:<tag>``,
    logs beside the plane's, the pause image and the project's image to import."""
    project = nc.ImageImport(image_archive(), IMAGE_REPOSITORY)
    return NodeSpec(
        name=names.tag,
        api_port=plane.http.port,
        kubeconfig=plane.user_kubeconfig(f"system:node:{names.tag}", ["system:nodes"]),
        client_ca=plane.workdir / "pki" / "client-ca.crt",
        kubelet=binaries.path("kubelet"),
        pause=ensure_pause_image(cache_dir(os.environ)),
        logs=plane.logs_dir.parent / f"realnode-{names.tag}",
        images=(project,),
        node_ip=node_ip,
        server_tls_bootstrap=server_tls_bootstrap,
        cni=cni,
    )
