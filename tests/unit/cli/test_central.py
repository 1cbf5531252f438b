"""The central binaries' command lines: every problem at once (the selection's, the chosen
controllers', and those of every flag or variable that is set, whether or not its controller
runs), finite rates, and credentials the command line names that cannot be used as exit 2 in
every binary, the agent too. Nothing here reaches an API server: all of these end before."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from local_ccm import flags
from local_ccm.agent.options import AgentOptions
from local_ccm.cli import central, ipam, lifecycle, manager
from local_ccm.cli.agent import agent_main
from tests.support.kubeconfigs import BROKEN, broken_kubeconfig, unused_kubeconfig

Main = Callable[[Sequence[str], Mapping[str, str]], int]


def _agent(argv: Sequence[str], env: Mapping[str, str]) -> int:
    def never(options: AgentOptions) -> int:
        raise AssertionError("the agent ran with an unusable command line")

    return agent_main([*argv, "--node-name=n1"], env, run=never)


CENTRAL: dict[str, Main] = {
    "manager": manager.main,
    "node-lifecycle-controller": lifecycle.main,
    "node-ipam-controller": ipam.main,
}
EVERY: dict[str, Main] = {**CENTRAL, "local-ccm": _agent}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No kubeconfig anywhere (HOME is an empty directory), not in a cluster."""
    return {"HOME": str(tmp_path), "POD_NAMESPACE": "kube-system"}


