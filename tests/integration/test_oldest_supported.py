"""The product's main paths on the oldest Kubernetes the docs claim (the pin
`kubernetes_policy_minimum`, v1.30.14): one etcd + kube-apiserver of that version for the
module, and the same assertions as the newest version's scenarios make.

- the `local-ccm` agent (the real binary, uid 65532, no capability, the chart's RBAC, a
  Pod-bound token) initialises a Node: addresses from its namespace's routing table,
  spec.providerID, the uninitialized taint gone;
- one leader-elected `local-ccm-controller-manager` with all four controllers (the chart's
  combined Deployment; the chart itself renders IPAM only from 1.31) for the rest of the
  module:
  - service-lb-ipam: the pool CRD installs on 1.30 and a LoadBalancer Service gets an
    address of its pool;
  - kubelet-serving-approver: a node's own kubelet-serving CSR (certificates.k8s.io/v1) is
    approved (no kube-controller-manager of 1.30 is built, so nothing signs it);
  - node-lifecycle: a NotReady Node whose address nothing answers (inside the test's own /28
    on a veth into a namespace it made) is deleted, one whose address answers is kept;
  - node-ipam: 1.30 refuses the ClusterCIDR CRD (its rules call CEL's isCIDR()/cidr(), which
    1.30 allows only in rules already stored), so IPAM runs with its flag pool
    (`--cluster-cidr`) alone and a new Node gets a block of it.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm import names
from local_ccm.csr.api import CSRS
from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError, NotFound
from tests.integration.ipam.objects import pod_cidrs
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import DELETED, gone, kept
from tests.integration.test_c01_csr_approval import decided, make_node, submit
from tests.support import crds, lb
from tests.support import resources as r
from tests.support.agent_fixtures import A01Agent
from tests.support.agent_harness import FAST as AGENT_FAST
from tests.support.agent_scenarios import A01_ADDRESSES, condition_is, initialised, pairs
from tests.support.binaries import Binaries
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.csrs import request_pem
from tests.support.dedicated import dedicated_plane
from tests.support.fixtures import run_state
from tests.support.lifecycle_harness import FAST as LIFECYCLE_FAST
from tests.support.lifecycle_harness import eligible_node
from tests.support.netns import HostLink, NetnsFactory
from tests.support.processes import Child, spawn, tail
from tests.support.recipes import APISERVER_POLICY_MINIMUM
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
MANAGER = Path(sys.executable).parent / "local-ccm-controller-manager"
CLUSTER_CIDR = "10.130.0.0/16"
#: Only the lifecycle scenario's Nodes are the lifecycle controller's: the agent's Node and
#: the CSR's are Ready anyway, and no other Node may become a self-check peer.
LIFECYCLE_LABEL = ("oldest.local-ccm.io/lifecycle", "yes")
SETTLE = 20.0
LEASE = "local-ccm-controller-manager"  # the default --leader-elect-resource-name


@pytest.fixture(scope="module")
def policy_minimum_plane(
    request: pytest.FixtureRequest, binaries: Binaries
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver v1.30.x for this module (named so, the session's binary check
    builds or finds that apiserver before the first test)."""
    with dedicated_plane(
        request.config, binaries, "oldest-supported", apiserver=APISERVER_POLICY_MINIMUM
    ) as plane:
        yield plane


@pytest.fixture(scope="module")
def control_plane(policy_minimum_plane: ControlPlane) -> ControlPlane:
    """`kube`, `make_node`, `track`, `a01_agent` … of this module all use the 1.30 plane."""
    assert policy_minimum_plane.version.startswith("v1.30."), policy_minimum_plane.version
    return policy_minimum_plane


@pytest.fixture(scope="module")
def pool_crd(control_plane: ControlPlane) -> None:
    """The chart's LoadBalancerIPPool CRD, created and established on 1.30."""
    with Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="oldest") as kube:
        crds.install(kube, (crds.POOL_CRD,))


@pytest.fixture(scope="module")
def manager(
    request: pytest.FixtureRequest, control_plane: ControlPlane, pool_crd: None
) -> Iterator[Child]:
    """One controller manager with every controller, leader-elected, for the whole module."""
    selector = "=".join(LIFECYCLE_LABEL)
    argv = [
        str(MANAGER), *LIFECYCLE_FAST, f"--kubeconfig={control_plane.admin_kubeconfig}",
        "--controllers=node-lifecycle,node-ipam,kubelet-serving-approver,service-lb-ipam",
        f"--node-selector={selector}", f"--cluster-cidr={CLUSTER_CIDR}",
        "--node-cidr-mask-size-ipv4=24",
    ]  # fmt: skip
    log = run_state(request.config).artifacts / "oldest-supported" / "manager.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    child = spawn("manager", argv, log, env={"PATH": "/usr/bin:/bin"})
    try:
        with Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="oldest") as k:
            eventually(lambda: lease_holder(k), timeout=SETTLE, message="the Lease is held")
        yield child
    finally:
        child.stop(grace=5)


