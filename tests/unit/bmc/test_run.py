"""The node-bmc controller's syncs against a fake API and a fake BMC reader: when it polls,
what it writes, which Events it sends, and what goes to the worker."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec
from local_ccm.bmc.core.system import System, parse_system
from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.bmc.options import Settings
from local_ccm.bmc.run import Controller
from local_ccm.kube.errors import Conflict, NotFound
from local_ccm.kube.informer import Change
from local_ccm.names import SHUTDOWN_TAINT
from local_ccm.runtime.controller import DONE, RequeueAfter, Retry
from tests.fakes.clock import FakeClock
from tests.fakes.informer import Unused

Obj = dict[str, Any]
ADDRESS = "redfish://10.0.0.5/redfish/v1/Systems/1"
SETTINGS = Settings(poll_interval=30.0, credentials_namespace="bmc-creds")


class FakeApi:
    """Nodes whose JSON Patches are applied for the taint (a failed resourceVersion test is a
    Conflict, as the client reports it), NodeBMC status writes, Secrets, Events."""

    def __init__(self) -> None:
        self.nodes: dict[str, Obj] = {}
        self.statuses: dict[str, Obj] = {}
        self.secrets: dict[str, Obj] = {}
        self.secret_reads = 0
        self.node_patches: list[list[Obj]] = []
        self.power_offs: list[tuple[str, Obj, str]] = []  # (name, record, resourceVersion)
        self.version = "1"  # the NodeBMC's resourceVersion as the API server holds it
        self.writes = 0

    def list_watch(self) -> Unused:
        return Unused()

    async def write_status(self, name: str, status: Obj) -> Obj:
        # A merge patch: what the status holds beside it (powerOff) stays.
        self.statuses[name] = {**self.statuses.get(name, {}), **copy.deepcopy(status)}
        self.writes += 1
        self.version = f"s{self.writes}"
        return {"metadata": {"name": name, "resourceVersion": self.version},
                "status": copy.deepcopy(self.statuses[name])}  # fmt: skip

    async def write_power_off(self, name: str, record: Obj, resource_version: str) -> Obj:
        """A merge patch with a resourceVersion: refused unless it is the stored one."""
        if resource_version != self.version:
            raise Conflict(409, "Conflict", name)
        self.power_offs.append((name, copy.deepcopy(record), resource_version))
        self.writes += 1
        self.version = f"s{self.writes}"
        status = {**self.statuses.get(name, {}), "powerOff": record}
        self.statuses[name] = status
        return {"metadata": {"name": name, "resourceVersion": self.version}, "status": status}

    async def patch_node(self, name: str, patch: list[Obj]) -> Obj:
        self.node_patches.append(patch)
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(404, "NotFound", name)
        if patch[0]["value"] != node["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", name)
        taints = node["spec"].setdefault("taints", [])
        for op in patch[1:]:
            if op["path"] == "/spec/taints":
                taints[:] = op["value"]
            elif op["op"] == "add":
                taints.append(op["value"])
            elif op["op"] == "remove":
                del taints[int(op["path"].rsplit("/", 1)[1])]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(node)

    async def get_secret(self, namespace: str, name: str) -> Obj:
        self.secret_reads += 1
        assert namespace == "bmc-creds"
        if name not in self.secrets:
            raise NotFound(404, "NotFound", name)
        return self.secrets[name]

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        return body


class FakeReaders:
    """The BMCs: a power state or an error per NodeBMC name."""

    def __init__(self) -> None:
        self.answers: dict[str, str | BmcError] = {}
        self.uuids: dict[str, str] = {}  # the System's UUID by NodeBMC name (none: not sent)
        self.reads: list[tuple[str, Credentials]] = []
        self.dropped: list[str] = []
        self.resets: list[tuple[str, str]] = []
        self.reset_error: BmcError | None = None
        self.on_reset: Callable[[], None] = lambda: None  # what a test checks at that moment

    async def read(self, key: str, spec: BmcSpec, credentials: Credentials) -> System:
        self.reads.append((key, credentials))
        answer = self.answers.get(key, "On")
        if isinstance(answer, BmcError):
            raise answer
        doc = {"PowerState": answer, **({"UUID": self.uuids[key]} if key in self.uuids else {})}
        system = parse_system(json.dumps(doc), spec.address.system_path)
        assert isinstance(system, System)
        return system

    async def reset(
        self, key: str, spec: BmcSpec, credentials: Credentials, reset_type: str
    ) -> None:
        self.on_reset()
        self.resets.append((key, reset_type))
        if self.reset_error is not None:
            raise self.reset_error

    async def drop(self, key: str) -> None:
        self.dropped.append(key)

    async def close(self) -> None:
        pass


def secret(username: str = "admin", password: str = "pw") -> Obj:
    return {"data": {"username": base64.b64encode(username.encode()).decode(),
                     "password": base64.b64encode(password.encode()).decode()}}  # fmt: skip


def nodebmc(name: str = "n1", generation: int = 1, **spec: Any) -> Obj:
    return {"apiVersion": "bmc.local-ccm.io/v1alpha1", "kind": "NodeBMC",
            "metadata": {"name": name, "uid": f"b-{name}", "generation": generation,
                         "resourceVersion": "1"},
            "spec": {"address": ADDRESS, "credentialsName": "creds", **spec}}  # fmt: skip


def node(name: str = "n1", ready: str = "False", *, tainted: bool = False,
         system_uuid: str = "") -> Obj:  # fmt: skip
    taints = [{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}] if tainted else []
    return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "10"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "nodeInfo": {"systemUUID": system_uuid}}}  # fmt: skip


class Harness:
    def __init__(self, bmcs: list[Obj], nodes: list[Obj]) -> None:
        self.api, self.readers, self.clock = FakeApi(), FakeReaders(), FakeClock()
        self.api.secrets["creds"] = secret()
        self.metrics = BmcMetrics()
        self.made = Controller(self.api, Unused(), SETTINGS, metrics=self.metrics,
                               clock=self.clock, rng=random.Random(1),
                               pollers=self.readers)  # fmt: skip
        for obj in nodes:
            self.api.nodes[obj["metadata"]["name"]] = copy.deepcopy(obj)
        for obj in bmcs:  # the API server holds what the cache shows
            self.api.statuses[obj["metadata"]["name"]] = copy.deepcopy(obj.get("status") or {})
        self.made.nodes.prime(nodes, "1")
        self.made.bmcs.prime(bmcs, "1")

    def sync(self, key: str = "n1") -> Any:
        return asyncio.run(self.made.sync(key))

    def events(self) -> list[tuple[str, str, str]]:
        found = []
        while not self.made.outbox.queue.empty():
            body = self.made.outbox.queue.get_nowait()
            found.append((body["involvedObject"]["kind"], body["type"], body["reason"]))
        return found

    def taints(self, name: str = "n1") -> list[str]:
        return [t["key"] for t in self.api.nodes[name]["spec"].get("taints") or ()]

    def sample(self, name: str, labels: dict[str, str]) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)

    def refresh_node(self, name: str = "n1") -> None:
        """The Node's watch event: the cache shows the stored Node."""
        self.made.nodes.prime([copy.deepcopy(n) for n in self.api.nodes.values()], "2")


