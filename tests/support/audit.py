"""A dedicated control plane with the apiserver audit log on, for "no request" / "who did what"
checks, and stopping/restarting its apiserver (A20).

The shared session plane runs without auditing (tests/support/fixtures.py starts it with
``Options(audit=False)``); this module starts a second etcd + kube-apiserver per test module
with ``Options(audit=True)`` (policy: every request at ``Metadata`` level), so nothing shared
is changed (see :func:`audited_plane`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane, Options, start_control_plane
from tests.support.fixtures import run_state
from tests.support.processes import Child, spawn, tail
from tests.support.waiting import eventually

APISERVER = "kube-apiserver"
READY_TIMEOUT = 90.0


@dataclass(frozen=True)
class AuditEvent:
    """One audit event (stage ``RequestReceived`` unless stated)."""

    raw: dict[str, Any]

    @property
    def verb(self) -> str:
        return str(self.raw.get("verb", ""))

    @property
    def user(self) -> str:
        return str((self.raw.get("user") or {}).get("username", ""))

    @property
    def user_agent(self) -> str:
        return str(self.raw.get("userAgent", ""))

    @property
    def resource(self) -> str:
        ref = self.raw.get("objectRef") or {}
        sub = ref.get("subresource")
        return f"{ref.get('resource', '')}/{sub}" if sub else str(ref.get("resource", ""))

    @property
    def name(self) -> str:
        return str((self.raw.get("objectRef") or {}).get("name", ""))

    @property
    def received(self) -> datetime:
        return datetime.fromisoformat(
            str(self.raw["requestReceivedTimestamp"]).replace("Z", "+00:00")
        )

    @property
    def code(self) -> int:
        return int((self.raw.get("responseStatus") or {}).get("code", 0))

    def __str__(self) -> str:
        return f"{self.received:%H:%M:%S.%f} {self.user} {self.verb} {self.resource} {self.name}"


class AuditLog:
    """Reads the audit log of one plane (JSON lines, appended by the apiserver)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self, stage: str = "RequestReceived") -> list[AuditEvent]:
        if not self.path.exists():
            return []
        found = []
        with self.path.open() as f:
            for line in f:
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line still being written
                if raw.get("stage") == stage:
                    found.append(AuditEvent(raw))
        return found

    def requests(
        self,
        *,
        user: str,
        since: datetime | None = None,
        until: datetime | None = None,
        stage: str = "RequestReceived",
    ) -> list[AuditEvent]:
        """Requests made by ``user`` received in [since, until)."""
        return [
            e
            for e in self.events(stage)
            if e.user == user
            and (since is None or e.received >= since)
            and (until is None or e.received < until)
        ]


def audit_log(plane: ControlPlane) -> AuditLog:
    return AuditLog(plane.logs_dir / "audit.log")


def service_account_user(namespace: str, sa: str) -> str:
    return f"system:serviceaccount:{namespace}:{sa}"


# ------------------------------------------------------------------ the plane
@contextlib.contextmanager
def audited_plane(config: pytest.Config, binaries: Binaries) -> Iterator[ControlPlane]:
    """A second etcd + kube-apiserver with auditing, for the tests of one module::

    @pytest.fixture(scope="module")
    def plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
        with audited_plane(request.config, binaries) as started:
            yield started
    """
    state = run_state(config)
    opts = Options(
        run_id=state.run_id,
        artifacts=state.artifacts,
        fallback_tmp=Path(tempfile.gettempdir()),
        plane=f"audited-plane-{secrets.token_hex(3)}",
        keep=state.keep_control_plane,
        audit=True,
    )
    plane = start_control_plane(binaries, opts)
    try:
        yield plane
    finally:
        plane.stop()


def _apiserver(plane: ControlPlane) -> tuple[int, Child]:
    for i, child in enumerate(plane.children):
        if child.name == APISERVER:
            return i, child
    raise AssertionError(f"no {APISERVER} among {[c.name for c in plane.children]}")


def stop_apiserver(plane: ControlPlane) -> None:
    """Stop the plane's apiserver (SIGTERM, then SIGKILL); etcd keeps running."""
    _, child = _apiserver(plane)
    child.stop(grace=20)


def start_apiserver(plane: ControlPlane) -> None:
    """Start the apiserver again with the same command line; wait until ``/readyz`` is ok."""
    i, old = _apiserver(plane)
    if old.exited() is None:
        raise AssertionError("the apiserver is still running")
    args = [str(a) for a in old.proc.args]  # type: ignore[union-attr]
    if "--" in args[:5]:  # drop the `setpriv --pdeathsig TERM --` prefix; spawn adds it again
        args = args[args.index("--") + 1 :]
    child = spawn(APISERVER, args, old.log_path, die_with_parent=not plane.options.keep)
    plane.children[i] = child

    def ready() -> bool | str:
        if child.exited() is not None:
            return "exited"
        return plane.http.request("GET", "/readyz").status == 200

    outcome = eventually(ready, timeout=READY_TIMEOUT, interval=0.2, message="apiserver restart")
    if outcome == "exited":
        raise AssertionError(f"{APISERVER} exited on restart:\n{tail(child.log_path, 40)}")
