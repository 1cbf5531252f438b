"""The three binaries as processes, in the faults an operator meets first: SIGTERM while the
API server hangs during start-up, a listen address that cannot be bound, and run-once against a
hung API server. Each binary is its real console script, started like a Deployment or DaemonSet
would start it.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

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
BINARIES = (AGENT, LIFECYCLE, IPAM)


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
    "import sys; from local_ccm.agent import tasks; "
    f"tasks.RUN_ONCE_DEADLINE = {RUN_ONCE_DEADLINE}; "
    "from local_ccm.cli import agent_main; sys.exit(agent_main())"
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
