"""The four binaries as processes, in the faults an operator meets first: SIGTERM while the
API server hangs during start-up, a listen address that cannot be bound, and run-once against a
hung API server. Each binary is its real console script, started like a Deployment or DaemonSet
would start it.
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.agent_process import UNPRIVILEGED, copy_kubeconfig, private_dir
from tests.support.controlplane import ControlPlane
from tests.support.hung import HungServer
from tests.support.processes import Child, free_port, spawn, tail
from tests.support.waiting import eventually

BIN = Path(sys.executable).parent
STOP_WITHIN = 2.0  # what an operator may expect of SIGTERM, start-up or not


@dataclass(frozen=True)
class Binary:
    name: str
    # Flags that keep the process off shared ports and away from anything but the API server.
    quiet: tuple[str, ...]

    def argv(self, kubeconfig: Path, *extra: str) -> list[str]:
        return [str(BIN / self.name), f"--kubeconfig={kubeconfig}", *self.quiet, *extra]


AGENT = Binary(
    "local-ccm",
    ("--node-name=fault-node", "--metrics-bind-address=0", "--health-probe-bind-address=0"),
)
LIFECYCLE = Binary(
    "node-lifecycle-controller",
    ("--metrics-bind-address=0", "--health-probe-bind-address=0", "--ping-count=0"),
)
IPAM = Binary(
    "node-ipam-controller", ("--metrics-bind-address=0", "--leader-elect-namespace=kube-system")
)
MANAGER = Binary(
    "local-ccm-controller-manager",
    ("--metrics-bind-address=0", "--health-probe-bind-address=0", "--ping-count=0"),
)
BINARIES = (AGENT, LIFECYCLE, IPAM, MANAGER)


def _start(binary: Binary, argv: Sequence[str], log: Path) -> Child:
    return spawn(binary.name, argv, log, env={"PATH": "/usr/bin:/bin"})


def _exit_code(child: Child, timeout: float) -> int | None:
    try:
        return child.proc.wait(timeout=timeout)
    except Exception:
        return None


# ------------------------------------------------------------------ SIGTERM during start-up
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: b.name)
def test_sigterm_while_the_start_up_check_hangs_exits_0_at_once(
    binary: Binary, tls: bool, test_artifacts: Path
) -> None:
    log = test_artifacts / f"{binary.name}.log"
    with HungServer(test_artifacts, tls=tls) as hung:
        argv = binary.argv(hung.kubeconfig)
        if binary is IPAM:
            argv.append(f"--health-probe-address=127.0.0.1:{free_port()}")
        child = _start(binary, argv, log)
        try:
            eventually(
                lambda: hung.requests > 0 or child.exited() is not None,
                timeout=20,
                message="the start-up permission check reached the hung API server",
            )
            assert child.exited() is None, tail(log)
            sent = time.monotonic()
            child.proc.send_signal(signal.SIGTERM)
            code = _exit_code(child, STOP_WITHIN)
            took = time.monotonic() - sent
        finally:
            child.stop(grace=5)
    assert code == 0, f"still running {took:.1f}s after SIGTERM (or exit {code}):\n{tail(log)}"
    assert took <= STOP_WITHIN
    assert "Traceback" not in tail(log)


# ------------------------------------------------------------------ run-once's deadline
RUN_ONCE_DEADLINE = 5.0
SLACK = 2.0
# The real console entry point with a shorter run-once deadline, so the test does not take the
# product's full minute; everything else (flags, client, timeouts, retries) is the product's.
SHORT_DEADLINE_AGENT = (
    "import sys; from local_ccm.agent import loop; "
    f"loop.RUN_ONCE_DEADLINE = {RUN_ONCE_DEADLINE}; "
    "from local_ccm.cli.agent import agent_main; sys.exit(agent_main())"
)


@pytest.mark.timeout(60)
def test_run_once_against_a_hung_api_server_ends_by_its_deadline(test_artifacts: Path) -> None:
    log = test_artifacts / "local-ccm.log"
    with HungServer(test_artifacts) as hung:
        argv = [sys.executable, "-c", SHORT_DEADLINE_AGENT, f"--kubeconfig={hung.kubeconfig}",
                *AGENT.quiet, "--run-once"]  # fmt: skip
        child = _start(AGENT, argv, log)
        try:
            eventually(lambda: hung.requests > 0, timeout=20, message="the first request")
            started = time.monotonic()  # later than the process start: a generous bound
            code = _exit_code(child, RUN_ONCE_DEADLINE + SLACK + 10)
            took = time.monotonic() - started
        finally:
            child.stop(grace=5)
    assert code == 1, tail(log)
    assert took <= RUN_ONCE_DEADLINE + SLACK, f"exited {took:.1f}s after its first request"
    assert f"no final state within {RUN_ONCE_DEADLINE:.0f}s" in tail(log)
    assert "Traceback" not in tail(log)


# ------------------------------------------------------------------ listen addresses
FOREIGN = "192.0.2.55:8080"  # TEST-NET-1: on no interface here, so bind() fails; never sent to
LISTEN_FLAGS = [
    (AGENT, "metrics-bind-address", "health-probe-bind-address"),
    (AGENT, "health-probe-bind-address", "metrics-bind-address"),
    (LIFECYCLE, "metrics-bind-address", "health-probe-bind-address"),
    (LIFECYCLE, "health-probe-bind-address", "metrics-bind-address"),
    (IPAM, "webserver-bind-address", None),
    (IPAM, "health-probe-address", None),
    (IPAM, "metrics-bind-address", "webserver-bind-address"),
    (MANAGER, "metrics-bind-address", "health-probe-bind-address"),
    (MANAGER, "health-probe-bind-address", "metrics-bind-address"),
]


def _run_to_exit(binary: Binary, argv: Sequence[str], log: Path) -> tuple[int, str]:
    """Start the binary, wait for it to exit by itself; its exit code and its log's tail."""
    child = _start(binary, argv, log)
    try:
        code = eventually(child.exited, timeout=30, message=f"{binary.name} exits")
    finally:
        child.stop(grace=5)
    return code, tail(log)


