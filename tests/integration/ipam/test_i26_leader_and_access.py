"""Leader failover (I26) and the start-up RBAC check."""

from __future__ import annotations

import os
import signal
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
