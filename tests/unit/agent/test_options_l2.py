"""--l2-announce and its settings: off by default, the timings by leader election's rules,
every problem listed, and no --l2-* flag without it."""

from __future__ import annotations

from local_ccm.agent.options import AgentOptions, L2Options, startup_fields
from tests.support.options import load_agent as load_options
from tests.unit.agent.test_options import IN_CLUSTER, fake_resolve


def load(*argv: str) -> AgentOptions | list[str]:
    result = load_options(("--node-name=n1", *argv), IN_CLUSTER, resolve=fake_resolve)
    return result if isinstance(result, AgentOptions) else [str(p) for p in result]


def test_off_by_default() -> None:
    options = load()
    assert isinstance(options, AgentOptions)
    assert options.l2 is None
    assert startup_fields(options)["l2_announce"] == "off"


def test_on_with_its_defaults_and_settings() -> None:
    options = load("--l2-announce")
    assert isinstance(options, AgentOptions)
    assert options.l2 == L2Options()
    options = load("--l2-announce", "--l2-lease-namespace=local-ccm", "--l2-lb-class=x.io/lb",
                   "--l2-lb-classless=false", "--l2-lease-duration=12s",
                   "--l2-renew-deadline=8s", "--l2-renew-period=4s")  # fmt: skip
    assert isinstance(options, AgentOptions)
    assert options.l2 == L2Options("local-ccm", "x.io/lb", False, 12.0, 8.0, 4.0)
    assert startup_fields(options)["l2_announce"] == "local-ccm"


def test_every_problem_is_listed() -> None:
    problems = load("--l2-announce", "--l2-lease-namespace=Not_A_Name", "--l2-lb-class=plain",
                    "--l2-lease-duration=4s", "--l2-renew-deadline=5s")  # fmt: skip
    assert isinstance(problems, list)
    assert len(problems) == 3
    assert "--l2-lease-namespace" in problems[0]
    assert "--l2-lb-class" in problems[1]
    assert "lease duration must be greater than renew deadline" in problems[2]


def test_its_settings_without_the_flag_are_refused() -> None:
    problems = load("--l2-lease-namespace=x")
    assert isinstance(problems, list)
    assert problems == ["invalid flag --l2-lease-namespace: only used with --l2-announce in "
                        "loop mode"]  # fmt: skip
    problems = load("--l2-announce", "--run-once")
    assert isinstance(problems, list)
    assert any("loop mode only" in p for p in problems)