def test_off_and_not_ready_taints_the_node_and_records_the_status() -> None:
    h = Harness([nodebmc()], [node(ready="False")])
    h.readers.answers["n1"] = "Off"
    result = h.sync()
    assert isinstance(result, RequeueAfter)
    assert 27.0 <= result.seconds <= 33.0  # the poll interval, 10 % jitter
    assert h.taints() == [SHUTDOWN_TAINT]
    assert h.api.statuses["n1"]["powerState"] == "Off"
    assert ("Node", "Normal", "ShutdownTaintAdded") in h.events()
    assert h.sample("local_ccm_bmc_power_states", {"state": "Off"}) == 1
    assert h.sample("local_ccm_bmc_taint_writes_total",
                    {"action": "add", "result": "success"}) == 1  # fmt: skip


def test_a_node_change_decides_again_on_the_last_poll_without_asking_the_bmc() -> None:
    h = Harness([nodebmc()], [node(ready="True")])
    h.readers.answers["n1"] = "Off"
    h.sync()
    assert h.taints() == []  # Ready wins
    assert ("Node", "Warning", "BMCReportsOffNodeReady") in h.events()
    h.api.nodes["n1"]["status"]["conditions"][0]["status"] = "False"
    h.refresh_node()
    h.sync()
    assert len(h.readers.reads) == 1  # not due: the last poll decides
    assert h.taints() == [SHUTDOWN_TAINT]
    h.clock.step(34.0)
    h.readers.answers["n1"] = "On"
    h.refresh_node()
    h.sync()
    assert len(h.readers.reads) == 2
    assert h.taints() == []


