"""Each component does its core work with a TokenRequest token of its shipped ServiceAccount
and exactly the chart's RBAC (D08). Any 403 fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from local_ccm import names
from local_ccm.kube.client import Client
from local_ccm.kube.errors import NotFound
from tests.integration.deploy.release import FORBIDDEN, apply_identity, bound_pod, render
from tests.support import resources as r
from tests.support.agent_process import AgentProcess, copy_kubeconfig, private_dir
from tests.support.agent_scenarios import A01_ADDRESSES, a01_network, initialised, pairs, reasons
from tests.support.chart import Helm, args_of, component
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

LEASE = r.Resource("coordination.k8s.io", "v1", "leases", "Lease", True)


@pytest.mark.netns
def test_d08_agent_initialises_its_node_with_the_shipped_rbac_and_policy(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    make_node: NodeFactory, netns: NetnsFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str, test_artifacts: Path,
) -> None:  # fmt: skip
    values = {
        "ipDetection": {"internalIPTarget": "192.0.2.1", "externalIPTarget": "203.0.113.1"},
        "controller": {"reconcileInterval": "1s", "settleTime": "1s", "resyncInterval": "1m"},
    }
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    ds = component(rel.objects, "agent")
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    ns = a01_network(netns)
    node = make_node(uninitialized=True)["metadata"]["name"]
    pod = bound_pod(kube, namespace=test_namespace, name=f"{unique_name[:50]}-p",
                    service_account=sa, node=node, labels=test_labels)  # fmt: skip
    source = control_plane.token_kubeconfig(sa, test_namespace, bound_pod=pod)
    argv = [a.replace("$(NODE_NAME)", node) for a in args_of(ds)]  # exactly the chart's flags
    agent = AgentProcess(ns.name, argv, log_path=test_artifacts / "agent.log",
                         kubeconfig=copy_kubeconfig(private_dir(test_artifacts), source),
                         api_url=control_plane.api_url)  # fmt: skip
    with agent:
        done = eventually(lambda: initialised(kube, node), timeout=20, message="taint removed")
        assert pairs(done) == A01_ADDRESSES, done
        assert names.OWNED_ADDRESSES_ANNOTATION in done["metadata"]["annotations"]
        synced = [c for c in done["status"]["conditions"]
                  if c["type"] == names.ADDRESSES_SYNCED_CONDITION]  # fmt: skip
        assert [c["status"] for c in synced] == ["True"], synced
        eventually(lambda: "NodeInitialized" in reasons(kube, node), timeout=10,
                   message="Event NodeInitialized")  # fmt: skip
    assert not FORBIDDEN.search(agent.log()), agent.log()[-3000:]
    assert "Forbidden" not in agent.log(), agent.log()[-3000:]


def test_d08_lifecycle_controller_holds_its_lease_and_deletes_an_eligible_node(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    make_node: NodeFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str,
) -> None:  # fmt: skip
    from tests.support.lifecycle_harness import (  # noqa: PLC0415 - a sibling's module
        InProcessController,
        eligible_node,
        exists,
        options,
    )

    lease = unique_name
    values = {"nodeLifecycleController": {"leaderElection": {"resourceName": lease}}}
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    deployment = component(rel.objects, "node-lifecycle-controller")
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = control_plane.token_kubeconfig(sa, test_namespace)
    test_selector = f"{names_label()}={test_labels[names_label()]}"
    node = eligible_node(make_node, age=120)
    argv = [
        a.replace("$(POD_NAMESPACE)", test_namespace).replace("$(NODE_NAME)", "")
        for a in args_of(deployment)
    ]
    argv += [f"--node-selector={test_selector}", "--not-ready-timeout=1s", "--ping-count=0",
             "--max-unhealthy=100%", "--self-check=false", "--metrics-bind-address=0",
             "--health-probe-bind-address=0", "--leader-elect-lease-duration=4s",
             "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=0.5s",
             "--reconcile-interval=1s"]  # fmt: skip
    argv = [a for a in argv if a not in ("--node-name=", "--probe=icmp")]
    opts = options(argv, kubeconfig)
    name, uid = node["metadata"]["name"], node["metadata"]["uid"]
    with InProcessController(opts):
        held = eventually(lambda: _holder(kube, test_namespace, lease), timeout=20,
                          message="the Lease is held")  # fmt: skip
        assert held
        eventually(lambda: not exists(kube, name, uid), timeout=30, message=f"{name} deleted")


def names_label() -> str:
    from tests.support import names as test_names  # noqa: PLC0415

    return test_names.TEST_LABEL


def _holder(kube: Client, namespace: str, lease: str) -> str | None:
    try:
        got = kube.get(LEASE, lease, namespace=namespace)
    except NotFound:
        return None
    holder = got.get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None


def test_d08_ipam_controller_allocates_pod_cidrs(
    *,
    control_plane: ControlPlane, kube: Client, crds: list[object], chart_helm: Helm,
    track: Tracker, make_node: NodeFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str, test_artifacts: Path,
) -> None:  # fmt: skip
    from tests.integration.ipam import harness  # noqa: PLC0415 - a sibling's module
    from tests.integration.ipam.objects import cluster_cidr  # noqa: PLC0415

    lease = unique_name
    values = {"nodeIpamController": {"enabled": True, "installCRDs": False,
                                     "leaderElection": {"resourceName": lease}}}  # fmt: skip
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    deployment = component(rel.objects, "node-ipam-controller")
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = control_plane.token_kubeconfig(sa, test_namespace)
    label = names_label()
    selector = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": label, "operator": "In", "values": [test_labels[label]]}]}]}  # fmt: skip
    pool = cluster_cidr(unique_name, test_labels, bits=8, ipv4="198.18.0.0/16",
                        node_selector=selector)  # fmt: skip
    kube.create(r.CLUSTER_CIDRS, pool)
    track(r.CLUSTER_CIDRS, unique_name)
    node = make_node()["metadata"]["name"]
    argv = [a for a in args_of(deployment) if not a.startswith("--webserver-bind-address")]
    argv.append("--leader-elect-retry-period=0.5s")
    env = {"POD_NAMESPACE": test_namespace, "POD_NAME": f"{unique_name[:50]}-ipam"}
    proc = harness.start(argv, kubeconfig, test_artifacts / "ipam.log", env=env)
    try:
        cidrs = eventually(lambda: kube.get(r.NODES, node)["spec"].get("podCIDRs"), timeout=30,
                           message="podCIDRs allocated")  # fmt: skip
        assert cidrs == ["198.18.0.0/24"], cidrs
        assert _holder(kube, test_namespace, lease)
    finally:
        proc.stop()
    assert not FORBIDDEN.search(proc.log(400)), proc.log()
