"""What the lifecycle controller makes of NodeBMCs (`core.bmc`: the projection, freshness, the
power-off request and where it stands) and how the deletion walk uses them (`Sim`, the loop's
part played synchronously): the System absent deletes under every guard rail, the
out-of-service step waits for Off, fencing asks once per episode and only what the breaker and
the rate limit allow."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from local_ccm.lifecycle.core.bmc import (
    BmcView,
    PowerOffRecord,
    fence_status,
    parse_request,
    power_off_patch,
    project_bmc,
    read_bmc,
    request_value,
)
from local_ccm.lifecycle.core.health import Scope, parse_protected
from local_ccm.lifecycle.core.model import NodeView
from local_ccm.lifecycle.core.state import PipelineSettings, PipelineState, record_fence
from local_ccm.names import POWER_OFF_ANNOTATION
from local_ccm.runtime.events import rfc3339
from local_ccm.validate import CountOrPercent
from tests.fakes.lifecycle import NOW, Sim, bmc_view, node

MAX_AGE = 120.0
FAST = PipelineSettings(interval=1.0, max_unhealthy=CountOrPercent(100, percent=True),
                        self_check=False, bmc_power_state=True)  # fmt: skip
OOS = replace(FAST, out_of_service_taint=True)
FENCING = replace(OOS, bmc_fencing=True)


def sim(*nodes: NodeView, bmcs: dict[str, BmcView], settings: PipelineSettings = FAST,
        **kwargs: Any) -> Sim:  # fmt: skip
    return Sim(list(nodes), settings, bmcs=dict(bmcs), **kwargs)


# ------------------------------------------------------------------ the NodeBMC's reading
def raw(power: str = "On", **changes: Any) -> dict[str, Any]:
    reachable, reason = ("False", "SystemNotFound") if power == "Absent" else ("True", "Contacted")
    obj: dict[str, Any] = {
        "metadata": {"name": "n1", "uid": "b1", "resourceVersion": "7", "generation": 2},
        "spec": {"address": "redfish://10.0.0.5/redfish/v1/Systems/1", "caBundle": "PEM"},
        "status": {"observedGeneration": 2, "powerState": power, "lastContact": rfc3339(NOW),
                   "conditions": [{"type": "Reachable", "status": reachable,
                                   "reason": reason}]},
    }  # fmt: skip
    obj["status"].update(changes)
    return obj


@pytest.mark.parametrize(
    ("obj", "age", "state"),
    [
        (raw("On"), 0, "on"),
        (raw("Off"), 119, "off"),
        (raw("Absent"), 5, "absent"),
        (raw("Off"), 121, "unknown"),  # stale: node-bmc stopped?
        (raw("Off", lastContact=None), 0, "unknown"),
        (raw("Off", observedGeneration=1), 0, "unknown"),  # read for an older spec
        (raw("PoweringOff"), 0, "unknown"),
        (raw("Paused"), 0, "unknown"),
        (raw("Unknown", conditions=[{"type": "Reachable", "status": "False",
                                     "reason": "Unreachable"}]), 0, "unknown"),
        (raw("Off", conditions=[{"type": "Reachable", "status": "False",
                                 "reason": "Timeout"}]), 0, "unknown"),  # never an old Off
        (raw("Absent", conditions=[{"type": "Reachable", "status": "False",
                                    "reason": "Timeout"}]), 0, "unknown"),
        (raw("Off", conditions=[]), 0, "unknown"),
        ({"metadata": {"name": "n1"}}, 0, "unknown"),  # no status yet
    ],
)  # fmt: skip
def test_a_reading_counts_only_when_fresh_and_read(obj: dict[str, Any], age: float,
                                                   state: str) -> None:  # fmt: skip
    reading = read_bmc(project_bmc(obj), NOW + timedelta(seconds=age), MAX_AGE)
    assert reading.state == state, reading.detail
    assert "NodeBMC n1" in reading.detail


def test_the_projection_keeps_what_decisions_read_and_not_the_spec() -> None:
    obj = raw("Off", powerOff={"request": "u1@2026-11-21T12:00:00Z", "sentAt": rfc3339(NOW)})
    obj["metadata"]["annotations"] = {POWER_OFF_ANNOTATION: "u1@2026-11-21T12:00:00Z"}
    view = project_bmc(obj)
    assert (view.name, view.uid, view.resource_version, view.generation) == ("n1", "b1", "7", 2)
    assert view.request == "u1@2026-11-21T12:00:00Z"
    assert view.record == PowerOffRecord("u1@2026-11-21T12:00:00Z", sent_at=NOW)
    assert "PEM" not in repr(view)


def test_requests_name_the_node_and_the_time() -> None:
    value = request_value("u1", NOW)
    assert value == "u1@2026-11-21T12:00:00Z"
    request = parse_request(value)
    assert request is not None
    assert (request.uid, request.at) == ("u1", NOW)
    bare = parse_request("u1")
    assert bare is not None
    assert (bare.uid, bare.at) == ("u1", None)
    assert parse_request(None) is None


EPISODE = NOW - timedelta(minutes=10)
ASKED = request_value("u1", NOW - timedelta(minutes=1))


@pytest.mark.parametrize(
    ("request_", "record", "status"),
    [
        (None, None, "none"),
        (request_value("u-other", NOW), None, "none"),  # another Node (a recycled name)
        (request_value("u1", EPISODE - timedelta(hours=1)), None, "none"),  # an earlier episode
        (ASKED, None, "requested"),
        ("u1", None, "requested"),  # written by hand, no time: taken as this episode's
        (ASKED, PowerOffRecord("u1@2026-01-01T00:00:00Z", confirmed_at=NOW), "requested"),
        (ASKED, PowerOffRecord(ASKED, sent_at=NOW), "sent"),
        (ASKED, PowerOffRecord(ASKED, sent_at=NOW, confirmed_at=NOW), "confirmed"),
        (ASKED, PowerOffRecord(ASKED, sent_at=NOW, failed_at=NOW), "failed"),
    ],
)  # fmt: skip
def test_where_a_power_off_stands(
    request_: str | None, record: PowerOffRecord | None, status: str
) -> None:
    view = replace(bmc_view("n1"), request=request_, record=record)
    assert fence_status(view, "u1", EPISODE) == status


def test_the_request_patch_is_guarded_by_the_resource_version() -> None:
    view = bmc_view("n1")
    assert power_off_patch(view, "u1@t", has_annotations=False) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/metadata/annotations", "value": {POWER_OFF_ANNOTATION: "u1@t"}},
    ]
    assert power_off_patch(view, "u1@t", has_annotations=True)[1] == {
        "op": "add",
        "path": "/metadata/annotations/bmc.local-ccm.io~1power-off",
        "value": "u1@t",
    }


# ------------------------------------------------------------------ the System absent
def test_bm10_a_system_absent_deletes_its_notready_node_without_probes() -> None:
    s = sim(node("w1"), bmcs={"w1": bmc_view("w1", "Absent")})
    plan = s.tick()
    assert s.deleted_names() == ["w1"]
    assert s.probe_batches == 0
    [action] = next(p for p in s.plans if p.deletions).deletions
    assert (action.source, action.bmc) == ("bmc", True)
    assert "powerState Absent" in action.summary
    assert plan.probes == ()


def test_bm10_absent_is_held_by_the_breaker_dry_run_protection_and_the_rate_limit() -> None:
    absent = {f"w{i}": bmc_view(f"w{i}", "Absent") for i in range(3)}
    nodes = [node(f"w{i}") for i in range(3)] + [node("ok", ready="True")]
    # NotReady Nodes the autoscaler is not removing: a shared fault, most likely.
    outage = [node(f"u{i}", taints=()) for i in range(3)]
    broken = sim(
        *nodes,
        *outage,
        bmcs=absent,
        settings=replace(FAST, max_unhealthy=CountOrPercent(1, percent=False)),
    )
    broken.tick()
    assert broken.deleted_names() == []
    assert "DeletionBlockedByCircuitBreaker" in broken.event_reasons("w0")
    dry = sim(*nodes, bmcs=absent, settings=replace(FAST, dry_run=True))
    dry.tick()
    assert (dry.deleted_names(), dry.dry_runs) == ([], ["w0"])  # rate-limited alike
    protected = sim(node("w0", labels={"keep": ""}), bmcs=absent,
                    scope=Scope(protected=parse_protected("keep")))  # fmt: skip
    protected.tick()
    assert protected.deleted_names() == []
    limited = sim(*nodes, bmcs=absent)
    limited.tick()
    assert len(limited.deleted_names()) == 1  # one per interval, oldest first
    limited.run(3.0)
    assert len(limited.deleted_names()) == 3


def test_a_stale_absent_is_no_verdict_and_the_probes_decide() -> None:
    stale = bmc_view("w1", "Absent", at=NOW - timedelta(seconds=MAX_AGE + 1))
    s = sim(node("w1"), bmcs={"w1": stale})
    s.prober.outcomes["198.51.100.9"] = "reply"
    s.tick()
    assert s.deleted_names() == []
    assert s.probe_batches >= 1
    assert "NodeReachable" in s.event_reasons("w1")


def test_a_ready_node_is_never_deleted_for_absent_but_warned_about_once() -> None:
    ready = node("w1", ready="True")
    s = sim(ready, bmcs={"w1": bmc_view("w1", "Absent")})
    s.tick()
    s.tick(1.0)
    assert s.deleted_names() == []
    assert s.event_reasons("w1") == ["BMCSystemAbsentNodeReady"]
    s.bmcs = {"w1": bmc_view("w1", "On", at=s.wall)}
    s.tick(1.0)
    assert s.state.absent_ready == frozenset()
    s.bmcs = {"w1": bmc_view("w1", "Absent", at=s.wall)}
    s.tick(1.0)
    assert s.event_reasons("w1").count("BMCSystemAbsentNodeReady") == 2  # a new occurrence


# ------------------------------------------------------------------ out-of-service waits for Off
def test_bm11_out_of_service_waits_while_the_bmc_reads_on_or_nothing_fresh() -> None:
    for reading in (bmc_view("w1", "On"), bmc_view("w1", "Unknown"),
                    bmc_view("w1", "Off", at=NOW - timedelta(hours=1))):  # fmt: skip
        s = sim(node("w1"), bmcs={"w1": reading}, settings=OOS)
        s.tick()
        s.tick(1.0)
        assert s.deleted_names() == [], reading
        assert s.event_reasons("w1").count("WaitingForBMCOff") == 1
        assert any(d.step == "bmc_wait" for d in s.plans[-1].decisions)


def test_bm11_out_of_service_goes_on_once_the_bmc_reads_off() -> None:
    s = sim(node("w1"), bmcs={"w1": bmc_view("w1", "On")}, settings=OOS)
    s.tick()
    s.bmcs = {"w1": bmc_view("w1", "Off", at=s.wall)}
    s.tick(1.0)
    assert s.deleted_names() == ["w1"]
    [action] = next(p for p in s.plans if p.deletions).deletions
    assert (action.source, action.bmc, action.out_of_service) == ("probe", True, True)


def test_without_a_nodebmc_or_the_out_of_service_step_nothing_changes() -> None:
    for bmcs, settings in (({}, OOS), ({"w1": bmc_view("w1", "On")}, FAST)):
        s = sim(node("w1"), bmcs=bmcs, settings=settings)
        s.tick()
        assert s.deleted_names() == ["w1"]
        [action] = next(p for p in s.plans if p.deletions).deletions
        assert action.bmc == bool(bmcs)
    off = Sim([node("w1")], OOS)  # NodeBMCs not read at all (--bmc-power-state=false)
    off.tick()
    assert off.deleted_names() == ["w1"]


# ------------------------------------------------------------------ fencing
def test_bm12_an_unreachable_node_still_on_is_fenced_once_per_episode() -> None:
    bmcs = {"w1": bmc_view("w1", "On")}
    s = sim(node("w1"), bmcs=bmcs, settings=FENCING)
    s.bmcs = bmcs  # the request is written into it
    s.tick()
    assert s.fenced == ["w1"]
    assert s.deleted_names() == []
    for _ in range(3):  # node-bmc has not answered yet: the request stands
        bmcs["w1"] = replace(bmcs["w1"], last_contact=s.wall)
        s.tick(1.0)
    assert s.fenced == ["w1"]
    assert any(d.step == "fencing" for d in s.plans[-1].decisions)
    request = bmcs["w1"].request
    assert request is not None
    assert request.startswith("uid-w1@")
    bmcs["w1"] = replace(
        bmc_view("w1", "Off", at=s.wall),
        request=request,
        record=PowerOffRecord(request, sent_at=s.wall, confirmed_at=s.wall),
    )
    s.tick(1.0)
    assert s.deleted_names() == ["w1"]  # Off confirmed: out-of-service, then deletion


def test_bm12_fencing_counts_against_the_rate_limit_and_stops_at_the_breaker() -> None:
    nodes = [node(f"w{i}") for i in range(3)] + [node("ok", ready="True")]
    on = {f"w{i}": bmc_view(f"w{i}", "On") for i in range(3)}
    s = sim(*nodes, bmcs=on, settings=FENCING)
    s.tick()
    assert len(s.fenced) == 1
    assert "DeletionRateLimited" in s.event_reasons()
    outage = [node(f"u{i}", taints=()) for i in range(3)]
    broken = sim(
        *nodes,
        *outage,
        bmcs=on,
        settings=replace(FENCING, max_unhealthy=CountOrPercent(1, percent=False)),
    )
    broken.tick()
    assert broken.fenced == []


def test_fencing_never_the_own_node_a_protected_one_nor_in_dry_run() -> None:
    on = {"w1": bmc_view("w1", "On")}
    own = sim(node("w1"), bmcs=on, settings=FENCING, scope=Scope(own_node="w1"))
    own.tick()
    protected = sim(node("w1", labels={"keep": ""}), bmcs=on, settings=FENCING,
                    scope=Scope(protected=parse_protected("keep")))  # fmt: skip
    protected.tick()
    dry = sim(node("w1"), bmcs=on, settings=replace(FENCING, dry_run=True))
    dry.tick()
    assert (own.fenced, protected.fenced, dry.fenced) == ([], [], [])
    assert dry.event_reasons("w1").count("FencingDryRun") == 1


def test_a_failed_power_off_is_reported_and_not_asked_again_in_the_episode() -> None:
    asked = request_value("uid-w1", NOW)
    failed = replace(
        bmc_view("w1", "On"),
        request=asked,
        record=PowerOffRecord(asked, sent_at=NOW, failed_at=NOW, message="no Off"),
    )
    s = sim(node("w1"), bmcs={"w1": failed}, settings=FENCING)
    s.tick()
    assert s.fenced == []
    assert "FencingFailed" in s.event_reasons("w1")


def test_a_request_of_an_earlier_episode_is_asked_again() -> None:
    old = request_value("uid-w1", NOW - timedelta(hours=2))
    earlier = replace(
        bmc_view("w1", "On"), request=old, record=PowerOffRecord(old, sent_at=NOW, confirmed_at=NOW)
    )
    s = sim(node("w1"), bmcs={"w1": earlier}, settings=FENCING)
    s.tick()
    assert s.fenced == ["w1"]


def test_record_fence_keeps_the_token_of_a_written_request_only() -> None:
    state = PipelineState(starts=((1.0, "u1"),), attempts={"u1": "fencing"})
    written = record_fence(state, "u1", "requested")
    assert (written.starts, dict(written.attempts)) == (((1.0, "u1"),), {})
    for result in ("aborted", "precondition_failed", "gone"):
        assert record_fence(state, "u1", result).starts == ()