MACHINE = "4c4c4544-0042-3510-8052-b4c04f564433"
OTHER = "4c4c4544-0042-3510-8052-b4c04f56ffff"


def test_a_system_of_another_machine_says_nothing_about_the_node() -> None:
    h = Harness([nodebmc()], [node(ready="False", system_uuid=MACHINE)])
    h.readers.answers["n1"], h.readers.uuids["n1"] = "Off", OTHER
    assert isinstance(h.sync(), Retry)
    assert h.taints() == []
    status = h.api.statuses["n1"]
    assert status["powerState"] == "Unknown"
    assert status["conditions"][0]["reason"] == "SystemMismatch"
    assert (
        f"the System's UUID {OTHER} is not the Node's systemUUID {MACHINE}"
        in (status["conditions"][0]["message"])
    )
    assert ("NodeBMC", "Warning", "SystemMismatch") in h.events()
    h.readers.uuids["n1"] = MACHINE.upper()  # the address fixed; Redfish writes it in capitals
    h.clock.step(6.0)
    h.sync()
    assert (h.api.statuses["n1"]["powerState"], h.taints()) == ("Off", [SHUTDOWN_TAINT])


def test_a_node_registering_on_another_machine_is_compared_again_before_the_last_poll_acts() -> (
    None
):
    # The NodeBMC is written before its Node registers (a machine being installed): the System
    # read Off with no Node to compare. The Node then comes up on another machine.
    h = Harness([nodebmc()], [])
    h.readers.answers["n1"], h.readers.uuids["n1"] = "Off", OTHER
    h.sync()
    assert h.api.statuses["n1"]["powerState"] == "Off"
    h.api.nodes["n1"] = node(ready="False", system_uuid=MACHINE)
    h.refresh_node()
    h.sync()
    assert len(h.readers.reads) == 2  # not due, but the Node's machine is news
    assert (h.api.statuses["n1"]["powerState"], h.taints()) == ("Unknown", [])


def test_the_off_while_ready_warning_is_sent_once_per_episode() -> None:
    h = Harness([nodebmc()], [node(ready="True")])
    h.readers.answers["n1"] = "Off"
    for _ in range(3):
        h.sync()
        h.clock.step(34.0)
    assert [e for e in h.events() if e[2] == "BMCReportsOffNodeReady"] == [
        ("Node", "Warning", "BMCReportsOffNodeReady")
    ]


