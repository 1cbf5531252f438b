"""The lifecycle controller's NodeBMC flags: off in node-lifecycle-controller, on by default in
the manager when node-bmc runs too, fencing only with what it needs, a `--bmc-max-age` that
node-bmc's polls can keep fresh, and the permissions each setting adds."""

from __future__ import annotations

import pytest

from local_ccm import flags
from local_ccm.cli import lifecycle, manager
from local_ccm.kube.nodes import Access
from local_ccm.lifecycle.options import FLAGS, LifecycleOptions

GROUP = "bmc.local-ccm.io"


def standalone(*argv: str) -> LifecycleOptions | list[flags.Problem]:
    parsed = flags.parse(FLAGS, list(argv), {})
    assert isinstance(parsed, flags.Parsed)
    return lifecycle.controller().load(parsed, ({}, (), ()))


def in_manager(*argv: str) -> LifecycleOptions | list[flags.Problem]:
    parsed = flags.parse(manager.manager_flags(), list(argv), {})
    assert isinstance(parsed, flags.Parsed)
    return manager.lifecycle_row().load(parsed, ({}, (), ()))


def settings(options: LifecycleOptions | list[flags.Problem]) -> tuple[bool, bool, float]:
    assert isinstance(options, LifecycleOptions), options
    s = options.settings
    return s.bmc_power_state, s.bmc_fencing, s.bmc_max_age


def test_node_lifecycle_controller_reads_no_nodebmcs_unless_told() -> None:
    assert settings(standalone()) == (False, False, 120.0)
    assert settings(standalone("--bmc-power-state", "--bmc-max-age=5m")) == (True, False, 300.0)


def test_the_manager_reads_them_when_node_bmc_runs_too() -> None:
    assert settings(in_manager())[0] is False  # node-bmc is off by default
    assert settings(in_manager("--controllers=node-lifecycle,node-bmc"))[0] is True
    assert settings(in_manager("--controllers=*,node-bmc", "--bmc-power-state=false"))[0] is False


def test_fencing_needs_the_power_state_and_the_out_of_service_step() -> None:
    problems = standalone("--bmc-fencing")
    assert isinstance(problems, list)
    texts = [str(p) for p in problems]
    assert any("needs --bmc-power-state" in t for t in texts), texts
    assert any("needs --out-of-service-taint" in t for t in texts), texts
    ok = in_manager("--controllers=node-lifecycle,node-bmc", "--bmc-fencing",
                    "--out-of-service-taint")  # fmt: skip
    assert settings(ok) == (True, True, 120.0)


def test_a_max_age_node_bmc_cannot_keep_fresh_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    problems = in_manager("--controllers=node-lifecycle,node-bmc", "--bmc-poll-interval=2m",
                          "--bmc-max-age=2m")  # fmt: skip
    assert isinstance(problems, list)
    assert "--bmc-max-age: must be at least 2m42s" in str(problems[0])
    assert manager.main(["--controllers=node-lifecycle,node-bmc", "--bmc-max-age=20s"], {}) == 2
    assert "invalid flag --bmc-max-age: must be at least 1m3s" in capsys.readouterr().err


def test_permissions_grow_with_the_settings() -> None:
    def nodebmcs(*argv: str) -> list[Access]:
        options = standalone(*argv)
        assert isinstance(options, LifecycleOptions)
        return [a for a in lifecycle.permissions(options) if a.resource == "nodebmcs"]

    assert nodebmcs() == []
    read = [Access(verb, "nodebmcs", GROUP) for verb in ("get", "list", "watch")]
    assert nodebmcs("--bmc-power-state") == read
    fencing = nodebmcs("--bmc-power-state", "--bmc-fencing", "--out-of-service-taint")
    assert fencing == [*read, Access("patch", "nodebmcs", GROUP)]