def lease_holder(kube: Client) -> str | None:
    """The manager's Lease's holder (coordination.k8s.io/v1), once there is one."""
    try:
        lease = kube.get(r.LEASES, LEASE, namespace="kube-system")
    except NotFound:
        return None
    return lease["spec"].get("holderIdentity") or None


def running(manager: Child) -> None:
    assert manager.exited() is None, tail(manager.log_path, 80)


def test_the_plane_is_the_oldest_supported_version(control_plane: ControlPlane) -> None:
    """Every other test here runs against this apiserver, not the newest one."""
    assert control_plane.version == "v1.30.14"


def test_agent_initialises_a_node(a01_agent: A01Agent, kube: Client) -> None:
    name, agent, _ = a01_agent([*AGENT_FAST, "--provider-id=local://{node_name}"])
    with agent:
        node = eventually(lambda: initialised(kube, name), timeout=15, message="taint removed")
        assert names.UNINITIALIZED_TAINT not in str(node["spec"].get("taints"))
        assert pairs(node) == A01_ADDRESSES, node["status"]
        assert node["spec"]["providerID"] == f"local://{name}", node["spec"]
        assert condition_is(kube, name, "True", "AddressesSynced")
        assert agent.exited() is None, agent.log()


@pytest.fixture
def space(kube: Client, pool_crd: None) -> Iterator[lb.Space]:
    """A namespace of the test's own; its pools are deleted afterwards."""
    made = lb.space(kube)
    yield next(made)
    for _ in made:
        pass


def test_service_lb_ipam_gives_an_address_of_the_pool(
    kube: Client, space: lb.Space, manager: Child
) -> None:
    pool_cidr = f"{lb.block()}.0/29"
    pool = space.pool([pool_cidr])
    space.service("web")
    (address,) = lb.allocated(space, "web")
    assert ipaddress.ip_address(address) in ipaddress.ip_network(pool_cidr)
    service = space.get("web")
    condition = lb.condition(service)
    assert condition is not None, service["status"]
    assert condition["status"] == "True", condition
    assert not lb.has_finalizer(service)
    eventually(lambda: lb.pool_status(kube, pool).get("ipv4", {}).get("used") == "1",
               timeout=SETTLE, message="the pool's status counts the address")  # fmt: skip
    running(manager)


def test_kubelet_serving_csr_is_approved(
    control_plane: ControlPlane, kube: Client, manager: Child
) -> None:
    node = make_node(kube, "192.0.2.20")
    try:
        csr = submit(control_plane, node, request_pem(node, ips=["192.0.2.20"], dns=[node]))
        condition = eventually(lambda: decided(kube, csr), timeout=SETTLE,
                               message="the CSR is decided")  # fmt: skip
        assert (condition["type"], condition["reason"]) == ("Approved", "KubeletServingApproved")
        assert kube.get(CSRS, csr)["apiVersion"] == "certificates.k8s.io/v1"
    finally:
        kube.delete(r.NODES, node)
    running(manager)


def test_lifecycle_deletes_an_unreachable_notready_node(
    make_node: NodeFactory, kube: Client, netns: NetnsFactory, manager: Child
) -> None:
    link: HostLink = netns.host_link(netns())
    labels = dict([LIFECYCLE_LABEL])
    silent = eligible_node(make_node, str(link.unused_v4), labels=labels)
    answering = eligible_node(make_node, str(link.ns_v4.ip), labels=labels)
    eventually(lambda: gone(kube, silent), timeout=DELETED + 10,
               message="the unreachable NotReady Node is deleted")  # fmt: skip
    kept(kube, answering, seconds=3)
    running(manager)


def test_clustercidr_crd_is_refused_and_ipam_uses_its_flag_pool(
    kube: Client, make_node: NodeFactory, manager: Child
) -> None:
    (crd,) = crds.load_crds(crds.CLUSTER_CIDR_CRD)
    with pytest.raises(ApiError) as refused:
        kube.create(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
    assert "undeclared reference to 'isCIDR'" in str(refused.value), refused.value
    assert not crds.is_served(kube, "networking.x-k8s.io", "v1", "clustercidrs")
    name = make_node()["metadata"]["name"]
    assigned = eventually(lambda: pod_cidrs(kube, name), timeout=SETTLE,
                          message="IPAM assigns a pod CIDR")  # fmt: skip
    (block,) = assigned
    network = ipaddress.IPv4Network(block)
    assert network.prefixlen == 24, block
    assert network.subnet_of(ipaddress.IPv4Network(CLUSTER_CIDR)), block
    running(manager)