@pytest.fixture
def credentialed(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Usable credentials in $KUBECONFIG (a server nothing reaches): only the flags' problems."""
    return {**env, "KUBECONFIG": str(unused_kubeconfig(tmp_path))}


def problems(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The problem lines of an exit 2 (the last line says where the usage is)."""
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines, err
    assert lines[-1].startswith("run '"), err
    assert "Traceback" not in out + err
    return lines[:-1]


# ---------------------------------------------------------------- every problem at once


def test_every_problem_is_listed_with_an_unknown_controller(
    capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    argv = ["--controllers=bogus,-nope", "--csr-deny=sometimes", "--leader-elect=perhaps"]
    assert manager.main(argv, env) == 2
    lines = problems(capsys)
    assert lines[0].startswith("invalid flag --controllers: unknown controller 'bogus'; known:")
    assert lines[1].startswith("invalid flag --controllers: unknown controller 'nope'; known:")
    assert lines[2:4] == [
        'invalid flag --csr-deny: invalid boolean "sometimes" (use true or false)',
        'invalid flag --leader-elect: invalid boolean "perhaps" (use true or false)',
    ]
    # and the credentials this environment lacks, in the same list
    assert len(lines) == 5
    assert lines[4].startswith("no Kubernetes credentials: ")


@pytest.mark.parametrize("binary", list(EVERY))
def test_a_bad_flag_and_an_unusable_kubeconfig_are_listed_together(
    binary: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    argv = [f"--kubeconfig={broken_kubeconfig(tmp_path, 'not-yaml')}", "--metrics-bind-address=0",
            "--v=many"]  # fmt: skip
    assert EVERY[binary](argv, env) == 2
    lines = problems(capsys)
    assert any(line.startswith("invalid flag --v") for line in lines), lines
    assert any(line.startswith("invalid flag --kubeconfig: ") for line in lines), lines
    assert len(lines) == 2, lines


def test_select_names_every_unknown_controller() -> None:
    known = {"a": True, "b": False}
    assert manager.select("x,a,-y", known) == [
        "unknown controller 'x'; known: a, b",
        "unknown controller 'y'; known: a, b",
    ]
    assert manager.select("-a", known) == ["no controller selected"]


# The default `*` runs node-lifecycle and node-ipam; the approver and the allocator are off.
UNSELECTED = [
    (["--controllers=node-lifecycle", "--cluster-cidr=bad"], {}, "--cluster-cidr"),
    (["--controllers=node-lifecycle", "--kube-api-qps=0"], {}, "--kube-api-qps"),
    (["--controllers=node-ipam", "--ping-count=-1"], {}, "--ping-count"),
    (["--lb-class=noprefix"], {}, "--lb-class"),
    (["--lb-service-cidrs=::/129"], {}, "--lb-service-cidrs"),
    (["--lb-kubevip-configmap=no-slash"], {}, "--lb-kubevip-configmap"),
    ([], {"LB_SERVICE_CIDRS": "::/129"}, "--lb-service-cidrs"),
    (["--controllers=node-lifecycle"], {"IPAM_CLUSTER_CIDR": "bad"}, "IPAM_CLUSTER_CIDR"),
]


@pytest.mark.parametrize(("argv", "extra", "named"), UNSELECTED)
def test_a_set_flag_of_a_controller_that_does_not_run_is_still_checked(
    argv: list[str],
    extra: dict[str, str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    credentialed: dict[str, str],
) -> None:
    assert manager.main(argv, {**credentialed, **extra}) == 2
    (line,) = problems(capsys)
    assert named in line


def test_flags_left_unset_bother_no_controller_that_does_not_run(env: dict[str, str]) -> None:
    """Only the chosen controllers load; the others' defaults are never a problem."""
    known = [make() for make in manager.CONTROLLERS.values()]
    fixed = central.fix_env(env, known)
    parsed = flags.parse(manager.manager_flags(), ["--controllers=node-lifecycle"], fixed[0])
    loaded = central.load(parsed, fixed, known, ("node-lifecycle",))
    assert isinstance(loaded, tuple)
    assert [c.name for c in loaded] == ["node-lifecycle"]


# ---------------------------------------------------------------- rates


@pytest.mark.parametrize("value", ["inf", "+Inf", "-inf", "infinity", "nan", "NaN", "-1", "0"])
@pytest.mark.parametrize("binary", ["manager", "node-ipam-controller"])
def test_a_rate_that_is_not_a_positive_finite_number_exits_2(
    binary: str, value: str, capsys: pytest.CaptureFixture[str], credentialed: dict[str, str]
) -> None:
    assert CENTRAL[binary]([f"--kube-api-qps={value}"], credentialed) == 2
    (line,) = problems(capsys)
    assert line.startswith("invalid flag --kube-api-qps:"), line


def test_a_rate_from_the_environment_is_checked_too(
    capsys: pytest.CaptureFixture[str], credentialed: dict[str, str]
) -> None:
    assert ipam.main([], {**credentialed, "IPAM_KUBE_API_QPS": "inf"}) == 2
    (line,) = problems(capsys)
    assert line.startswith("invalid environment variable IPAM_KUBE_API_QPS:"), line


def test_the_agent_has_no_rate_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert _agent(["--kube-api-qps=inf"], {}) == 2
    assert "unknown flag --kube-api-qps" in problems(capsys)[0]


# ---------------------------------------------------------------- credentials: exit 2


@pytest.mark.parametrize("kind", BROKEN)
@pytest.mark.parametrize("binary", list(EVERY))
def test_a_kubeconfig_that_cannot_be_used_exits_2_naming_the_flag(
    binary: str,
    kind: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
) -> None:
    argv = [f"--kubeconfig={broken_kubeconfig(tmp_path, kind)}", "--metrics-bind-address=0"]
    assert EVERY[binary](argv, env) == 2
    (line,) = problems(capsys)
    assert line.startswith("invalid flag --kubeconfig: "), line


@pytest.mark.parametrize("binary", list(EVERY))
def test_no_credentials_at_all_exit_2(
    binary: str, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    assert EVERY[binary](["--metrics-bind-address=0"], env) == 2
    (line,) = problems(capsys)
    assert line.startswith("no Kubernetes credentials: "), line


@pytest.mark.parametrize(
    ("binary", "argv"),
    [("node-ipam-controller", []), ("manager", ["--controllers=node-lifecycle"])],
)
def test_a_bad_apiserver_url_exits_2_naming_the_flag(
    binary: str, argv: list[str], capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    """In the manager --apiserver applies to every controller, the first one need not be IPAM."""
    assert CENTRAL[binary]([*argv, "--apiserver=ftp://x"], env) == 2
    (line,) = problems(capsys)
    assert line.startswith("invalid flag --apiserver: "), line
