"""`make demo`: the whole product on real nodes, on a throw-away control plane.

The real-node tier's harness (docs/testing.md, "The real-node tier"): a plane of its own with
kube-controller-manager and kube-scheduler on loopback; real kubelets (``--cloud-provider=
external``) with Debian's containerd in namespaces named ``lcrn-<pid>-<n>``; the chart, packaged
as `make release` packages it, installed with the real helm. Steps, each printed as it happens
with the objects before and after and its time:

1. the control plane; 2. the chart from the release bundle (dist/) or packaged now;
3. the demo node registers (``serverTLSBootstrap: true``, no pod network) and a second node
   joins, to run the controller manager and outlive the demo node; 4. ``helm install`` with the
   agent and local-ccm-controller-manager (node-lifecycle, node-ipam, kubelet-serving-approver,
   service-lb-ipam): the demo node is initialised; 5. its kubelet's serving CSR is approved and
   signed, and the kubelet serves the certificate on :10250; 6. a ClusterCIDR: podCIDRs
   assigned, the node's CNI network written from them, a Pod gets an IP in range; 7. a
   LoadBalancer Service gets a pool address; 8. the demo node is stopped for good and the
   lifecycle controller deletes it.

Every address is in a documentation range, inside namespaces the demo made: nothing leaves the
machine. Without what a real node needs (root, cgroup v1, containerd, runc, the CNI plugins,
the project's image) the agent-only demo (tests/support/demo.py) runs instead, after saying why.

Exit 0: every step happened. 1: a step did not (which and why is printed). 3: the demo could
not run (binaries, control plane, nodes). ``python -m tests.support.demo_realnode
[--needs-image]`` (that flag only answers, by its exit code, whether `make image` must run).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import socket
import ssl
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from ipaddress import IPv4Interface, IPv4Network, ip_address
from pathlib import Path
from typing import Any, TypeVar

from local_ccm.csr.api import CSRS, FIELD_SELECTOR
from local_ccm.lbipam.api import SERVICES
from local_ccm.netlink.netns import run_in_netns
from tests.support import demo as agent_only
from tests.support import demo_show as show
from tests.support import names
from tests.support import resources as r
from tests.support.binaries import Binaries, ensure
from tests.support.chart import REPO
from tests.support.controlplane import ControlPlane, Options, artifacts_root, start_control_plane
from tests.support.lifecycle_harness import exists
from tests.support.oci import image_archive
from tests.support.realnode_chart import install_chart, node_values, package_chart
from tests.support.realnode_cluster import (
    Cluster,
    another_node_numbered,
    cluster_on,
    missing_prerequisites,
)
from tests.support.waiting import eventually

EXIT_OK, EXIT_STEP_FAILED, EXIT_DEMO_FAILED = 0, 1, 3
BINARIES = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
            "helm"]  # fmt: skip
SURVIVOR_V4 = IPv4Interface("192.0.2.20/25")  # the demo node keeps the tier's 192.0.2.10
CLUSTER_CIDR = IPv4Network("192.0.2.128/25")  # docs/testing.md: a real node's Pods
POOL = IPv4Network("203.0.113.240/28")
# The lifecycle controller manages only Nodes with this label: the demo node is NotReady until
# its pod network exists and, in this sandbox, unreachable from the other node (each node has a
# gateway of its own), so it would be deleted before step 6. It gets the label when it stops.
SCOPE_LABEL = ("demo.local-ccm.io/lifecycle", "managed")
GRACE = "--node-monitor-grace-period=20s"  # the stopped node goes Unknown sooner
TIMEOUT = 240.0
# The agent's metadata rules (docs/metadata.md): the demo node's address matches, so it gets
# the topology and instance-type labels of this rule.
METADATA_RULES = {
    "defaultInstanceType": False,
    "rules": [{"name": "demo", "match": {"addresses": ["192.0.2.0/25"]}, "zone": "demo-zone-a",
               "region": "demo-region", "instanceType": "{arch}"}],
}  # fmt: skip
T = TypeVar("T")


class StepError(Exception):
    """A step of the product did not happen: exit 1."""


def wait(predicate: Callable[[], T | bool | None], what: str, node: Cluster) -> T:
    try:
        return eventually(predicate, timeout=TIMEOUT, message=what)
    except AssertionError as exc:
        raise StepError(f"{exc}\n{node.node.tails(10)}") from None


# ------------------------------------------------------------------ steps 1-3: what runs
def start_plane(binaries: Binaries) -> ControlPlane:
    run_id = names.new_run_id(datetime.now(UTC), os.getpid())
    opts = Options(run_id, artifacts_root(os.environ) / run_id, Path(tempfile.gettempdir()),
                   plane="demo-realnode")  # fmt: skip
    return start_control_plane(binaries, opts)


def release_chart(binaries: Binaries, scratch: Path) -> tuple[Path, str]:
    """dist/'s chart when `make release` wrote it after the chart's last change, else the
    chart packaged now exactly as `make release` does; and which."""
    chart_dir = REPO / "charts" / "local-ccm"
    for packaged in sorted((REPO / "dist").glob("local-ccm-*.tgz")):
        if show.chart_is_current(packaged, chart_dir):
            return packaged, f"from the release bundle: {packaged.relative_to(REPO)}"
    made = package_chart(scratch, binaries.path("helm"))
    why = "no dist/ (run `make release`)" if not (REPO / "dist").is_dir() else "dist/ is stale"
    return made, f"{why}: packaged now as `make release` does: {made.name}"


# ------------------------------------------------------------------ steps 4-8: the product
def chart_values(cluster: Cluster, survivor: str) -> dict[str, Any]:
    lifecycle = {
        "enabled": True, "replicaCount": 1,
        "nodeSelector": {"kubernetes.io/hostname": survivor},
        "controller": {"nodeSelector": "=".join(SCOPE_LABEL), "notReadyTimeout": "5s",
                       "reconcileInterval": "2s", "pingCount": 1, "pingTimeout": "2s",
                       # raw sockets: the node namespace keeps the kernel's ping_group_range
                       "probeFamilies": "ipv4", "icmpMode": "raw"},
    }  # fmt: skip
    manager = {
        "enabled": True,
        "kubeletServingApprover": {"enabled": True},
        "loadBalancer": {"enabled": True, "pools": [{"name": "demo", "addresses": [str(POOL)]}]},
    }
    return {**node_values(cluster), "nodeMetadata": {"rules": METADATA_RULES},
            "nodeLifecycleController": lifecycle,
            "controllerManager": manager, "nodeIpamController": {"enabled": True}}  # fmt: skip


def node(cluster: Cluster) -> dict[str, Any]:
    return cluster.kube.get(r.NODES, cluster.node.spec.name)


def serving_csr(cluster: Cluster) -> dict[str, Any] | None:
    user = f"system:node:{cluster.node.spec.name}"
    items = cluster.kube.list(CSRS, field_selector=FIELD_SELECTOR)["items"]
    found = [c for c in items if c["spec"]["username"] == user]
    return next((c for c in found if c["status"].get("certificate")), found[0] if found else None)


def served_certificate(cluster: Cluster) -> bytes | None:
    """The kubelet's certificate on <node address>:10250, verified against the plane's client
    CA (kube-controller-manager's signer) for that IP address."""
    address = cluster.node.address
    sock = run_in_netns(cluster.node.names.node_ns,
                        lambda: socket.create_connection((address, 10250), timeout=5))  # fmt: skip
    context = ssl.create_default_context(cadata=cluster.plane.pki.client_ca.cert_pem.decode())
    with context.wrap_socket(sock, server_hostname=address) as tls:
        return tls.getpeercert(binary_form=True)


def certificate_der(csr: dict[str, Any]) -> bytes:
    return ssl.PEM_cert_to_DER_cert(base64.b64decode(csr["status"]["certificate"]).decode())


def demo_pod(cluster: Cluster) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "containers": [{"name": "pause", "image": cluster.node.spec.pause.name,
                            "imagePullPolicy": "Never"}],
            "nodeSelector": {"kubernetes.io/hostname": cluster.node.spec.name},
            "tolerations": [{"operator": "Exists"}],
        },
    }  # fmt: skip


