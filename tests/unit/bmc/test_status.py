"""A NodeBMC's status after a poll (`core.status.desired_status`): written when it changes,
`lastContact` alone refreshed only now and then, condition times as Kubernetes keeps them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.observation import Observation, failed, invalid_spec
from local_ccm.bmc.core.status import desired_status, read_before
from local_ccm.runtime.events import rfc3339

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REFRESH = 300.0


def read(power: str, at: datetime) -> Observation:
    return Observation(power, "Contacted", f"PowerState {power}", at)  # type: ignore[arg-type]


def after(current: dict[str, Any], observation: Observation, generation: int = 1) -> Any:
    return desired_status(current, observation, generation, refresh=REFRESH)


def test_the_first_read_writes_every_field() -> None:
    status = after({}, read("On", T0))
    assert status == {
        "observedGeneration": 1,
        "powerState": "On",
        "lastPowerChange": rfc3339(T0),
        "readGeneration": 1,
        "lastContact": rfc3339(T0),
        "conditions": [{
            "type": "Reachable", "status": "True", "reason": "Contacted",
            "message": "PowerState On", "lastTransitionTime": rfc3339(T0),
            "observedGeneration": 1,
        }],
    }  # fmt: skip


def test_the_same_answer_writes_nothing_until_last_contact_is_old() -> None:
    first = after({}, read("On", T0))
    assert after(first, read("On", T0 + timedelta(seconds=30))) is None
    assert after(first, read("On", T0 + timedelta(seconds=REFRESH))) is None
    later = T0 + timedelta(seconds=REFRESH + 1)
    refreshed = after(first, read("On", later))
    assert refreshed == {**first, "lastContact": rfc3339(later)}  # nothing else moves


def test_a_power_change_moves_last_power_change_and_last_contact() -> None:
    first = after({}, read("On", T0))
    t1 = T0 + timedelta(seconds=30)
    off = after(first, read("Off", t1))
    assert (off["powerState"], off["lastPowerChange"], off["lastContact"]) == (
        "Off", rfc3339(t1), rfc3339(t1))  # fmt: skip
    assert off["conditions"][0]["lastTransitionTime"] == rfc3339(T0)  # still True


def test_a_failure_records_unknown_keeps_last_contact_and_flips_the_condition() -> None:
    first = after({}, read("Off", T0))
    t1 = T0 + timedelta(seconds=30)
    down = after(first, failed(BmcError("unreachable", "connect refused"), t1, read_before=True))
    assert down["powerState"] == "Unknown"  # never the stale Off
    assert down["lastContact"] == rfc3339(T0)
    assert down["lastPowerChange"] == rfc3339(t1)
    [cond] = down["conditions"]
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == (
        "False", "Unreachable", rfc3339(t1))  # fmt: skip
    assert "connect refused" in cond["message"]
    t2 = t1 + timedelta(seconds=600)
    assert (
        after(down, failed(BmcError("unreachable", "connect refused"), t2, read_before=True))
        is None
    )
    timeout = after(down, failed(BmcError("timeout", "no answer"), t2, read_before=True))
    assert timeout["conditions"][0]["lastTransitionTime"] == rfc3339(t1)  # False all along


def test_a_missing_system_is_an_answer_absent_and_moves_last_contact() -> None:
    first = after({}, read("On", T0))
    t1 = T0 + timedelta(seconds=30)
    gone = after(first, failed(BmcError("not-found", "HTTP 404"), t1, read_before=True))
    assert (gone["powerState"], gone["lastContact"]) == ("Absent", rfc3339(t1))
    assert gone["conditions"][0]["reason"] == "SystemNotFound"


def test_the_generation_a_system_was_read_at_is_kept_until_the_next_read() -> None:
    """`readGeneration`: a 404 counts as Absent only at a generation whose System was read."""
    first = after({}, read("On", T0))
    assert first["readGeneration"] == 1
    assert read_before(first, 1)
    assert not read_before(first, 2)
    assert not read_before({}, 1)
    t1 = T0 + timedelta(seconds=30)
    down = after(first, failed(BmcError("unreachable", "connect refused"), t1, read_before=True))
    assert down["readGeneration"] == 1  # a failure keeps it
    respecced = desired_status(down, read("On", t1), 2, refresh=REFRESH)
    assert respecced is not None
    assert respecced["readGeneration"] == 2
    never = desired_status({}, failed(BmcError("not-found", "HTTP 404"), T0, read_before=False),
                           1, refresh=REFRESH)  # fmt: skip
    assert never is not None
    assert "readGeneration" not in never


def test_a_new_generation_is_written_even_with_the_same_answer() -> None:
    first = after({}, invalid_spec("spec.address is required", T0))
    assert "lastContact" not in first
    again = after(first, invalid_spec("spec.address is required", T0), generation=2)
    assert again["observedGeneration"] == 2
    assert again["conditions"][0]["observedGeneration"] == 2


def test_an_unreadable_last_contact_is_refreshed() -> None:
    first = after({}, read("On", T0))
    refreshed = after({**first, "lastContact": "yesterday"}, read("On", T0))
    assert refreshed["lastContact"] == rfc3339(T0)
