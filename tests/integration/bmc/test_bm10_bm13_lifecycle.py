"""BM10-BM13: the lifecycle controller acting on what NodeBMCs report, in
`local-ccm-controller-manager --controllers=node-lifecycle,node-bmc` on a real kube-apiserver (a
plane of the module's own, the NodeBMC CRD from the chart's file) against the real Redfish
emulator (sushy-tools). Nodes have no kubelet: each is NotReady for a minute already, and its
only address is one on a veth into a throw-away network namespace that nothing answers, so
the lifecycle controller's probes say `unreachable` and nothing leaves the machine.

BM10 the System removed -> the NotReady Node deleted; not with the breaker open, not in
dry-run, not when protected. BM11 the out-of-service taint waits while the BMC reads On, goes
on once it reads Off, and the deletion follows as before (after the VolumeAttachment goes).
BM12 fencing: an unreachable Node still On -> exactly one ForceOff at the emulator, Off
confirmed, the out-of-service taint, the deletion; none with the breaker open or for the Node
the controller runs on. BM13 leader failover in the middle of a fence: the leader killed right
after its ForceOff, the new leader sends none and finishes the fence; and the state a leader
leaves when it stops between the record and the ForceOff: no ForceOff at all, the request
reported failed, the Node neither tainted nor deleted.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from local_ccm.bmc.api import NODEBMCS
from local_ccm.kube.client import Client, Obj
from local_ccm.lifecycle.api import VOLUME_ATTACHMENTS
from local_ccm.names import POWER_OFF_ANNOTATION
from local_ccm.runtime.events import rfc3339
from tests.support import bmc, fencing
from tests.support import resources as r
from tests.support.controlplane import ControlPlane
from tests.support.netns import HostLink, NetnsFactory
from tests.support.processes import tail
from tests.support.sushy import SushyEmulator
from tests.support.waiting import eventually

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]
SETTLE = 30.0  # a ForceOff takes effect 1 to 11 s later on the emulator, then a poll reads it
QUIET = 4.0  # four evaluations and polls: what did not happen by then does not
CREDENTIALS = "bmc-credentials"
OOS = ("--out-of-service-taint",)
FENCE = ("--out-of-service-taint", "--bmc-fencing")


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    with bmc.plane_with_crd(request.config, "bmclc") as started:
        yield started


@pytest.fixture
def link(netns: NetnsFactory) -> HostLink:
    """A host-side /28: <base+5> and up are silent targets, nothing leaves the machine."""
    return netns.host_link(netns())


@dataclass
class Scene:
    """One test's label, credentials namespace, machines and managers."""

    kube: Client
    plane: ControlPlane
    sushy: SushyEmulator
    link: HostLink
    artifacts: Path
    namespace: str
    run: str = field(default_factory=lambda: secrets.token_hex(4))
    managers: list[bmc.Controller] = field(default_factory=list)
    made: list[str] = field(default_factory=list)

    def machine(self, *, power: str = "On", **labels: str) -> Obj:
        node = fencing.machine(self.kube, self.sushy, run=self.run, credentials=CREDENTIALS,
                               address=str(self.link.unused_v4), power=power,
                               **labels)  # fmt: skip
        self.made.append(node["metadata"]["name"])
        return node

    def manager(self, *extra: str, name: str = "manager", lease: tuple[str, str] | None = None,
                controllers: str = "node-lifecycle,node-bmc") -> bmc.Controller:  # fmt: skip
        started = fencing.start(self.plane.admin_kubeconfig, self.artifacts / f"{name}.log",
                                run=self.run, credentials=self.namespace, extra=extra,
                                lease=lease, controllers=controllers)  # fmt: skip
        self.managers.append(started)
        eventually(lambda: _serving(started), timeout=20, message=f"{name} serving")
        return started

    def remove(self, *machines: Obj) -> None:
        """Each machine's System read On by node-bmc alone (a 404 is Absent only where a System
        was read), then removed from the emulator."""
        reader = self.manager(name=f"reader-{len(self.managers)}", controllers="node-bmc")
        for node in machines:
            bmc.power_is(self.kube, node["metadata"]["name"], "On")
        self.stop(reader)
        for node in machines:
            self.sushy.remove_system(node["metadata"]["name"])

    def stop(self, manager: bmc.Controller) -> None:
        code = manager.child.exited()
        assert code is None, f"the manager exited {code}:\n{tail(manager.child.log_path)}"
        manager.child.stop(grace=10)

    def reasons(self, name: str) -> list[str]:
        """The Node's Events, oldest first (the store's revision orders their creation)."""
        found = bmc.events(self.kube, name, "Node")
        return [
            e["reason"] for e in sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))
        ]