def step_initialised(steps: show.Steps, cluster: Cluster, helm: Path, chart: Path,
                     survivor: str) -> None:  # fmt: skip
    steps.begin("helm install: the agent and local-ccm-controller-manager (node-lifecycle, "
                "node-ipam, kubelet-serving-approver, service-lb-ipam)")  # fmt: skip
    seconds = install_chart(cluster, helm, chart, chart_values(cluster, survivor))
    print(f"  helm install --wait took {seconds:.1f} s")
    after = wait(lambda: show.is_initialised(n := node(cluster)) and n, "Node initialised",
                 cluster)  # fmt: skip
    steps.show(f"AFTER Node {cluster.node.spec.name}", show.describe_node(after))
    steps.done("the agent wrote the InternalIP and removed the uninitialized taint")


def step_serving_cert(steps: show.Steps, cluster: Cluster) -> None:
    steps.begin("the kubelet's serving certificate: CSR approved by local-ccm, signed, served")
    csr = wait(lambda: (c := serving_csr(cluster)) and c["status"].get("certificate") and c,
               "a signed kubelet-serving CSR", cluster)  # fmt: skip
    steps.show("AFTER", show.describe_csr(csr))
    expected = certificate_der(csr)
    wait(lambda: served_certificate(cluster) == expected, "the certificate served on :10250",
         cluster)  # fmt: skip
    print(f"  TLS handshake with {cluster.node.address}:10250 (from the node's namespace): "
          "the signed certificate, verified against the cluster CA")  # fmt: skip
    steps.done("approved, signed and served")


