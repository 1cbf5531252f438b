"""The four binaries as processes, in the faults an operator meets first: SIGTERM while the
API server hangs during start-up (the permission check, a Lease attempt, the informers), a
listen address that cannot be bound, and run-once against a hung API server. Each binary is its
real console script, started like a Deployment or DaemonSet would start it.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_process import UNPRIVILEGED, copy_kubeconfig, private_dir
from tests.support.controlplane import ControlPlane
from tests.support.gate import ApiGate, gated_kubeconfig
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
SETTLE = 1.0  # how long a binary waits on the hang before the signal


def _start(binary: Binary, argv: Sequence[str], log: Path) -> Child:
    return spawn(binary.name, argv, log, env={"PATH": "/usr/bin:/bin"})


def _exit_code(child: Child, timeout: float) -> int | None:
    try:
        return child.proc.wait(timeout=timeout)
    except Exception:
        return None


# ------------------------------------------------------------------ SIGTERM during start-up
def _manager_with(*controllers: str) -> Binary:
    return Binary(MANAGER.name, (*MANAGER.quiet, f"--controllers={','.join(controllers)}"))


# The manager with every controller set: `*` (the controllers on by default), all four named,
# and the two that no other binary runs, alone.
MANAGERS = (
    MANAGER,
    _manager_with("node-lifecycle", "node-ipam", "kubelet-serving-approver", "service-lb-ipam"),
    _manager_with("kubelet-serving-approver"),
    _manager_with("service-lb-ipam"),
)
HANGS = {  # HungServer's arguments: where the first request hangs
    "http": {"tls": False},  # waiting for the answer
    "https": {"tls": True},  # waiting for the answer, after the handshake
    "tls-handshake": {"tls": True, "handshake": False},  # inside the TLS handshake
}
SIGNALS = [
    *((hang, signal.SIGTERM) for hang in HANGS),
    ("tls-handshake", signal.SIGINT),
]


def _binary_id(binary: Binary) -> str:
    chosen = [a.split("=", 1)[1] for a in binary.quiet if a.startswith("--controllers=")]
    return f"{binary.name}[{chosen[0]}]" if chosen else binary.name


@pytest.mark.parametrize(("hang", "sig"), SIGNALS, ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("binary", [AGENT, LIFECYCLE, IPAM, *MANAGERS], ids=_binary_id)
def test_a_signal_while_the_start_up_check_hangs_exits_0_at_once(
    binary: Binary, hang: str, sig: signal.Signals, test_artifacts: Path
) -> None:
    """SIGTERM (or SIGINT) about a second after start, while the first request hangs: in the
    API server's silence, in the TLS handshake, or before the TCP connection is even read."""
    log = test_artifacts / f"{binary.name}.log"
    with HungServer(test_artifacts, **HANGS[hang]) as hung:
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
            time.sleep(SETTLE)  # well inside the request's own timeout
            assert child.exited() is None, tail(log)
            sent = time.monotonic()
            child.proc.send_signal(sig)
            code = _exit_code(child, STOP_WITHIN + 10)
            took = time.monotonic() - sent
        finally:
            child.stop(grace=5)
    assert code == 0, f"exit {code} {took:.1f}s after {sig.name}:\n{tail(log)}"
    assert took <= STOP_WITHIN, f"exit 0 only {took:.1f}s after {sig.name}:\n{tail(log)}"
    assert "Traceback" not in tail(log)


# ------------------------------------------------------------------ SIGTERM in later steps
OTHER = "another-holder"


