"""Power state -> Node (`core.decide.plan_taint`) as a table: every power state and failure
against a Ready, a NotReady and an Unknown Node, with and without the shutdown taint."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from local_ccm.bmc.core.decide import TaintPlan, plan_taint
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.model import NodeView
from local_ccm.bmc.core.observation import (
    Observation,
    credentials_missing,
    failed,
    invalid_spec,
)
from local_ccm.names import SHUTDOWN_TAINT

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TAINT = (SHUTDOWN_TAINT, "NoSchedule")


def read(power: str) -> Observation:
    return Observation(power, "Contacted", f"PowerState {power}", AT)  # type: ignore[arg-type]


def node(ready: str, *, tainted: bool = False, others: int = 0) -> NodeView:
    taints = tuple(("example.com/other", "NoSchedule") for _ in range(others))
    return NodeView("n1", "u1", "7", ready, taints + ((TAINT,) if tainted else ()))


FAILURES = [
    failed(BmcError("unreachable", "connect refused"), AT, read_before=True),
    failed(BmcError("timeout", "no answer"), AT, read_before=True),
    failed(BmcError("tls", "certificate refused"), AT, read_before=True),
    failed(BmcError("auth", "HTTP 401"), AT, read_before=True),
    failed(BmcError("invalid-response", "not JSON"), AT, read_before=True),
    failed(
        BmcError("not-found", "HTTP 404"), AT, read_before=True
    ),  # Absent: this part only reports it
    failed(BmcError("server-error", "HTTP 500"), AT, read_before=True),
    failed(BmcError("rejected", "HTTP 400"), AT, read_before=True),
    invalid_spec("spec.address is required", AT),
    credentials_missing("Secret kube-system/x not found", AT),
]
NO_CHANGE = [read(p) for p in ("PoweringOn", "PoweringOff", "Paused", "Unknown")] + FAILURES


@pytest.mark.parametrize("ready", ["False", "Unknown"])
def test_a_node_that_is_not_ready_gets_the_taint_when_the_bmc_reads_its_system_off(
    ready: str,
) -> None:
    plan = plan_taint(read("Off"), node(ready))
    assert (plan.action, plan.ready_but_off) == ("add", False)
    assert plan_taint(read("Off"), node(ready, tainted=True)).action is None  # already there


@pytest.mark.parametrize("ready", ["False", "Unknown"])
def test_the_taint_goes_when_the_bmc_reads_the_system_on(ready: str) -> None:
    assert plan_taint(read("On"), node(ready, tainted=True)).action == "remove"
    assert plan_taint(read("On"), node(ready)).action is None


@pytest.mark.parametrize("observation", NO_CHANGE, ids=lambda o: f"{o.reason}-{o.power}")
@pytest.mark.parametrize("tainted", [False, True])
def test_unknown_is_never_off_and_changes_nothing_on_a_node_that_is_not_ready(
    observation: Observation, tainted: bool
) -> None:
    assert plan_taint(observation, node("False", tainted=tainted)) == TaintPlan(None, "")


@pytest.mark.parametrize(
    "observation", [read("On"), read("Off"), *NO_CHANGE, None], ids=lambda o: repr(o)[:40]
)
def test_ready_wins_a_ready_node_never_gets_the_taint_and_loses_it_whatever_the_bmc_says(
    observation: Observation | None,
) -> None:
    assert plan_taint(observation, node("True")).action is None
    assert plan_taint(observation, node("True", tainted=True)).action == "remove"


def test_off_while_ready_is_a_warning_not_a_taint() -> None:
    plan = plan_taint(read("Off"), node("True"))
    assert (plan.action, plan.ready_but_off) == (None, True)
    assert not plan_taint(read("On"), node("True")).ready_but_off
    assert not plan_taint(
        failed(BmcError("timeout", "x"), AT, read_before=True), node("True")
    ).ready_but_off


def test_without_a_node_or_without_a_nodebmc_nothing_but_the_ready_rule_applies() -> None:
    assert plan_taint(read("Off"), None) == TaintPlan(None, "")
    assert plan_taint(None, node("False", tainted=True)).action is None
    assert plan_taint(None, node("False")).action is None


def test_only_the_shutdown_taint_with_effect_noschedule_counts() -> None:
    other_effect = NodeView("n1", "u1", "7", "False", ((SHUTDOWN_TAINT, "NoExecute"),))
    assert not other_effect.is_shut_down
    assert plan_taint(read("Off"), other_effect).action == "add"
    assert plan_taint(read("On"), other_effect).action is None