def step_pod_network(steps: show.Steps, cluster: Cluster) -> None:
    steps.begin(f"node IPAM: a ClusterCIDR {CLUSTER_CIDR} (a /28 per node), then a Pod")
    cluster.kube.create(r.PODS, demo_pod(cluster), namespace="default")
    steps.show("BEFORE", show.describe_pod(cluster.kube.get(r.PODS, "demo", namespace="default")))
    body = {"apiVersion": r.CLUSTER_CIDRS.api_version, "kind": r.CLUSTER_CIDRS.kind,
            "metadata": {"name": "demo"},
            "spec": {"perNodeHostBits": 4, "ipv4": str(CLUSTER_CIDR)}}  # fmt: skip
    cluster.kube.create(r.CLUSTER_CIDRS, body)
    cidrs = wait(lambda: node(cluster)["spec"].get("podCIDRs"), "podCIDRs assigned", cluster)
    subnet = IPv4Network(cidrs[0])
    cluster.node.write_cni(subnet)
    print(f"  podCIDRs {cidrs}: the node's CNI network (bridge + host-local) written for {subnet}")
    pod = wait(lambda: (p := cluster.kube.get(r.PODS, "demo", namespace="default"))["status"]
               .get("podIP") and p, "the Pod's IP", cluster)  # fmt: skip
    steps.show("AFTER", show.describe_pod(pod) + show.describe_node(node(cluster)))
    if ip_address(pod["status"]["podIP"]) not in subnet:
        raise StepError(f"Pod IP {pod['status']['podIP']} is not in {subnet}")
    steps.done(f"Pod IP {pod['status']['podIP']} in the node's {subnet}")


def step_load_balancer(steps: show.Steps, cluster: Cluster) -> None:
    steps.begin(f"service-lb-ipam: a Service of type LoadBalancer, pool {POOL}")
    body = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "selector": {"app": "demo"},
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}  # fmt: skip
    steps.show("BEFORE", show.describe_service(
        cluster.kube.create(SERVICES, body, namespace="default")))  # fmt: skip

    def addressed() -> dict[str, Any] | None:
        svc = cluster.kube.get(SERVICES, "demo", namespace="default")
        return svc if svc["status"].get("loadBalancer", {}).get("ingress") else None

    svc = wait(addressed, "the Service's address", cluster)
    steps.show("AFTER", show.describe_service(svc))
    address = svc["status"]["loadBalancer"]["ingress"][0]["ip"]
    if ip_address(address) not in POOL:
        raise StepError(f"{address} is not in the pool {POOL}")
    steps.done(f"{address} from the pool")


def step_deleted(steps: show.Steps, cluster: Cluster) -> None:
    name = cluster.node.spec.name
    steps.begin(f"Node {name} stopped for good (kubelet, containerd, namespaces)")
    steps.show("BEFORE", show.describe_node(node(cluster)))
    patch = {"metadata": {"labels": dict([SCOPE_LABEL])}}
    cluster.kube.patch(r.NODES, name, patch, patch_type="merge")
    uid = node(cluster)["metadata"]["uid"]
    if problems := cluster.node.stop():
        raise StepError(f"the node did not stop cleanly: {problems}")
    print(f"  labelled {'='.join(SCOPE_LABEL)} (the lifecycle controller's scope), stopped")
    wait(lambda: not exists(cluster.kube, name), f"Node {name} deleted", cluster)
    for e in wait(lambda: deletion_events(cluster, uid), "the DeletingNode Event", cluster):
        print(f"  event {e['reason']}: {e['message'][:160]}")
    steps.show("AFTER", [f"  Node {name}: deleted"])
    steps.done("local-ccm's lifecycle controller deleted the Node")


