"""The test BMC harness decides alone whether a missing emulator skips or fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sushy import EMULATOR, require_emulator, system_uuid


def test_a_missing_emulator_fails_under_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="install the test extras"):
        require_emulator(tmp_path / "sushy-emulator", strict=True)


def test_a_missing_emulator_skips_on_a_developer_machine(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match="install the test extras"):
        require_emulator(tmp_path / "sushy-emulator", strict=False)


def test_the_venv_has_the_emulator() -> None:
    assert require_emulator(EMULATOR, strict=True) == EMULATOR


def test_a_systems_id_is_stable() -> None:
    assert system_uuid("bmc-0") == system_uuid("bmc-0") != system_uuid("bmc-1")