def _held_lease(kube: Client, namespace: str, name: str) -> None:
    """A Lease another holder renewed just now, for an hour: a candidate stands by."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": OTHER, "leaseDurationSeconds": 3600, "acquireTime": now,
            "renewTime": now}  # fmt: skip
    kube.create(r.LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec},
                namespace=namespace)  # fmt: skip


def _gated_argv(binary: Binary, kubeconfig: Path, *extra: str) -> list[str]:
    argv = binary.argv(kubeconfig, *extra)
    return [*argv, f"--health-probe-address=127.0.0.1:{free_port()}"] if binary is IPAM else argv


@contextlib.contextmanager
def _gated(control_plane: ControlPlane, directory: Path) -> Iterator[tuple[ApiGate, Path]]:
    """A gate in front of the test apiserver, forwarding, and an admin kubeconfig through it."""
    api = urlsplit(control_plane.api_url)
    assert api.hostname
    assert api.port
    with ApiGate((api.hostname, api.port), mode="forward") as gate:
        url, admin = control_plane.api_url, control_plane.admin_kubeconfig
        yield gate, gated_kubeconfig(admin, url, gate, directory)


def _hang_then_signal(gate: ApiGate, child: Child) -> tuple[int | None, float]:
    """The API server stops answering (every connection cut, new ones hang); once the binary's
    next request hangs, SIGTERM. Its exit code and how long it took."""
    gate.mode = "hang"
    seen = gate.connections
    gate.cut()
    eventually(lambda: gate.connections > seen, timeout=10, message="the next request hangs")
    time.sleep(SETTLE)
    assert child.exited() is None, tail(child.log_path)
    sent = time.monotonic()
    child.proc.send_signal(signal.SIGTERM)
    code = _exit_code(child, STOP_WITHIN + 10)
    return code, time.monotonic() - sent


@pytest.mark.parametrize("binary", [LIFECYCLE, IPAM, MANAGER], ids=_binary_id)
def test_sigterm_while_a_lease_attempt_hangs_exits_0_at_once(
    binary: Binary,
    control_plane: ControlPlane,
    kube: Client,
    test_namespace: str,
    test_artifacts: Path,
) -> None:
    """A candidate standing by (another holder's Lease) whose next attempt meets an API server
    that stopped answering: the attempt is abandoned, not waited for until its deadline."""
    _held_lease(kube, test_namespace, "held")
    namespace_flag = "leader-elect-namespace" if binary is IPAM else "namespace"
    with _gated(control_plane, test_artifacts) as (gate, kubeconfig):
        argv = _gated_argv(binary, kubeconfig, f"--{namespace_flag}={test_namespace}",
                           "--leader-elect-resource-name=held")  # fmt: skip
        child = _start(binary, argv, test_artifacts / f"{binary.name}.log")
        try:
            eventually(lambda: "campaigning for the lease" in tail(child.log_path), timeout=20,
                       message="the binary campaigns")  # fmt: skip
            code, took = _hang_then_signal(gate, child)
        finally:
            child.stop(grace=5)
    assert code == 0, f"exit {code} {took:.1f}s after SIGTERM:\n{tail(child.log_path)}"
    assert took <= STOP_WITHIN, f"exit 0 only {took:.1f}s after SIGTERM"
    assert "became leader" not in tail(child.log_path, 400)
    assert "Traceback" not in tail(child.log_path, 400)


@pytest.mark.parametrize("elected", [False, True], ids=["no-election", "leader"])
@pytest.mark.parametrize("binary", [LIFECYCLE, IPAM, MANAGER], ids=_binary_id)
def test_sigterm_while_the_informers_hang_exits_0_at_once(
    binary: Binary,
    elected: bool,
    control_plane: ControlPlane,
    test_namespace: str,
    test_artifacts: Path,
) -> None:
    """Started (and leading, or with --leader-elect=false), then the API server stops
    answering: the informers' next list or watch hangs, and so would a leader's release of its
    Lease. SIGTERM still ends the binary at once."""
    namespace_flag = "leader-elect-namespace" if binary is IPAM else "namespace"
    flag = f"--{namespace_flag}={test_namespace}" if elected else "--leader-elect=false"
    started = "became leader" if elected else "INFO local_ccm.cli running"
    with _gated(control_plane, test_artifacts) as (gate, kubeconfig):
        child = _start(binary, _gated_argv(binary, kubeconfig, flag),
                       test_artifacts / f"{binary.name}.log")  # fmt: skip
        try:
            eventually(lambda: started in tail(child.log_path), timeout=20,
                       message=f"the log says {started!r}")  # fmt: skip
            time.sleep(SETTLE)  # the informers list and watch
            code, took = _hang_then_signal(gate, child)
        finally:
            child.stop(grace=5)
    assert code == 0, f"exit {code} {took:.1f}s after SIGTERM:\n{tail(child.log_path)}"
    assert took <= STOP_WITHIN, f"exit 0 only {took:.1f}s after SIGTERM"
    assert "Traceback" not in tail(child.log_path, 400)


# ------------------------------------------------------------------ run-once's deadline
RUN_ONCE_DEADLINE = 5.0
SLACK = 2.0
# The real console entry point with a shorter run-once deadline, so the test does not take the
# product's full minute; everything else (flags, client, timeouts, retries) is the product's.
SHORT_DEADLINE_AGENT = (
    "import sys; from local_ccm.agent import run; "
    f"run.RUN_ONCE_DEADLINE = {RUN_ONCE_DEADLINE}; "
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
        eventually(lambda: child.exited() is not None, timeout=30,
                   message=f"{binary.name} exits")  # fmt: skip
        code = child.exited()
        assert code is not None
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