def deletion_events(cluster: Cluster, uid: str) -> list[dict[str, Any]] | None:
    """The lifecycle controller's Events about the Node, once DeletingNode is among them."""
    found = cluster.kube.list(r.EVENTS, field_selector=f"involvedObject.uid={uid}")["items"]
    mine = [e for e in found if e["reason"] in ("CheckingReachability", "DeletingNode")]
    mine.sort(key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")
    return mine if any(e["reason"] == "DeletingNode" for e in mine) else None


# ------------------------------------------------------------------ the run
def run_steps(steps: show.Steps, stack: ExitStack) -> None:
    """Steps 1-3 raise anything but StepError when the demo cannot run; 4-8 raise StepError."""
    steps.begin("a control plane of its own: etcd, kube-apiserver, kube-controller-manager, "
                "kube-scheduler on loopback")  # fmt: skip
    binaries = ensure(BINARIES, report=show.report_build)
    plane = start_plane(binaries)
    stack.callback(plane.stop)
    steps.logs = plane.options.artifacts
    steps.done(f"kube-apiserver {plane.version} at {plane.api_url}")
    steps.begin("the chart, as `make release` ships it")
    chart, which = release_chart(binaries, Path(stack.enter_context(tempfile.TemporaryDirectory())))
    steps.done(which)
    steps.begin("a real node registers (kubelet --cloud-provider=external, serverTLSBootstrap, "
                "no pod network), then a second one")  # fmt: skip
    cluster = stack.enter_context(cluster_on(plane, binaries, 1, server_tls_bootstrap=True,
                                             cni=False, kcm_extra=(GRACE,)))  # fmt: skip
    steps.show(f"BEFORE Node {cluster.node.spec.name}", show.describe_node(cluster.registered))
    print("\n".join(show.describe_csr(serving_csr(cluster))), "(no IP address to ask one for)")
    other = stack.enter_context(another_node_numbered(cluster, binaries, 2, v4=SURVIVOR_V4))
    print(f"  Node {other.spec.name} ({other.address}) Ready: it runs the controller manager")
    steps.done(f"Node {cluster.node.spec.name} registered, tainted, without an IP address")
    step_initialised(steps, cluster, binaries.path("helm"), chart, other.spec.name)
    step_serving_cert(steps, cluster)
    step_pod_network(steps, cluster)
    step_load_balancer(steps, cluster)
    print("\n== resource cost of each node, now")
    for each in (cluster.node, other):
        print(show.read_cost(each), flush=True)
    step_deleted(steps, cluster)


def demo() -> int:
    steps = show.Steps(total=8)
    code = EXIT_OK
    with ExitStack() as stack:
        try:
            run_steps(steps, stack)
        except StepError as exc:
            code = EXIT_STEP_FAILED
            print(f"\ndemo: {steps.current} did not happen: {exc}", file=sys.stderr)
        except Exception as exc:  # binaries, plane, nodes: the demo itself could not run
            code = EXIT_DEMO_FAILED
            print(f"\ndemo: could not run ({steps.current}): {type(exc).__name__}: {exc}",
                  file=sys.stderr)  # fmt: skip
        print("\n== teardown: nodes, control plane and their files", flush=True)
    if code == EXIT_OK and steps.logs is not None:
        shutil.rmtree(steps.logs, ignore_errors=True)
    elif steps.logs is not None:
        print(f"  logs kept in {steps.logs}")
    print(f"  everything stopped and removed; {len(steps.times)}/{steps.total} steps in "
          f"{steps.elapsed():.1f} s total; exit {code}", flush=True)  # fmt: skip
    return code


def why_no_real_node() -> list[str]:
    missing = missing_prerequisites()
    if not image_archive().exists():
        missing.append(f"the project's image {image_archive().relative_to(REPO)} (`make image`)")
    return missing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.demo_realnode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--needs-image",
        action="store_true",
        help="only answer: exit 0 if this machine can run a real node and the project's image "
        "archive is missing (`make demo` then builds it)",
    )
    args = parser.parse_args(argv)
    os.environ.pop("KUBECONFIG", None)  # never a person's cluster: only the demo's own plane
    if args.needs_image:
        return 0 if not missing_prerequisites() and not image_archive().exists() else 1
    if missing := why_no_real_node():
        print(
            "local-ccm demo: this machine cannot run a real node; missing: "
            + "; ".join(missing)
            + ".\nFalling back to the agent-only demo.\n",
            flush=True,
        )
        return agent_only.main([])
    print("local-ccm demo: the whole product on real nodes (kubelet + containerd in namespaces)")
    return demo()


if __name__ == "__main__":
    sys.exit(main())
