"""A System's JSON to typed data: power states, names, the reset action; anything malformed is
an invalid-response error, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.system import ResetAction, ResetRequest, System, parse_system, plan_reset

PATH = "/redfish/v1/Systems/1"
RESET = f"{PATH}/Actions/ComputerSystem.Reset"
FALLBACK = ResetAction(RESET, None)


def doc(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def system(body: bytes | str) -> System:
    result = parse_system(body, PATH)
    assert isinstance(result, System), result
    return result


@pytest.mark.parametrize(
    ("power", "state", "reported"),
    [
        ("On", "On", None),
        ("Off", "Off", None),
        ("PoweringOn", "PoweringOn", None),
        ("PoweringOff", "PoweringOff", None),
        ("Paused", "Paused", None),
        (None, "unknown", None),  # null: the service cannot tell
        ("Standby", "unknown", "Standby"),  # not in the schema: kept for the message
        ("on", "unknown", "on"),  # the schema's values are case-sensitive
        ("unknown", "unknown", "unknown"),
    ],
)
def test_the_power_state_is_read(power: str | None, state: str, reported: str | None) -> None:
    parsed = system(doc(PowerState=power))
    assert (parsed.power_state, parsed.reported_power_state) == (state, reported)


def test_an_absent_power_state_is_unknown() -> None:
    assert system(doc(Id="1")).power_state == "unknown"


def test_the_names_and_health_are_read_and_wrong_types_dropped() -> None:
    status = {"State": "Enabled", "Health": "Warning"}
    full = system(doc(Id="1", Name="web-1", Manufacturer="Contoso", Model="3500", Status=status))
    assert (full.id, full.name, full.manufacturer, full.model, full.health) == (
        "1",
        "web-1",
        "Contoso",
        "3500",
        "Warning",
    )
    odd = system(doc(Id=1, Name=None, Manufacturer=["x"], Status="OK"))
    assert (odd.id, odd.name, odd.manufacturer, odd.model, odd.health) == (None,) * 5


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>503</html>", "GET /redfish/v1/Systems/1: the answer is not JSON (Expecting value"),
        (b"", "the answer is not JSON"),
        (b"\xff\xfe\x00", "the answer is not JSON"),
        (b"[1, 2]", "the answer is a JSON list, not an object"),
        (b'"On"', "the answer is a JSON str, not an object"),
        (b"null", "the answer is a JSON NoneType, not an object"),
        (doc(PowerState=1), "PowerState is a JSON int, not a string"),
        (doc(PowerState={"v": "On"}), "PowerState is a JSON dict, not a string"),
        (doc(PowerState=True), "PowerState is a JSON bool, not a string"),
    ],
)
def test_a_malformed_answer_is_an_invalid_response(body: bytes, says: str) -> None:
    result = parse_system(body, PATH)
    assert isinstance(result, BmcError)
    assert result.kind == "invalid-response"
    assert says in result.message


def test_text_is_accepted_as_well_as_bytes() -> None:
    assert system('{"PowerState": "Off"}').power_state == "Off"


@pytest.mark.parametrize(
    ("actions", "reset"),
    [
        (None, FALLBACK),
        ("x", FALLBACK),
        ({}, FALLBACK),
        ({"#ComputerSystem.Reset": "x"}, FALLBACK),
        ({"#ComputerSystem.Reset": {}}, FALLBACK),
        ({"#ComputerSystem.Reset": {"target": "/r/x"}}, ResetAction("/r/x", None)),
        ({"#ComputerSystem.Reset": {"target": "https://10.0.0.1/r/x"}}, ResetAction("/r/x", None)),
        ({"#ComputerSystem.Reset": {"target": 5}}, FALLBACK),
        ({"#ComputerSystem.Reset": {"target": "/r/x",
                                    "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}},
         ResetAction("/r/x", ("On", "ForceOff"))),
        ({"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": []}},
         ResetAction(RESET, ())),
        ({"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": ["On", 1]}}, FALLBACK),
        ({"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": "On"}}, FALLBACK),
    ],
)  # fmt: skip
def test_the_reset_action_is_read_with_its_fallback(actions: object, reset: ResetAction) -> None:
    assert system(doc(Actions=actions)).reset == reset


def test_a_reset_is_planned_for_an_offered_type() -> None:
    parsed = system(doc(Actions={"#ComputerSystem.Reset": {
        "target": "/r/x", "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}}))  # fmt: skip
    assert plan_reset(parsed, "ForceOff") == ResetRequest("/r/x", b'{"ResetType": "ForceOff"}')


def test_a_reset_is_planned_to_the_fallback_when_nothing_is_listed() -> None:
    assert plan_reset(system(doc()), "On") == ResetRequest(RESET, b'{"ResetType": "On"}')


def test_a_reset_type_the_bmc_does_not_offer_is_rejected_before_sending() -> None:
    parsed = system(doc(Actions={"#ComputerSystem.Reset": {
        "ResetType@Redfish.AllowableValues": ["On", "GracefulShutdown"]}}))  # fmt: skip
    assert plan_reset(parsed, "ForceOff") == BmcError(
        "rejected",
        "/redfish/v1/Systems/1 does not offer ResetType ForceOff (offers: On, GracefulShutdown)",
    )
