"""Leader failover (I26) and the start-up RBAC check."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.ipam import harness
from tests.integration.ipam.conftest import StartIpam
from tests.integration.ipam.test_i01_i10_allocation import gets, name_of
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.leases import HeldLease
from tests.support.waiting import eventually

pytestmark = pytest.mark.usefixtures("crds")
FAST_ELECTION = (
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
)


def lease_of(kube: Client, namespace: str) -> Obj:
    (lease,) = [
        item for item in kube.list(r.LEASES, namespace=namespace)["items"]
        if item["metadata"]["name"].endswith("-lease")
    ]  # fmt: skip
    return dict(lease)


def holder(kube: Client, namespace: str) -> str:
    try:
        return str(lease_of(kube, namespace)["spec"].get("holderIdentity") or "")
    except ValueError:
        return ""


def test_i26_leader_failover(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
    test_namespace: str,
) -> None:
    make_pool("f", bits=4, ipv4="10.79.0.0/24", sel={"f": "1"})
    a = start_ipam(*FAST_ELECTION, "--leader-elect-id=replica-a", leader_election=True)
    eventually(lambda: holder(kube, test_namespace) == "replica-a", timeout=15)
    a.wait_ready()
    b = start_ipam(*FAST_ELECTION, "--leader-elect-id=replica-b", leader_election=True)
    b.wait_ready()  # a standby is ready too
    transitions = lease_of(kube, test_namespace)["spec"].get("leaseTransitions", 0)
    os.killpg(a.child.pid, signal.SIGKILL)
    a.stop()
    node = name_of(new_node("n", labels={"f": "1"}))
    eventually(lambda: holder(kube, test_namespace) == "replica-b", timeout=10)
    assert lease_of(kube, test_namespace)["spec"]["leaseTransitions"] > transitions
    gets(kube, node, ["10.79.0.0/28"])
    # The API server shows the write before b has read its answer and counted it.
    writes = eventually(lambda: b.metric("local_ccm_ipam_node_writes_total", {"code": "200"}),
                        timeout=5)  # fmt: skip
    assert writes == 1
    assert b.stop() == 0
    assert holder(kube, test_namespace) == ""


def test_a_switch_from_the_manager_waits_for_the_manager_s_lease(
    kube: Client,
    start_ipam: StartIpam,
    make_pool: Callable[..., Obj],
    new_node: Callable[..., Obj],
    test_namespace: str,
) -> None:
    """`--controller-manager-lease`: while local-ccm-controller-manager's Pod still leads (a
    switch from the manager to the standalone Deployments rolling out), the standalone
    controller leads its own Lease and assigns nothing; once the manager releases, it does."""
    make_pool("w", bits=4, ipv4="10.80.0.0/24", sel={"w": "1"})
    manager = HeldLease(kube, test_namespace, "local-ccm-controller-manager", "manager-0_00ff")
    try:
        proc = start_ipam(*FAST_ELECTION, "--controller-manager-lease=local-ccm-controller-manager",
                          leader_election=True)  # fmt: skip
        eventually(lambda: holder(kube, test_namespace) != "", timeout=15,
                   message="it leads its own Lease")  # fmt: skip
        node = name_of(new_node("w", labels={"w": "1"}))
        eventually(lambda: "waiting for the lease" in proc.log(200), timeout=10,
                   message="it says it waits")  # fmt: skip
        time.sleep(5)  # five of the manager's renewals: nothing assigned meanwhile
        assert not (kube.get(r.NODES, node).get("spec") or {}).get("podCIDRs"), proc.log()
        manager.release()
        gets(kube, node, ["10.80.0.0/28"])
    finally:
        manager.stopped.set()
    assert manager.spec()["holderIdentity"] == ""  # read, never taken


def test_missing_rbac_exits_4(
    kube: Client,
    track: Tracker,
    control_plane: ControlPlane,
    test_namespace: str,
    test_artifacts: Path,
) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "no-rights"}}
    kube.create(r.SERVICE_ACCOUNTS, sa, namespace=test_namespace)
    kubeconfig = control_plane.token_kubeconfig("no-rights", test_namespace)
    proc = harness.start(
        ["--enable-leader-election=false"], kubeconfig, test_artifacts / "no-rbac.log"
    )
    eventually(lambda: proc.child.exited() is not None, timeout=30, message="controller exits")
    assert proc.child.exited() == 4
    log = proc.log()
    assert "missing RBAC permissions" in log
    assert "patch nodes" in log