def _listen_argv(
    binary: Binary, kubeconfig: Path, flag: str, other: str | None, address: str
) -> list[str]:
    """The binary with `--flag=address` and every other listen flag on a free port."""
    argv = binary.argv(kubeconfig)
    argv = [a for a in argv if not a.startswith((f"--{flag}=", f"--{other}="))]
    if other is not None:
        argv.append(f"--{other}=127.0.0.1:{free_port()}")
    return [*argv, f"--{flag}={address}"]


@pytest.mark.parametrize("case", ["busy", "foreign"])
@pytest.mark.parametrize(
    ("binary", "flag", "other"), LISTEN_FLAGS, ids=lambda v: getattr(v, "name", v)
)
def test_a_listen_address_that_cannot_be_bound_is_one_line_and_exit_2(
    *,
    binary: Binary,
    flag: str,
    other: str | None,
    case: str,
    control_plane: ControlPlane,
    test_artifacts: Path,
) -> None:
    log = test_artifacts / f"{binary.name}.log"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}" if case == "busy" else FOREIGN
        reason = "address already in use" if case == "busy" else "address not available"
        argv = _listen_argv(binary, control_plane.admin_kubeconfig, flag, other, address)
        code, output = _run_to_exit(binary, argv, log)
    assert code == 2, output
    assert f"--{flag}={address}: {reason}" in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize(
    ("binary", "flag", "other"),
    [LISTEN_FLAGS[0], LISTEN_FLAGS[2], LISTEN_FLAGS[4]],
    ids=lambda v: getattr(v, "name", v),
)
def test_a_privileged_port_without_the_capability_is_one_line_and_exit_2(
    *,
    binary: Binary,
    flag: str,
    other: str | None,
    control_plane: ControlPlane,
    test_artifacts: Path,
) -> None:
    """As the images run: a non-root uid without capabilities."""
    kubeconfig = copy_kubeconfig(private_dir(test_artifacts), control_plane.admin_kubeconfig)
    address = "127.0.0.1:80"
    argv = _listen_argv(binary, kubeconfig, flag, other, address)
    log = test_artifacts / f"{binary.name}.log"
    code, output = _run_to_exit(binary, [*UNPRIVILEGED, *argv], log)
    assert code == 2, output
    assert f"--{flag}={address}: permission denied" in output, output
    assert "Traceback" not in output, output
