"""Dedicated control planes: a module's own etcd + kube-apiserver.

For tests that must not share the session plane: stopping and restarting the API server
(`stop_apiserver`, `restart_apiserver`), a cluster without a CRD, or a CRD replaced by another
version, the scale runs of the bench tier (`scale=True` turns request throttling off), and
the deploy checks at the admission policy's oldest Kubernetes (`apiserver=`).
The plane is started exactly as the session one is (tests/support/fixtures.py) and stopped by
the fixture that started it; its logs go to `<artifacts>/<run-id>/<name>-<hex>/`.
"""

from __future__ import annotations

import secrets
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane, Options, start_control_plane
from tests.support.fixtures import run_state
from tests.support.processes import Child, StartupError, spawn, tail

APISERVER = "kube-apiserver"
READY_TIMEOUT = 90.0


@contextmanager
def dedicated_plane(
    config: pytest.Config,
    binaries: Binaries,
    name: str,
    *,
    scale: bool = False,
    audit: bool = False,
    apiserver: str = APISERVER,
) -> Iterator[ControlPlane]:
    """Start a plane of its own for the duration of the `with` block.

    `audit` turns the apiserver's audit log on (level Metadata; tests/support/audit.py reads
    it). `apiserver` names the ensured kube-apiserver to run (recipes.APISERVER_POLICY_MINIMUM
    for the admission policy's oldest version); the plane checks `/version` against its pin.
    """
    state = run_state(config)
    opts = Options(
        run_id=state.run_id,
        artifacts=state.artifacts,
        fallback_tmp=Path(tempfile.gettempdir()),
        plane=f"{name}-{secrets.token_hex(3)}",
        keep=state.keep_control_plane,
        scale=scale,
        audit=audit,
        apiserver=apiserver,
    )
    plane = start_control_plane(binaries, opts)
    try:
        yield plane
    finally:
        plane.stop()


def _apiserver(plane: ControlPlane) -> tuple[int, Child]:
    for index, child in enumerate(plane.children):
        if child.name == APISERVER:
            return index, child
    raise AssertionError(f"no {APISERVER} among {[c.name for c in plane.children]}")


def _command(child: Child) -> list[str]:
    """The apiserver's own argv, without the `setpriv ... --` prefix spawn() added."""
    args = [str(a) for a in child.proc.args]  # type: ignore[union-attr]
    return args[args.index("--") + 1 :] if "--" in args else args


def stop_apiserver(plane: ControlPlane) -> list[str]:
    """Kill the API server at once (SIGKILL: no graceful drain) and reap it.

    Returns its command line for `restart_apiserver`; etcd and the PKI stay as they are.
    """
    _, child = _apiserver(plane)
    command = _command(child)
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait(timeout=30)
    return command


def restart_apiserver(plane: ControlPlane, command: list[str]) -> None:
    """Start the API server again with the same flags (port, certificates, etcd) and wait
    until `/readyz` answers `ok`; the new child replaces the old one in `plane.children`."""
    index, old = _apiserver(plane)
    child = spawn(APISERVER, command, old.log_path, die_with_parent=not plane.options.keep)
    plane.children[index] = child
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if child.exited() is not None:
            raise StartupError(f"{APISERVER} exited {child.exited()}:\n{tail(child.log_path)}")
        try:
            resp = plane.http.request("GET", "/readyz")
            if resp.status == 200 and resp.text.strip() == "ok":
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise StartupError(f"{APISERVER} not ready again:\n{tail(child.log_path)}")
        time.sleep(0.2)