def test_a_failed_poll_is_recorded_then_retried_and_changes_nothing_on_the_node() -> None:
    h = Harness([nodebmc()], [node(ready="False", tainted=True)])
    h.readers.answers["n1"] = BmcError("unreachable", "connect refused")
    result = h.sync()
    assert isinstance(result, Retry)
    assert "Unreachable" in result.reason
    assert h.taints() == [SHUTDOWN_TAINT]  # unknown is never off, nor on
    assert h.api.node_patches == []
    status = h.api.statuses["n1"]
    assert (status["powerState"], status["conditions"][0]["reason"]) == ("Unknown", "Unreachable")
    assert h.events() == [("NodeBMC", "Warning", "Unreachable")]
    assert h.sample("local_ccm_bmc_errors_total", {"reason": "Unreachable"}) == 1
    h.clock.step(5.0)
    h.made.bmcs.prime([{**nodebmc(), "status": status}], "2")
    assert isinstance(h.sync(), Retry)
    assert h.events() == []  # the same reason: no second Event
    assert h.sample("local_ccm_bmc_errors_total", {"reason": "Unreachable"}) == 2
    h.clock.step(5.0)
    h.readers.answers["n1"] = "On"
    assert isinstance(h.sync(), RequeueAfter)
    assert h.taints() == []
    assert ("NodeBMC", "Normal", "Contacted") in h.events()


def test_a_system_read_before_is_absent_only_after_404s_on_three_polls_in_a_row() -> None:
    """One 404 can be a BMC starting its Redfish service; Absent lets the lifecycle controller
    delete the NotReady Node and count the machine as off, so it needs the 404 to stay."""
    h = Harness([nodebmc()], [node(ready="False")])
    h.sync()
    assert h.api.statuses["n1"]["powerState"] == "On"

    def poll(answer: str | BmcError) -> str:
        h.clock.step(34.0)
        h.readers.answers["n1"] = answer
        h.made.bmcs.prime([{**nodebmc(), "status": h.api.statuses["n1"]}], "2")
        h.sync()
        return str(h.api.statuses["n1"]["powerState"])

    gone = BmcError("not-found", "HTTP 404")
    assert [poll(gone), poll(gone)] == ["Unknown", "Unknown"]
    assert "1 of the 3 answers in a row" not in h.api.statuses["n1"]["conditions"][0]["message"]
    assert "2 of the 3 answers in a row" in h.api.statuses["n1"]["conditions"][0]["message"]
    assert poll("On") == "On"  # the BMC is back: the row starts over
    assert [poll(gone), poll(gone), poll(gone)] == ["Unknown", "Unknown", "Absent"]
    # A new term (a restart or another leader) keeps what the last one confirmed.
    again = Harness([{**nodebmc(), "status": h.api.statuses["n1"]}], [node(ready="False")])
    again.readers.answers["n1"] = gone
    again.sync()
    assert again.api.statuses["n1"]["powerState"] == "Absent"


def test_a_failing_bmc_is_not_asked_again_before_the_first_backoff() -> None:
    h = Harness([nodebmc()], [node(ready="False")])
    h.readers.answers["n1"] = BmcError("timeout", "no answer")
    h.sync()
    h.clock.step(1.0)
    assert isinstance(h.sync(), Retry)  # a Node change meanwhile: still failing
    assert len(h.readers.reads) == 1


def test_a_refused_password_makes_the_next_poll_read_the_secret_again() -> None:
    h = Harness([nodebmc()], [node()])
    h.readers.answers["n1"] = BmcError("auth", "HTTP 401")
    h.sync()
    assert h.api.secret_reads == 1
    h.api.secrets["creds"] = secret(password="rotated")
    h.readers.answers["n1"] = "On"
    h.clock.step(5.0)
    assert isinstance(h.sync(), RequeueAfter)
    assert h.api.secret_reads == 2
    assert h.readers.reads[-1][1] == Credentials("admin", "rotated")


def test_the_secret_is_read_again_only_after_ten_minutes_otherwise() -> None:
    h = Harness([nodebmc()], [node()])
    for _ in range(18):  # 17 x 34 s: under ten minutes
        h.sync()
        h.clock.step(34.0)
    assert len(h.readers.reads) == 18
    assert h.api.secret_reads == 1
    h.sync()  # 612 s after the first read
    assert h.api.secret_reads == 2