def _serving(manager: bmc.Controller) -> bool:
    try:
        manager.metric("local_ccm_build_info")
    except OSError:
        return False
    return True


@pytest.fixture
def scene(plane: ControlPlane, sushy: SushyEmulator, link: HostLink,
          test_artifacts: Path) -> Iterator[Scene]:  # fmt: skip
    kube = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="bm-test")
    namespace = bmc.namespace(kube)
    bmc.secret(kube, namespace, CREDENTIALS, sushy.username, sushy.password)
    found = Scene(kube, plane, sushy, link, test_artifacts, namespace)
    yield found
    for manager in found.managers:
        manager.child.stop(grace=10)
    for name in found.made:
        bmc.delete(kube, name)
    for va in kube.list(VOLUME_ATTACHMENTS)["items"]:
        kube.delete(VOLUME_ATTACHMENTS, va["metadata"]["name"])
    kube.delete(r.NAMESPACES, namespace)
    kube.close()


def gone(scene: Scene, node: Obj, timeout: float = SETTLE) -> None:
    eventually(lambda: not fencing.exists(scene.kube, node), timeout=timeout,
               message=f"{node['metadata']['name']} deleted")  # fmt: skip


def event(scene: Scene, name: str, reason: str, timeout: float = SETTLE) -> None:
    eventually(lambda: reason in scene.reasons(name), timeout=timeout, message=reason)


# ------------------------------------------------------------------ BM10
def test_bm10_a_system_removed_deletes_its_notready_node_under_the_guard_rails(
    scene: Scene,
) -> None:
    """BM10: the System removed (404) -> powerState Absent -> the Node deleted with the BMC's
    verdict (`nodes_deleted_total{source="bmc"}`); with the breaker open, in dry-run, or
    protected, the same Node stays."""
    kube = scene.kube
    # The breaker: three of three Nodes NotReady, at most one allowed.
    held = [scene.machine() for _ in range(3)]
    scene.remove(*held)
    manager = scene.manager("--max-unhealthy=1", name="breaker")
    for node in held:
        bmc.power_is(kube, node["metadata"]["name"], "Absent", "SystemNotFound")
    event(scene, held[0]["metadata"]["name"], "DeletionBlockedByCircuitBreaker")
    time.sleep(QUIET)
    assert all(fencing.exists(kube, n) for n in held)
    scene.stop(manager)
    for node in held:
        bmc.delete(kube, node["metadata"]["name"])

    dry = scene.machine()
    protected = scene.machine(keep="true")
    scene.remove(dry, protected)
    manager = scene.manager("--dry-run", "--protected-labels=keep", "--max-unhealthy=100%",
                            name="dry-run")  # fmt: skip
    event(scene, dry["metadata"]["name"], "NodeDeletionDryRun")
    bmc.power_is(kube, protected["metadata"]["name"], "Absent", "SystemNotFound")
    time.sleep(QUIET)
    assert fencing.exists(kube, dry)
    assert fencing.exists(kube, protected)
    scene.stop(manager)

    manager = scene.manager("--protected-labels=keep", "--max-unhealthy=100%", name="delete")
    gone(scene, dry)
    event(scene, dry["metadata"]["name"], "DeletingNode")
    [deleting] = [e for e in bmc.events(kube, dry["metadata"]["name"], "Node")
                  if e["reason"] == "DeletingNode"]  # fmt: skip
    assert "powerState Absent" in deleting["message"]
    assert manager.metric("local_ccm_lifecycle_nodes_deleted_total", {"source": "bmc"}) == 1
    time.sleep(QUIET)
    assert fencing.exists(kube, protected)  # protected, whatever the BMC says


