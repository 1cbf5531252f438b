"""BM01–BM09: node-bmc in `local-ccm-controller-manager` on a real kube-apiserver (a plane of
the module's own, the NodeBMC CRD installed from the chart's file) against the real Redfish
emulator (sushy-tools, tests/support/sushy.py) and, for answers the emulator cannot give, the
scripted BMC (tests/support/fakebmc.py). One controller process per test, polling every
second; Nodes have no kubelet, so the test sets their Ready condition.

BM01 power off -> the shutdown taint on a Node that is not Ready, on -> removed (with the
printer columns and the metrics); BM02 a Ready Node whose System is Off gets no taint and one
Warning, and loses a taint it carries; BM03 the BMC down -> Unreachable, an Event, the Node
untouched, then it recovers; BM04 a wrong password -> AuthFailed, the Secret rotated -> it
recovers without a restart (and no password in the log); BM05 a certificate from another CA
-> TLSError, `disableCertificateVerification: true` -> it works; BM06 garbage JSON and a BMC
that never answers -> InvalidResponse and Timeout, while the other BMCs are still polled;
BM07 an invalid address -> InvalidSpec and nothing contacted (admission refuses the rest);
BM08 power flapping faster than the poll -> the taint follows the last state read, at most one
write per poll; BM09 the System removed -> Absent, Events, the Node kept; BM15 a BMC answering
503 with Retry-After is not asked again sooner; BM16 a System whose UUID is not the Node's
systemUUID (another machine's) is SystemMismatch, no taint; BM17 a password with echo's
newline is AuthFailed with a message that says so.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from local_ccm.bmc.api import NODEBMCS
from local_ccm.kube.client import Client
from local_ccm.kube.errors import Invalid, NotFound
from local_ccm.names import SHUTDOWN_TAINT
from tests.support import bmc, nodes, pki
from tests.support import resources as r
from tests.support.controlplane import ControlPlane
from tests.support.fakebmc import PASSWORD, SYSTEM_PATH, USERNAME, FakeBmc, Reply
from tests.support.processes import tail
from tests.support.sushy import SushyEmulator, system_uuid
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)
SETTLE = bmc.SETTLE
CREDENTIALS = "bmc-credentials"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    with bmc.plane_with_crd(request.config, "bmc") as started:
        yield started


@pytest.fixture
def admin(plane: ControlPlane) -> Iterator[Client]:
    client = Client.from_kubeconfig(plane.admin_kubeconfig, field_manager="bm-test")
    yield client
    client.close()


@dataclass
class Scene:
    """One test's controller, its credentials namespace and the machines it made."""

    kube: Client
    plane: ControlPlane
    sushy: SushyEmulator
    namespace: str
    controller: bmc.Controller
    log: Path
    made: list[str]

    def machine(self, *, ready: str, power: str = "On", **spec: Any) -> str:
        """A System in the emulator, a Node and its NodeBMC, all named alike."""
        name = f"n-{secrets.token_hex(3)}"
        self.sushy.add_system(name, power)
        self.node(name, ready)
        spec.setdefault("caBundle", self.sushy.ca_pem)
        spec.setdefault("credentials", CREDENTIALS)
        bmc.nodebmc(self.kube, name, self.sushy.address(name), spec.pop("credentials"), **spec)
        return name

    def node(self, name: str, ready: str) -> None:
        self.made.append(name)
        bmc.node(self.kube, name, ready)

    def alive(self) -> None:
        code = self.controller.child.exited()
        assert code is None, f"node-bmc exited {code}:\n{tail(self.log)}"


@pytest.fixture
def scene(
    plane: ControlPlane, admin: Client, sushy: SushyEmulator, test_artifacts: Path
) -> Iterator[Scene]:
    namespace = bmc.namespace(admin)
    bmc.secret(admin, namespace, CREDENTIALS, sushy.username, sushy.password)
    log = test_artifacts / "node-bmc.log"
    controller = bmc.start(plane.admin_kubeconfig, log, namespace)
    made: list[str] = []
    found = Scene(admin, plane, sushy, namespace, controller, log, made)
    yield found
    found.alive()  # no crash, whatever the test did to the BMC
    controller.child.stop(grace=5)
    for name in made:
        bmc.delete(admin, name)
    admin.delete(r.NAMESPACES, namespace)


def node_version(kube: Client, name: str) -> str:
    return str(kube.get(r.NODES, name)["metadata"]["resourceVersion"])


def has_event(kube: Client, name: str, kind: str, reason: str) -> bool:
    return reason in bmc.reasons(kube, name, kind)


