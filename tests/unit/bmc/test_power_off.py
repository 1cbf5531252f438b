"""Power-off requests in node-bmc: the pure decision (`core.poweroff.plan_power_off`, a table),
then the controller against the fake API and BMCs of test_run: the record before the
ForceOff, the ForceOff sent once, never again by a new term, confirmed by a poll that reads
Off, failed after the timeout, refused for another Node or a Ready one."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.model import NodeView
from local_ccm.bmc.core.observation import Observation, failed
from local_ccm.bmc.core.poweroff import plan_power_off, request_uid
from local_ccm.bmc.options import Settings
from local_ccm.kube.errors import Conflict
from local_ccm.kube.informer import Change
from local_ccm.names import POWER_OFF_ANNOTATION
from local_ccm.runtime.events import rfc3339
from tests.fakes.clock import START_WALL
from tests.unit.bmc.test_run import Harness, node, nodebmc

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REQUEST = "u-n1@2026-12-02T11:59:00Z"
NOT_READY = NodeView("n1", "u-n1", "10", "False", ())


def read(power: str, at: datetime = T0) -> Observation:
    return Observation(power, "Contacted", f"PowerState {power}", at)  # type: ignore[arg-type]


def sent(seconds_ago: float = 10.0) -> dict[str, str]:
    return {"request": REQUEST, "sentAt": rfc3339(T0 - timedelta(seconds=seconds_ago))}


UNREACHABLE = failed(BmcError("unreachable", "refused"), T0, read_before=True)


@pytest.mark.parametrize(
    ("request_", "recorded", "node_", "observation", "step"),
    [
        (None, None, NOT_READY, read("On"), "none"),
        (REQUEST, None, NOT_READY, read("On"), "send"),
        ("u-n1", None, NOT_READY, read("On"), "send"),  # a bare uid, written by hand
        (REQUEST, None, NOT_READY, read("Off"), "already_off"),
        (REQUEST, None, NOT_READY, read("PoweringOff"), "wait"),
        (REQUEST, None, NOT_READY, UNREACHABLE, "wait"),  # unknown is never off, nor on
        (REQUEST, None, NOT_READY, None, "wait"),
        (REQUEST, None, None, read("On"), "refuse"),  # no Node of that name
        (REQUEST, None, replace(NOT_READY, uid="u-other"), read("On"), "refuse"),
        (REQUEST, None, replace(NOT_READY, ready="True"), read("On"), "refuse"),
        (REQUEST, {"request": "u-n1@2026-01-01T00:00:00Z", "confirmedAt": "x"}, NOT_READY,
         read("On"), "send"),  # an earlier request's record: this one is new
        (REQUEST, sent(), NOT_READY, read("On"), "wait"),  # recorded: never sent again
        (REQUEST, sent(), NOT_READY, read("Off"), "confirm"),
        (REQUEST, sent(), replace(NOT_READY, ready="True"), read("Off"), "confirm"),
        (REQUEST, sent(), NOT_READY, read("Off", T0 - timedelta(seconds=30)), "wait"),  # older
        (REQUEST, sent(120.0), NOT_READY, read("On"), "fail"),
        (REQUEST, sent(120.0), NOT_READY, UNREACHABLE, "fail"),
        (REQUEST, {**sent(), "confirmedAt": "t"}, NOT_READY, read("On"), "none"),
        (REQUEST, {**sent(200.0), "failedAt": "t"}, NOT_READY, read("On"), "none"),
    ],
)  # fmt: skip
def test_plan_power_off(
    request_: str | None, recorded: dict[str, Any] | None, node_: NodeView | None,
    observation: Observation | None, step: str,
) -> None:  # fmt: skip
    plan = plan_power_off(request_, recorded, node_, observation, now=T0, timeout=120.0)
    assert plan.step == step, plan.message


def test_the_record_says_what_was_done_and_keeps_the_request() -> None:
    send = plan_power_off(REQUEST, None, NOT_READY, read("On"), now=T0, timeout=120.0)
    assert send.record == {"request": REQUEST, "sentAt": rfc3339(T0)}
    confirm = plan_power_off(REQUEST, send.record, NOT_READY, read("Off"), now=T0, timeout=1.0)
    assert confirm.record is not None
    assert confirm.record["request"] == REQUEST
    assert confirm.record["confirmedAt"] == rfc3339(T0)
    off = plan_power_off(REQUEST, None, NOT_READY, read("Off"), now=T0, timeout=120.0)
    assert off.record is not None
    assert "sentAt" not in off.record
    assert request_uid(REQUEST) == "u-n1"


# ------------------------------------------------------------------ the controller
def requested(request: str = REQUEST, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = nodebmc()
    obj["metadata"]["annotations"] = {POWER_OFF_ANNOTATION: request}
    if status:
        obj["status"] = status
    return obj


def test_a_request_is_recorded_then_force_off_is_sent_once_then_off_is_confirmed() -> None:
    h = Harness([requested()], [node(ready="False")])
    recorded_first: list[list[Any]] = []
    h.readers.on_reset = lambda: recorded_first.append([r for _, r, _ in h.api.power_offs])
    h.sync()
    assert len(recorded_first) == 1
    assert [sorted(r) for r in recorded_first[0]] == [["request", "sentAt"]]
    assert h.readers.resets == [("n1", "ForceOff")]
    record = h.api.statuses["n1"]["powerOff"]
    assert record["request"] == REQUEST
    assert "sentAt" in record
    assert ("NodeBMC", "Normal", "PowerOffSent") in h.events()
    h.clock.step(1.0)
    h.sync()  # not due: the last poll still read On
    assert h.readers.resets == [("n1", "ForceOff")]
    h.clock.step(34.0)
    h.readers.answers["n1"] = "Off"
    h.sync()
    assert h.readers.resets == [("n1", "ForceOff")]
    assert "confirmedAt" in h.api.statuses["n1"]["powerOff"]
    assert ("Node", "Normal", "PowerOffConfirmed") in h.events()
    assert h.sample("local_ccm_bmc_power_offs_total", {"outcome": "sent"}) == 1
    assert h.sample("local_ccm_bmc_power_offs_total", {"outcome": "confirmed"}) == 1


def test_a_new_term_finds_the_record_and_never_sends_a_second_force_off() -> None:
    """The leader recorded the request and stopped before (or after) its ForceOff: the new
    leader sees only the record, sends nothing, and reports the request failed after the
    timeout while the System stays On."""
    status = {"powerOff": {"request": REQUEST, "sentAt": rfc3339(START_WALL)}}
    h = Harness([requested(status=status)], [node(ready="False")])
    h.sync()
    assert h.readers.resets == []
    assert h.api.power_offs == []
    h.clock.step(Settings().power_off_timeout + 1)
    h.sync()
    assert h.readers.resets == []
    [(_, record, _)] = h.api.power_offs
    assert "failedAt" in record
    assert "not sent again" in record["message"]
    assert ("NodeBMC", "Warning", "PowerOffFailed") in h.events()
    h.clock.step(400.0)
    h.sync()
    assert len(h.api.power_offs) == 1  # failed is final for this request


def test_a_request_for_another_node_or_a_ready_one_is_refused_once() -> None:
    h = Harness([requested(request="u-someone-else@2026-12-02T11:59:00Z")], [node(ready="False")])
    for _ in range(3):
        h.sync()
        h.clock.step(34.0)
    assert (h.readers.resets, h.api.power_offs) == ([], [])
    refused = [e for e in h.events() if e[2] == "PowerOffRefused"]
    assert refused == [("NodeBMC", "Warning", "PowerOffRefused"),
                       ("Node", "Warning", "PowerOffRefused")]  # fmt: skip
    ready = Harness([requested()], [node(ready="True")])
    ready.sync()
    assert (ready.readers.resets, ready.api.power_offs) == ([], [])
    assert ready.sample("local_ccm_bmc_power_offs_total", {"outcome": "refused"}) == 1


def test_a_system_already_off_is_confirmed_without_a_force_off() -> None:
    h = Harness([requested()], [node(ready="False")])
    h.readers.answers["n1"] = "Off"
    h.sync()
    assert h.readers.resets == []
    [(_, record, _)] = h.api.power_offs
    assert "confirmedAt" in record
    assert "sentAt" not in record


def test_a_conflicting_record_goes_to_the_worker_and_nothing_is_sent() -> None:
    h = Harness([requested()], [node(ready="False")])
    write = h.api.write_status

    async def moved_on(name: str, status: dict[str, Any]) -> Any:
        answer = await write(name, status)
        h.api.version = "changed-by-someone"
        return answer

    h.api.write_status = moved_on  # type: ignore[method-assign]
    with pytest.raises(Conflict):
        h.sync()
    assert h.readers.resets == []


def test_a_failed_force_off_is_reported_and_not_retried() -> None:
    h = Harness([requested()], [node(ready="False")])
    h.readers.reset_error = BmcError("server-error", "HTTP 500")
    h.sync()
    assert ("NodeBMC", "Warning", "PowerOffError") in h.events()
    h.clock.step(34.0)
    h.sync()
    assert len(h.readers.resets) == 1


def test_the_request_annotation_is_news_but_a_status_write_is_not() -> None:
    made = Harness([nodebmc()], [node()]).made
    old = made.bmcs.cache["n1"]
    asked = replace(old, resource_version="2", power_off=REQUEST)
    assert list(made._on_bmc(Change("MODIFIED", "n1", old, asked))) == ["n1"]
    recorded = replace(asked, resource_version="3", status={"powerOff": {"request": REQUEST}})
    assert list(made._on_bmc(Change("MODIFIED", "n1", asked, recorded))) == []


def test_last_contact_is_refreshed_every_30s_while_the_node_is_not_ready() -> None:
    for ready, writes in (("False", 3), ("True", 1)):
        h = Harness([nodebmc()], [node(ready=ready)])
        for _ in range(3):
            asyncio.run(h.made.sync("n1"))
            h.made.bmcs.prime([{**nodebmc(), "status": h.api.statuses["n1"]}], str(h.api.writes))
            h.clock.step(34.0)
        assert h.api.writes == writes, ready