# ------------------------------------------------------------------ BM11
def test_bm11_the_out_of_service_taint_waits_for_the_bmc_to_confirm_off(scene: Scene) -> None:
    """BM11: unreachable, the BMC reading On: no out-of-service taint, one WaitingForBMCOff;
    the System Off: the taint, the wait for the VolumeAttachment, then the deletion."""
    kube = scene.kube
    node = scene.machine(power="On")
    name = node["metadata"]["name"]
    attachment = fencing.volume_attachment(kube, name)
    scene.manager(*OOS, "--max-unhealthy=100%")
    bmc.power_is(kube, name, "On")
    event(scene, name, "WaitingForBMCOff")
    time.sleep(QUIET)
    assert not fencing.out_of_service(kube, name)
    assert scene.reasons(name).count("WaitingForBMCOff") == 1
    assert scene.sushy.power_state(name) == "On"  # no fencing asked: nothing sent

    scene.sushy.set_power(name, "Off")
    eventually(lambda: fencing.out_of_service(kube, name), timeout=SETTLE, message="tainted")
    time.sleep(2)
    assert fencing.exists(kube, node)  # waiting for the VolumeAttachment
    kube.delete(VOLUME_ATTACHMENTS, attachment)
    gone(scene, node)
    event(scene, name, "DeletingNode")  # the Events go out beside the work, a moment later
    reasons = scene.reasons(name)
    assert reasons.index("OutOfServiceTaintAdded") < reasons.index("DeletingNode")


# ------------------------------------------------------------------ BM12
def test_bm12_an_unreachable_node_still_on_is_fenced_with_exactly_one_force_off(
    scene: Scene,
) -> None:
    """BM12: unreachable and On -> the request, exactly one ForceOff at the emulator, Off
    confirmed, the out-of-service taint, the deletion; no second ForceOff after."""
    kube, sushy = scene.kube, scene.sushy
    node = scene.machine(power="On")
    name = node["metadata"]["name"]
    manager = scene.manager(*FENCE, "--max-unhealthy=100%")
    eventually(lambda: fencing.force_offs(sushy, name) == 1, timeout=SETTLE, message="ForceOff")
    record = eventually(lambda: fencing.power_off(kube, name).get("confirmedAt") and
                        fencing.power_off(kube, name), timeout=SETTLE,
                        message="Off confirmed")  # fmt: skip
    assert record["request"].startswith(node["metadata"]["uid"] + "@")
    assert record["sentAt"] <= record["confirmedAt"]
    gone(scene, node)
    event(scene, name, "DeletingNode")
    reasons = scene.reasons(name)
    for step in ("FencingNode", "PowerOffSent", "PowerOffConfirmed", "OutOfServiceTaintAdded",
                 "DeletingNode"):  # fmt: skip
        assert step in reasons, (step, reasons)
    assert reasons.index("FencingNode") < reasons.index("OutOfServiceTaintAdded")
    time.sleep(QUIET)
    assert fencing.force_offs(sushy, name) == 1
    assert manager.metric("local_ccm_bmc_power_offs_total", {"outcome": "sent"}) == 1
    assert manager.metric("local_ccm_lifecycle_fence_requests_total",
                          {"result": "requested"}) == 1  # fmt: skip


def test_bm12_no_fence_with_the_breaker_open_nor_of_the_controller_s_own_node(
    scene: Scene,
) -> None:
    """BM12: three Nodes unreachable and On with at most one allowed NotReady: no request, no
    ForceOff; the Node named by --node-name (the one the controller runs on): none either."""
    kube, sushy = scene.kube, scene.sushy
    held = [scene.machine(power="On") for _ in range(3)]
    manager = scene.manager(*FENCE, "--max-unhealthy=1", name="breaker")
    event(scene, held[0]["metadata"]["name"], "DeletionBlockedByCircuitBreaker")
    time.sleep(QUIET)
    for node in held:
        name = node["metadata"]["name"]
        assert (fencing.request(kube, name), fencing.force_offs(sushy, name)) == (None, 0)
        assert fencing.exists(kube, node)
    scene.stop(manager)
    for node in held:
        bmc.delete(kube, node["metadata"]["name"])

    own = scene.machine(power="On")
    name = own["metadata"]["name"]
    scene.manager(*FENCE, "--max-unhealthy=100%", f"--node-name={name}", name="own")
    bmc.power_is(kube, name, "On")
    time.sleep(QUIET)
    assert (fencing.request(kube, name), fencing.force_offs(sushy, name)) == (None, 0)
    assert fencing.exists(kube, own)
    assert "FencingNode" not in scene.reasons(name)