def test_bm01_power_off_taints_a_node_that_is_not_ready_and_power_on_removes_it(
    scene: Scene,
) -> None:
    """BM01: Off (read) and the Node NotReady -> node.cloudprovider.kubernetes.io/shutdown:
    NoSchedule; On -> removed; the status, the Events, `kubectl get nbmc` and the metrics."""
    kube = scene.kube
    name = scene.machine(ready="False", power="On")
    first = bmc.power_is(kube, name, "On")
    assert not bmc.tainted(kube, name)
    assert first["observedGeneration"] == 1
    scene.sushy.set_power(name, "Off")
    eventually(lambda: bmc.tainted(kube, name), timeout=SETTLE, message="tainted")
    off = bmc.power_is(kube, name, "Off")
    assert off["lastPowerChange"] >= first["lastPowerChange"]
    [taint] = [t for t in kube.get(r.NODES, name)["spec"]["taints"] if t["key"] == SHUTDOWN_TAINT]
    assert taint == {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}
    eventually(lambda: has_event(kube, name, "Node", "ShutdownTaintAdded"), timeout=SETTLE)
    eventually(lambda: has_event(kube, name, "NodeBMC", "PowerStateChanged"), timeout=SETTLE)

    scene.sushy.set_power(name, "On")
    eventually(lambda: not bmc.tainted(kube, name), timeout=SETTLE, message="untainted")
    bmc.power_is(kube, name, "On")
    eventually(lambda: has_event(kube, name, "Node", "ShutdownTaintRemoved"), timeout=SETTLE)

    shown = bmc.table(scene.plane, f"/apis/{NODEBMCS.group}/{NODEBMCS.version}/nodebmcs/{name}")
    columns = [c["name"] for c in shown["columnDefinitions"]]
    assert columns == ["Name", "Power", "Reachable", "Reason", "Last Contact", "Age"]
    assert shown["rows"][0]["cells"][:4] == [name, "On", "True", "Contacted"]

    c = scene.controller
    assert c.metric("local_ccm_bmc_power_states", {"state": "On"}) == 1
    assert c.metric("local_ccm_bmc_taint_writes_total", {"action": "add",
                                                          "result": "success"}) == 1  # fmt: skip
    assert c.metric("local_ccm_bmc_taint_writes_total", {"action": "remove",
                                                          "result": "success"}) == 1  # fmt: skip
    gets = c.metric("local_ccm_bmc_redfish_request_duration_seconds_count", {"method": "GET"})
    assert gets >= 3


def test_bm02_a_ready_node_whose_system_is_off_gets_no_taint_and_one_warning(
    scene: Scene,
) -> None:
    """BM02: Ready wins: Off while the Node is Ready is a Warning Event, never a taint, and a
    taint a Ready Node carries goes; once the Node is NotReady the Off counts."""
    kube = scene.kube
    name = scene.machine(ready="True", power="Off")
    bmc.power_is(kube, name, "Off")
    eventually(lambda: has_event(kube, name, "Node", "BMCReportsOffNodeReady"), timeout=SETTLE)
    time.sleep(3)  # three more polls, all Off
    assert not bmc.tainted(kube, name)
    assert bmc.reasons(kube, name, "Node").count("BMCReportsOffNodeReady") == 1
    [warning] = [e for e in bmc.events(kube, name, "Node")
                 if e["reason"] == "BMCReportsOffNodeReady"]  # fmt: skip
    assert warning["type"] == "Warning"

    taint = {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}
    kube.patch(r.NODES, name, {"spec": {"taints": [taint]}}, patch_type="merge")
    eventually(lambda: not bmc.tainted(kube, name), timeout=SETTLE, message="Ready wins")

    bmc.set_ready(kube, name, "False")
    eventually(lambda: bmc.tainted(kube, name), timeout=SETTLE, message="tainted once NotReady")


def test_bm03_an_unreachable_bmc_changes_nothing_on_the_node_then_recovers(
    scene: Scene,
) -> None:
    """BM03: the BMC down (emulator stopped): Reachable False Unreachable, powerState Unknown,
    one Warning Event, the Node not written; up again: Contacted, Off again, the taint kept."""
    kube = scene.kube
    name = scene.machine(ready="False", power="Off")
    eventually(lambda: bmc.tainted(kube, name), timeout=SETTLE, message="tainted")
    version = node_version(kube, name)
    scene.sushy.stop()
    try:
        down = bmc.power_is(kube, name, "Unknown", "Unreachable")
        assert down["lastContact"]  # the last answer's time is kept
        assert "spec.address" in bmc.reachable(kube, name)["message"]  # how to fix it
        eventually(lambda: has_event(kube, name, "NodeBMC", "Unreachable"), timeout=SETTLE)
        time.sleep(2)
        assert bmc.tainted(kube, name)
        assert node_version(kube, name) == version  # unknown is never off (nor on)
    finally:
        scene.sushy.start()
    bmc.power_is(kube, name, "Off")
    eventually(lambda: has_event(kube, name, "NodeBMC", "Contacted"), timeout=SETTLE)
    assert bmc.reasons(kube, name, "NodeBMC").count("Unreachable") == 1  # per reason change
    assert node_version(kube, name) == version


