"""What a poll learned (`core.observation`), the NodeBMC Events it gives (`core.events`), and
the projections the caches keep (`core.model`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from local_ccm.bmc.core import events
from local_ccm.bmc.core.errors import ERROR_KINDS, BmcError
from local_ccm.bmc.core.model import project_bmc, project_node, stored_reason
from local_ccm.bmc.core.observation import (
    FAILURES,
    HINTS,
    NEVER_READ,
    Observation,
    credentials_missing,
    failed,
    failure_delay,
    is_other_machine,
    observed,
)
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec, InvalidSpec
from local_ccm.bmc.core.system import parse_system

AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PATH = "/redfish/v1/Systems/1"


def system(power: Any) -> Observation:
    parsed = parse_system(f'{{"PowerState": {power}}}', PATH)
    assert not isinstance(parsed, BmcError)
    return observed(parsed, AT)


def test_a_read_system_is_its_power_state_and_a_null_one_is_unknown() -> None:
    assert (system('"Off"').power, system('"Off"').reason) == ("Off", "Contacted")
    assert system("null").power == "Unknown"
    odd = system('"Standby"')
    assert odd.power == "Unknown"
    assert "'Standby'" in odd.message
    assert odd.reachable
    assert odd.answered


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_every_error_kind_has_its_reason_and_a_hint_and_is_unknown_but_a_404(kind: Any) -> None:
    found = failed(BmcError(kind, "what happened"), AT, read_before=True)
    assert found.reason in FAILURES
    assert found.message == f"what happened: {HINTS[found.reason]}"
    assert not found.reachable
    assert found.power == ("Absent" if kind == "not-found" else "Unknown")
    assert found.answered == (kind == "not-found")


def test_a_404_where_no_system_was_ever_read_is_unknown_not_absent() -> None:
    """A mistyped System id answers 404 from the first poll: no machine went away, so it must
    not read as one that did (the lifecycle controller deletes a NotReady Node on Absent)."""
    never = failed(BmcError("not-found", "HTTP 404"), AT, read_before=False)
    assert (never.power, never.reason) == ("Unknown", "SystemNotFound")
    assert never.message == f"HTTP 404: {NEVER_READ}"
    assert never.answered  # an answer all the same: lastContact moves, polls keep their pace
    for kind in ERROR_KINDS:
        if kind != "not-found":
            other = failed(BmcError(kind, "x"), AT, read_before=False)
            assert other == failed(BmcError(kind, "x"), AT, read_before=True)


def test_a_failure_gives_one_warning_per_reason_change_and_recovery_one_normal_event() -> None:
    down = failed(BmcError("unreachable", "refused"), AT, read_before=True)
    up = system('"On"')
    [warning] = events.poll_events(up, "Contacted", down)
    assert (warning.type, warning.reason) == ("Warning", "Unreachable")
    assert events.poll_events(down, "Unreachable", down) == []  # the same reason: no Event
    [other] = events.poll_events(
        down, "Unreachable", failed(BmcError("timeout", "slow"), AT, read_before=True)
    )
    assert other.reason == "Timeout"
    [back] = events.poll_events(down, "Unreachable", up)
    assert (back.type, back.reason) == ("Normal", "Contacted")
    assert events.poll_events(up, "Contacted", up) == []


def test_after_a_restart_the_status_says_what_was_already_reported() -> None:
    missing = credentials_missing("Secret kube-system/x not found", AT)
    assert events.poll_events(None, "CredentialsMissing", missing) == []
    assert [e.reason for e in events.poll_events(None, "Contacted", missing)] == [
        "CredentialsMissing"
    ]
    assert events.poll_events(None, None, system('"On"')) == []  # a first read is no news


def test_projections_keep_what_the_controller_decides_on() -> None:
    bmc = project_bmc({
        "metadata": {"name": "n1", "uid": "u", "generation": 3, "resourceVersion": "9"},
        "spec": {"address": "redfish://10.0.0.5/redfish/v1/Systems/1", "credentialsName": "s"},
        "status": {"conditions": [{"type": "Reachable", "reason": "Timeout"}]},
    })  # fmt: skip
    assert (bmc.name, bmc.generation, bmc.resource_version) == ("n1", 3, "9")
    assert isinstance(bmc.spec, BmcSpec)
    assert stored_reason(bmc.status) == "Timeout"
    assert isinstance(project_bmc({"metadata": {"name": "x"}}).spec, InvalidSpec)
    node = project_node({
        "metadata": {"name": "n1", "uid": "u", "resourceVersion": "4"},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    })  # fmt: skip
    assert (node.ready, node.taints) == ("False", (("a", "NoSchedule"),))
    assert project_node({"metadata": {"name": "n2"}}).ready == "Unknown"  # as upstream


def test_a_heartbeat_is_not_news_but_readiness_and_the_taint_are() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    one = project_node(obj)
    two = project_node({**obj, "metadata": {"name": "n1", "resourceVersion": "2"}})
    assert one.decides_alike(two)
    assert not one.decides_alike(None)
    conditions = [{"type": "Ready", "status": "False"}]
    not_ready = project_node({**obj, "status": {"conditions": conditions}})
    assert not one.decides_alike(not_ready)


@pytest.mark.parametrize(
    ("error", "delay"),
    [
        (BmcError("server-error", "busy", status=503, retry_after=60.0), 60.0),
        (BmcError("server-error", "busy", status=429, retry_after=1.0), 5.0),  # never sooner
        (BmcError("server-error", "busy", status=503, retry_after=86400.0), 300.0),  # capped
        (BmcError("server-error", "busy", status=500), 5.0),
        (BmcError("unreachable", "refused"), 5.0),
    ],
)
def test_a_failed_poll_waits_for_the_retry_after_the_bmc_asked_within_the_backoff(
    error: BmcError, delay: float
) -> None:
    assert failure_delay(failed(error, AT, read_before=True), 5.0, 300.0) == delay


@pytest.mark.parametrize(
    ("node", "system", "other"),
    [
        ("4c4c4544-0042-3510-8052-b4c04f564433", "4c4c4544-0042-3510-8052-b4c04f564433", False),
        ("4c4c4544-0042-3510-8052-b4c04f564433", "4C4C4544-0042-3510-8052-B4C04F564433", False),
        # Firmware before SMBIOS 2.6: the first three fields in the other byte order.
        ("00112233-4455-6677-8899-aabbccddeeff", "33221100-5544-7766-8899-aabbccddeeff", False),
        ("4c4c4544-0042-3510-8052-b4c04f564433", "4c4c4544-0042-3510-8052-b4c04f56ffff", True),
        # No evidence either way: no Node, a Node without it, a BMC without it or garbage.
        ("", "4c4c4544-0042-3510-8052-b4c04f564433", False),
        ("4c4c4544-0042-3510-8052-b4c04f564433", None, False),
        ("4c4c4544-0042-3510-8052-b4c04f564433", "not-a-uuid", False),
        # A placeholder many boards share says nothing about which machine it is.
        ("03000200-0400-0500-0006-000700080009", "4c4c4544-0042-3510-8052-b4c04f564433", False),
        ("4c4c4544-0042-3510-8052-b4c04f564433", "00000000-0000-0000-0000-000000000000", False),
        ("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "4c4c4544-0042-3510-8052-b4c04f564433", False),
    ],
)
def test_another_machine_is_two_known_uuids_that_differ(
    node: str, system: str | None, other: bool
) -> None:
    assert is_other_machine(node, system) is other


@pytest.mark.parametrize(
    ("username", "password", "said"),
    [("admin", "s3cr3t\n", True), (" admin", "s3cr3t", True), ("admin", "s3cr3t", False)],
)
def test_refused_credentials_with_whitespace_at_an_end_are_pointed_out(
    username: str, password: str, said: bool
) -> None:
    padded = Credentials(username, password).padded
    refused = failed(BmcError("auth", "GET /s: HTTP 401"), AT, read_before=True, padded=padded)
    assert ("begins or ends with whitespace" in refused.message) is said
    assert "s3cr3t" not in refused.message
    other = failed(BmcError("unreachable", "refused"), AT, read_before=True, padded=padded)
    assert "whitespace" not in other.message  # only a refusal is about the credentials


def test_a_404_for_a_system_read_before_is_absent_from_the_third_in_a_row() -> None:
    gone = BmcError("not-found", "HTTP 404")
    seen = [failed(gone, AT, read_before=True, not_found=n).power for n in (1, 2, 3, 4)]
    assert seen == ["Unknown", "Unknown", "Absent", "Absent"]
    assert failed(gone, AT, read_before=False, not_found=5).power == "Unknown"  # never read