# ------------------------------------------------------------------ BM13
def test_bm13_the_leader_killed_after_its_force_off_the_new_one_sends_none(
    scene: Scene,
) -> None:
    """BM13: two managers on one Lease; the leader is killed (SIGKILL) as soon as the emulator
    answered its ForceOff, before it confirmed Off. The new leader finds the request recorded:
    it sends no ForceOff, confirms Off on its own poll, taints and deletes."""
    kube, sushy = scene.kube, scene.sushy
    lease = (scene.namespace, f"bm13-{scene.run}")
    a = scene.manager(*FENCE, "--max-unhealthy=100%", name="replica-a", lease=lease)
    eventually(lambda: a.metric("leader_election_master_status") == 1, timeout=20,
               message="A leads")  # fmt: skip
    b = scene.manager(*FENCE, "--max-unhealthy=100%", name="replica-b", lease=lease)
    node = scene.machine(power="On")
    name = node["metadata"]["name"]
    eventually(lambda: fencing.force_offs(sushy, name) == 1, timeout=SETTLE, interval=0.02,
               message="A's ForceOff")  # fmt: skip
    os.killpg(a.child.pid, signal.SIGKILL)
    a.child.proc.wait()
    record = fencing.power_off(kube, name)
    assert record.get("sentAt")
    assert not record.get("confirmedAt"), "A confirmed before it was killed: no failover seen"
    eventually(lambda: b.metric("leader_election_master_status") == 1, timeout=20,
               message="B leads")  # fmt: skip
    eventually(lambda: fencing.power_off(kube, name).get("confirmedAt"), timeout=SETTLE,
               message="B confirms Off")  # fmt: skip
    gone(scene, node)
    time.sleep(QUIET)
    assert fencing.force_offs(sushy, name) == 1
    assert b.metric("local_ccm_bmc_power_offs_total", {"outcome": "sent"}) == 0
    assert b.metric("local_ccm_bmc_power_offs_total", {"outcome": "confirmed"}) == 1
    assert fencing.power_off(kube, name)["request"] == record["request"]  # asked once


def test_bm13_a_request_recorded_by_a_leader_that_stopped_before_its_force_off_is_never_sent(
    scene: Scene,
) -> None:
    """BM13: the API as a leader leaves it when it stopped between the record and the
    ForceOff: the request annotated, `status.powerOff` = {request, sentAt}, the System On. The
    next leader sends no ForceOff, reports the request failed after --bmc-power-off-timeout,
    asks for no second power-off in this episode, and neither taints nor deletes the Node."""
    kube, sushy = scene.kube, scene.sushy
    node = scene.machine(power="On")
    name, uid = node["metadata"]["name"], node["metadata"]["uid"]
    value = f"{uid}@{rfc3339(datetime.now(UTC))}"
    kube.patch(NODEBMCS, name, {"metadata": {"annotations": {POWER_OFF_ANNOTATION: value}}},
               patch_type="merge")  # fmt: skip
    kube.patch(NODEBMCS, name, {"status": {"powerOff": {"request": value,
                                                       "sentAt": rfc3339(datetime.now(UTC))}}},
               patch_type="merge", subresource="status")  # fmt: skip
    scene.manager(*FENCE, "--max-unhealthy=100%", "--bmc-power-off-timeout=5s")
    record = eventually(lambda: fencing.power_off(kube, name).get("failedAt") and
                        fencing.power_off(kube, name), timeout=SETTLE,
                        message="reported failed")  # fmt: skip
    assert "not sent again" in record["message"]
    event(scene, name, "FencingFailed")
    assert "PowerOffFailed" in bmc.reasons(kube, name, "NodeBMC")
    time.sleep(QUIET)
    assert fencing.force_offs(sushy, name) == 0
    assert sushy.power_state(name) == "On"
    assert fencing.request(kube, name) == value
    assert not fencing.out_of_service(kube, name)
    assert fencing.exists(kube, node)