def test_bm04_a_wrong_password_is_auth_failed_until_the_secret_is_rotated(
    scene: Scene,
) -> None:
    """BM04: AuthFailed while the Secret holds a wrong password; the Secret rotated, the next
    poll reads it again and succeeds, without a restart. No password reaches the log."""
    kube = scene.kube
    wrong = f"wrong-{secrets.token_hex(4)}"
    bmc.secret(kube, scene.namespace, "rotating", scene.sushy.username, wrong)
    name = scene.machine(ready="False", power="On", credentials="rotating")
    bmc.power_is(kube, name, "Unknown", "AuthFailed")
    assert "401" in bmc.reachable(kube, name)["message"]
    eventually(lambda: has_event(kube, name, "NodeBMC", "AuthFailed"), timeout=SETTLE)
    pid = scene.controller.child.pid
    bmc.secret(kube, scene.namespace, "rotating", scene.sushy.username, scene.sushy.password)
    bmc.power_is(kube, name, "On")
    assert scene.controller.child.pid == pid
    scene.alive()
    text = scene.log.read_text()
    assert wrong not in text
    assert scene.sushy.password not in text


def test_bm17_a_password_with_the_newline_of_echo_is_refused_and_the_status_says_why(
    scene: Scene,
) -> None:
    """BM17: a Secret made with `echo <password> | base64`: the BMC refuses the password with
    its newline (sent as it is, as Metal3 does), and the AuthFailed message points at the
    whitespace without showing the password; written without it, the System is read."""
    kube, sushy = scene.kube, scene.sushy
    bmc.secret(kube, scene.namespace, "echoed", sushy.username, sushy.password + "\n")
    name = scene.machine(ready="False", power="On", credentials="echoed")
    bmc.power_is(kube, name, "Unknown", "AuthFailed")
    message = bmc.reachable(kube, name)["message"]
    assert "begins or ends with whitespace" in message
    assert sushy.password not in message
    bmc.secret(kube, scene.namespace, "echoed", sushy.username, sushy.password)
    bmc.power_is(kube, name, "On")


def test_bm05_a_certificate_of_another_ca_is_a_tls_error_unless_verification_is_off(
    scene: Scene,
) -> None:
    """BM05: caBundle names another CA -> TLSError (nothing sent); the spec changed to
    disableCertificateVerification: true -> the System is read, the new generation observed."""
    kube = scene.kube
    other = pki.new_ca("not-the-bmc-ca", datetime.now(UTC)).cert_pem.decode()
    name = scene.machine(ready="False", power="On", caBundle=other)
    bmc.power_is(kube, name, "Unknown", "TLSError")
    assert "certificate" in bmc.reachable(kube, name)["message"]
    kube.patch(NODEBMCS, name, {"spec": {"disableCertificateVerification": True}},
               patch_type="merge")  # fmt: skip
    found = bmc.power_is(kube, name, "On")
    assert found["observedGeneration"] == 2
    assert bmc.reachable(kube, name)["observedGeneration"] == 2


def test_bm06_garbage_and_a_silent_bmc_are_reported_and_the_others_still_polled(
    scene: Scene,
) -> None:
    """BM06: a BMC answering garbage JSON -> InvalidResponse; one that never answers ->
    Timeout (the 10 s read timeout); meanwhile another NodeBMC's power change is acted on."""
    kube = scene.kube
    bmc.secret(kube, scene.namespace, "fake", USERNAME, PASSWORD)
    with FakeBmc() as garbage, FakeBmc() as silent:
        garbage.script.reply = Reply(200, b"{'PowerState': On")
        silent.script.hang = True
        for target, name in ((garbage, "garbage"), (silent, "silent")):
            node = f"{name}-{secrets.token_hex(3)}"
            scene.node(node, "False")
            bmc.nodebmc(kube, node, target.address(), "fake")
        bad, hung = scene.made
        bmc.power_is(kube, bad, "Unknown", "InvalidResponse")
        assert "not JSON" in bmc.reachable(kube, bad)["message"]
        healthy = scene.machine(ready="False", power="On")
        bmc.power_is(kube, healthy, "On")
        scene.sushy.set_power(healthy, "Off")
        eventually(lambda: bmc.tainted(kube, healthy), timeout=SETTLE, message="not held up")
        bmc.power_is(kube, hung, "Unknown", "Timeout")
        assert "no answer within 10s" in bmc.reachable(kube, hung)["message"]
        scene.alive()
        assert not bmc.tainted(kube, bad)
        assert not bmc.tainted(kube, hung)