def test_a_missing_secret_is_credentials_missing_and_nothing_is_contacted() -> None:
    h = Harness([nodebmc(credentialsName="nope")], [node()])
    result = h.sync()
    assert isinstance(result, Retry)
    assert h.readers.reads == []
    cond = h.api.statuses["n1"]["conditions"][0]
    assert cond["reason"] == "CredentialsMissing"
    assert "bmc-creds/nope" in cond["message"]


def test_an_invalid_spec_contacts_nothing_and_waits_for_a_new_spec() -> None:
    h = Harness([nodebmc(address="ipmi://10.0.0.5")], [node()])
    assert h.sync() == DONE
    assert h.readers.reads == []
    assert h.api.statuses["n1"]["conditions"][0]["reason"] == "InvalidSpec"
    fixed = nodebmc(generation=2)
    h.made.bmcs.prime([fixed], "2")
    assert isinstance(h.sync(), RequeueAfter)
    assert len(h.readers.reads) == 1
    assert h.api.statuses["n1"]["observedGeneration"] == 2


def test_a_conflicting_taint_write_goes_to_the_worker() -> None:
    h = Harness([nodebmc()], [node(ready="False")])
    h.api.nodes["n1"]["metadata"]["resourceVersion"] = "11"  # changed since the cache
    h.readers.answers["n1"] = "Off"
    with pytest.raises(Conflict):
        h.sync()
    assert h.sample("local_ccm_bmc_taint_writes_total",
                    {"action": "add", "result": "conflict"}) == 1  # fmt: skip
    h.refresh_node()
    assert isinstance(h.sync(), RequeueAfter)  # on the newer Node, without a new poll
    assert len(h.readers.reads) == 1
    assert h.taints() == [SHUTDOWN_TAINT]


def test_a_deleted_nodebmc_closes_its_client_and_a_ready_node_still_loses_the_taint() -> None:
    h = Harness([nodebmc()], [node(ready="True", tainted=True)])
    h.made.bmcs.prime([], "2")
    assert h.sync() == DONE
    assert h.readers.dropped == ["n1"]
    assert h.taints() == []


def test_power_changes_are_events_but_an_outage_between_equal_reads_is_not() -> None:
    h = Harness([nodebmc()], [node()])
    h.sync()
    h.clock.step(34.0)
    h.readers.answers["n1"] = BmcError("unreachable", "down")
    h.sync()
    h.clock.step(6.0)
    h.readers.answers["n1"] = "On"
    h.sync()
    h.clock.step(34.0)
    h.readers.answers["n1"] = "Off"
    h.sync()
    reasons = [reason for kind, _, reason in h.events() if kind == "NodeBMC"]
    assert reasons == ["Unreachable", "Contacted", "PowerStateChanged"]


def test_keys_a_status_write_and_a_heartbeat_are_not_news() -> None:
    made = Harness([nodebmc()], [node()]).made
    old = made.bmcs.cache["n1"]
    written = replace(old, resource_version="2")
    assert list(made._on_bmc(Change("MODIFIED", "n1", old, written))) == []
    respec = replace(written, generation=2)
    assert list(made._on_bmc(Change("MODIFIED", "n1", written, respec))) == ["n1"]
    view = made.nodes.cache["n1"]
    beat = replace(view, resource_version="11")
    assert list(made._on_node(Change("MODIFIED", "n1", view, beat))) == []
    ready = replace(view, ready="True")
    assert list(made._on_node(Change("MODIFIED", "n1", view, ready))) == ["n1"]
    stranger = replace(ready, name="n9", taints=((SHUTDOWN_TAINT, "NoSchedule"),))
    assert list(made._on_node(Change("ADDED", "n9", None, stranger))) == ["n9"]
    assert list(made._on_node(Change("ADDED", "n8", None, view))) == []


def test_the_first_keys_are_every_nodebmc_and_every_ready_node_still_tainted() -> None:
    h = Harness([nodebmc()], [node(), node("n2", ready="True", tainted=True)])
    assert sorted(h.made.synced()) == ["n1", "n2"]
