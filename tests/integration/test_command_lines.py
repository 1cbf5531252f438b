"""The binaries as processes, given command lines an operator gets wrong: each exits 2 before
any API request, every problem on its own line of stderr, no traceback. Each binary is its real
console script; the environment has no credentials unless a case gives a kubeconfig, so nothing
here could reach an API server even by mistake.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.kubeconfigs import BROKEN, broken_kubeconfig, unused_kubeconfig

BIN = Path(sys.executable).parent
MANAGER, LIFECYCLE, IPAM, AGENT = (
    "local-ccm-controller-manager", "node-lifecycle-controller", "node-ipam-controller",
    "local-ccm",
)  # fmt: skip
# What each binary needs besides the case's flags to get as far as its credentials.
BASE = {MANAGER: (), LIFECYCLE: (), IPAM: ("--leader-elect-namespace=kube-system",),
        AGENT: ("--node-name=n1",)}  # fmt: skip


def run(
    binary: str, argv: Sequence[str], home: Path, env: Mapping[str, str] | None = None
) -> tuple[int, list[str]]:
    """Exit code and stderr lines of one run that must end by itself."""
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(home), **(env or {})}
    done = subprocess.run(
        [str(BIN / binary), *BASE[binary], *argv], env=environment, capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.returncode, done.stderr.splitlines()


def usable(home: Path) -> dict[str, str]:
    """Credentials in $KUBECONFIG for a server nothing reaches: only the flags' problems."""
    return {"KUBECONFIG": str(unused_kubeconfig(home))}


def problems(lines: list[str], binary: str) -> list[str]:
    assert lines, "nothing on stderr"
    assert lines[-1] == f"run '{binary} --help' for usage", lines
    return lines[:-1]


def test_an_unknown_controller_and_every_other_problem_in_one_run(tmp_path: Path) -> None:
    argv = ["--controllers=bogus", "--csr-deny=sometimes", "--leader-elect=perhaps"]
    code, lines = run(MANAGER, argv, tmp_path)
    assert code == 2, lines
    found = problems(lines, MANAGER)
    assert len(found) == 4, found
    assert found[0].startswith("invalid flag --controllers: unknown controller 'bogus'")
    assert found[1].startswith("invalid flag --csr-deny: ")
    assert found[2].startswith("invalid flag --leader-elect: ")
    assert found[3].startswith("no Kubernetes credentials: ")  # in the same list


def test_repeated_controllers_flags_add_up_as_in_kube_controller_manager(tmp_path: Path) -> None:
    """kube-controller-manager --controllers=foo --controllers=bar,baz names all three unknown
    controllers: its flag is a string slice, whose repeats add up."""
    argv = ["--controllers=bogus", "--controllers=nope,node-ipam"]
    code, lines = run(MANAGER, argv, tmp_path, usable(tmp_path))
    assert code == 2, lines
    assert [line.split(";")[0] for line in problems(lines, MANAGER)] == [
        "invalid flag --controllers: unknown controller 'bogus'",
        "invalid flag --controllers: unknown controller 'nope'",
    ]


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--controllers=node-lifecycle", "--cluster-cidr=bad"], {}, "--cluster-cidr"),
        (["--lb-class=noprefix"], {}, "--lb-class"),
        (["--lb-service-cidrs=::/129"], {}, "--lb-service-cidrs"),
        ([], {"LB_CLASS": "noprefix"}, "--lb-class"),
        (["--controllers=node-ipam"], {"CSR_DENY": "sometimes"}, "CSR_DENY"),
    ],
    ids=["cluster-cidr", "lb-class", "lb-service-cidrs", "LB_CLASS", "CSR_DENY"],
)
def test_a_set_flag_of_a_controller_that_is_off_exits_2(
    argv: list[str], env: dict[str, str], named: str, tmp_path: Path
) -> None:
    """`*` runs node-lifecycle and node-ipam: the approver and the allocator are off."""
    code, lines = run(MANAGER, argv, tmp_path, {**env, **usable(tmp_path)})
    assert code == 2, lines
    (problem,) = problems(lines, MANAGER)
    assert named in problem


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-5"])
@pytest.mark.parametrize("binary", [MANAGER, IPAM])
def test_a_rate_that_is_not_a_positive_finite_number_exits_2(
    binary: str, value: str, tmp_path: Path
) -> None:
    code, lines = run(binary, [f"--kube-api-qps={value}"], tmp_path, usable(tmp_path))
    assert code == 2, lines
    (problem,) = problems(lines, binary)
    assert problem.startswith("invalid flag --kube-api-qps: "), problem


def test_the_agent_has_no_rate_to_set(tmp_path: Path) -> None:
    code, lines = run(AGENT, ["--kube-api-qps=inf"], tmp_path)
    assert code == 2, lines
    assert problems(lines, AGENT)[0].startswith("unknown flag --kube-api-qps")


@pytest.mark.parametrize("kind", BROKEN)
@pytest.mark.parametrize("binary", [MANAGER, LIFECYCLE, IPAM, AGENT])
def test_a_kubeconfig_that_cannot_be_used_exits_2_in_every_binary(
    binary: str, kind: str, tmp_path: Path
) -> None:
    kubeconfig = broken_kubeconfig(tmp_path, kind)
    code, lines = run(binary, [f"--kubeconfig={kubeconfig}"], tmp_path)
    assert code == 2, lines
    (problem,) = problems(lines, binary)
    assert problem.startswith("invalid flag --kubeconfig: "), problem