def test_bm15_a_busy_bmc_is_asked_again_no_sooner_than_its_retry_after(scene: Scene) -> None:
    """BM15: a BMC answering 503 with Retry-After: 30 -> ServerError, and no second GET of the
    System within 12 s (the backoff alone would ask after 5 s and 15 s)."""
    kube = scene.kube
    bmc.secret(kube, scene.namespace, "fake", USERNAME, PASSWORD)
    with FakeBmc() as busy:
        busy.script.reply = Reply(503, b'{"error": {"message": "busy"}}', (("Retry-After", "30"),))
        name = f"busy-{secrets.token_hex(3)}"
        scene.node(name, "False")
        bmc.nodebmc(kube, name, busy.address(), "fake")
        bmc.power_is(kube, name, "Unknown", "ServerError")
        time.sleep(12)
        assert len(busy.requests("GET", SYSTEM_PATH)) == 1
        scene.alive()


def test_bm16_a_system_of_another_machine_neither_taints_nor_reads_off(scene: Scene) -> None:
    """BM16: node A's NodeBMC names machine B's System (a swapped address), B is Off and A is
    not Ready: A's kubelet reported its own machine's SMBIOS UUID, which is not B's, so the
    NodeBMC reads Unknown with reason SystemMismatch (not the Off the lifecycle controller would
    fence or taint out-of-service on) and A gets no taint; the address fixed, it does."""
    kube, sushy = scene.kube, scene.sushy
    name, other = f"n-{secrets.token_hex(3)}", f"n-{secrets.token_hex(3)}"
    sushy.add_system(name, "Off")
    own_uuid = sushy.systems[name]  # the emulator's System UUID is its id
    sushy.add_system(other, "Off")
    scene.node(name, "False")
    patch = nodes.status_patch(node_info={"systemUUID": own_uuid})
    kube.patch(r.NODES, name, patch, patch_type="merge", subresource="status")
    bmc.nodebmc(kube, name, sushy.address(other), CREDENTIALS, caBundle=sushy.ca_pem)
    bmc.power_is(kube, name, "Unknown", "SystemMismatch")
    assert f"is not the Node's systemUUID {own_uuid}" in bmc.reachable(kube, name)["message"]
    eventually(lambda: has_event(kube, name, "NodeBMC", "SystemMismatch"), timeout=SETTLE)
    time.sleep(2)
    assert not bmc.tainted(kube, name)
    kube.patch(NODEBMCS, name, {"spec": {"address": sushy.address(name)}}, patch_type="merge")
    bmc.power_is(kube, name, "Off")
    eventually(lambda: bmc.tainted(kube, name), timeout=SETTLE, message="tainted once it matches")


def test_bm07_an_invalid_address_is_invalid_spec_and_nothing_is_contacted(
    scene: Scene,
) -> None:
    """BM07: an address admission lets through but the controller refuses (ipmi://) ->
    InvalidSpec naming the problem, not a byte sent to the host it names; admission itself
    refuses a NodeBMC without a System path or without credentials."""
    kube = scene.kube
    with FakeBmc() as target:
        name = f"n-{secrets.token_hex(3)}"
        scene.node(name, "False")
        bmc.nodebmc(kube, name, f"ipmi://127.0.0.1:{target.port}/redfish/v1/Systems/1",
                    CREDENTIALS)  # fmt: skip
        bmc.power_is(kube, name, "Unknown", "InvalidSpec")
        assert "not a Redfish scheme" in bmc.reachable(kube, name)["message"]
        eventually(lambda: has_event(kube, name, "NodeBMC", "InvalidSpec"), timeout=SETTLE)
        time.sleep(2)
        assert (target.connections, target.requests()) == (0, [])
    with pytest.raises(Invalid, match=r"spec\.address"):
        bmc.nodebmc(kube, f"x-{secrets.token_hex(3)}", "redfish://10.0.0.5/", CREDENTIALS)
    body = {"apiVersion": NODEBMCS.api_version, "kind": NODEBMCS.kind,
            "metadata": {"name": f"x-{secrets.token_hex(3)}"},
            "spec": {"address": "redfish://10.0.0.5/redfish/v1/Systems/1"}}  # fmt: skip
    with pytest.raises(Invalid, match="credentialsName"):
        kube.create(NODEBMCS, body)


def test_bm08_flapping_power_the_taint_follows_the_last_read_without_a_write_storm(
    scene: Scene,
) -> None:
    """BM08: Off/On twenty times in two seconds, ending Off: the taint ends on, and no more
    taint writes than polls (each poll decides once, on what it read)."""
    kube = scene.kube
    c = scene.controller
    name = scene.machine(ready="False", power="On")
    bmc.power_is(kube, name, "On")

    def writes() -> float:
        results = ("success", "conflict", "error")
        series = [{"action": a, "result": res} for a in ("add", "remove") for res in results]
        return sum(c.metric("local_ccm_bmc_taint_writes_total", labels) for labels in series)

    def polls() -> float:
        return c.metric("local_ccm_bmc_redfish_request_duration_seconds_count", {"method": "GET"})

    writes_before, polls_before = writes(), polls()
    for state in ["Off", "On"] * 10 + ["Off"]:
        scene.sushy.set_power(name, state)
        time.sleep(0.1)
    bmc.power_is(kube, name, "Off")
    eventually(lambda: bmc.tainted(kube, name), timeout=SETTLE, message="tainted")
    time.sleep(2)  # more polls, all Off: no more writes
    written, polled = writes() - writes_before, polls() - polls_before
    assert bmc.tainted(kube, name)
    assert written % 2 == 1  # ends with an addition
    assert written <= polled, (written, polled)
    assert written < 21  # far fewer than the changes
    assert c.metric("local_ccm_bmc_taint_writes_total", {"action": "add",
                                                          "result": "conflict"}) == 0  # fmt: skip


def test_bm09_a_removed_system_is_absent_with_events_and_the_node_is_kept(
    scene: Scene,
) -> None:
    """BM09: the System gone from the BMC (404) -> powerState Absent, SystemNotFound on the
    NodeBMC and BMCSystemNotFound on the Node; the Node is neither deleted nor tainted."""
    kube = scene.kube
    name = scene.machine(ready="False", power="On")
    bmc.power_is(kube, name, "On")
    scene.sushy.remove_system(name)
    gone = bmc.power_is(kube, name, "Absent", "SystemNotFound")
    assert gone["lastContact"]
    eventually(lambda: has_event(kube, name, "NodeBMC", "SystemNotFound"), timeout=SETTLE)
    eventually(lambda: has_event(kube, name, "Node", "BMCSystemNotFound"), timeout=SETTLE)
    time.sleep(2)
    try:
        kube.get(r.NODES, name)
    except NotFound:
        pytest.fail("the Node was deleted")
    assert not bmc.tainted(kube, name)
    assert scene.controller.metric("local_ccm_bmc_power_states", {"state": "Absent"}) == 1


def test_bm09_a_system_never_read_is_unknown_not_absent_until_it_is_read_and_removed(
    scene: Scene,
) -> None:
    """BM09: a NodeBMC whose address names no System (a mistyped id) answers 404 from its
    first poll: Unknown with SystemNotFound and a message saying no System was ever read there,
    never Absent (the lifecycle controller deletes a NotReady Node on Absent). Once the System
    exists and was read, its removal is Absent."""
    kube = scene.kube
    name = f"n-{secrets.token_hex(3)}"
    scene.node(name, "False")
    # The address the System will have (its id is stable), before the emulator holds it.
    address = f"redfish://127.0.0.1:{scene.sushy.port}/redfish/v1/Systems/{system_uuid(name)}"
    bmc.nodebmc(kube, name, address, CREDENTIALS, caBundle=scene.sushy.ca_pem)
    never = bmc.power_is(kube, name, "Unknown", "SystemNotFound")
    assert "no System was ever read" in bmc.reachable(kube, name)["message"]
    assert never["lastContact"]
    assert "readGeneration" not in never
    eventually(lambda: has_event(kube, name, "NodeBMC", "SystemNotFound"), timeout=SETTLE)
    time.sleep(2)
    assert bmc.status(kube, name)["powerState"] == "Unknown"  # still, poll after poll
    assert not bmc.tainted(kube, name)
    scene.sushy.add_system(name, "On")
    read = bmc.power_is(kube, name, "On")
    assert read["readGeneration"] == read["observedGeneration"]
    scene.sushy.remove_system(name)
    bmc.power_is(kube, name, "Absent", "SystemNotFound")
