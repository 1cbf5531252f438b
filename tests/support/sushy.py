"""The test BMC: sushy-tools' Redfish emulator (the one OpenStack Ironic and Metal3 test
against), run for real on loopback, HTTPS and Basic auth, one emulator holding many Systems.

What sushy-tools 2.2.0 does, read from its source (``sushy_tools/emulator``):

- **The fake systems driver** (``resources/systems/fakedriver.py``) serves the Systems of
  ``SUSHY_EMULATOR_FAKE_SYSTEMS`` from a SQLite file, ``<state dir>/fakedriver.sqlite`` (table
  ``cache``: pickled UUID -> pickled dict), which it reads on every request. It has no API to
  add or remove a System, so `SushyEmulator` writes that table: a removed System's path
  answers 404 at once, an added one is served at once. On start the driver re-adds every
  configured System missing from the file, so `SushyEmulator.start` writes the configuration
  from the Systems it knows.
- **Power actions take effect later**, as on hardware: ``ComputerSystem.Reset`` records the
  new state with an apply time 1 to 11 s ahead (``random.randint(1, 11)`` on top of the whole
  second), applied when the System is next read. `SushyEmulator.set_power` changes the state
  in the file instead, at once (power changed behind the controller's back).
- **Basic auth** (``SUSHY_EMULATOR_AUTH_FILE``): an htpasswd file of bcrypt hashes only, read on
  every request, so rotating the password is rewriting the file; the service root
  (``/redfish/v1/``) is open. The hashes here use bcrypt's lowest cost, so 500 Systems polled
  do not spend the machine on bcrypt.
- **No sessions**: there is no SessionService; ``POST /redfish/v1/SessionService/Sessions`` is
  404 with credentials and 401 without.
- **No keep-alive**: the server (werkzeug's development server) answers every request with
  ``Connection: close``. tests/support/fakebmc.py has a server that keeps connections.
- Starting it costs about 0.4 s; its first authenticated request writes every configured
  System into the file (about 3 s for 500), which `start_sushy` does before returning.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pickle
import sqlite3
import ssl
import sys
import time
import uuid
from base64 import b64encode
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import pki, tiers
from tests.support.fixtures import run_state
from tests.support.processes import Child, StartupError, free_port, spawn, tail

EMULATOR = Path(sys.executable).parent / "sushy-emulator"
USERNAME = "admin"
PASSWORD = "test-bmc-password"
START_TIMEOUT = 30.0
BCRYPT_ROUNDS = 4  # bcrypt's minimum: each request checks the password
SYSTEM_NAMESPACE = uuid.UUID("5b0c7a52-3b8e-4f57-9d2a-0c6f5e0b3f10")


def system_uuid(name: str) -> str:
    """The System id of ``name``: stable, so an address can be written before the emulator
    runs."""
    return str(uuid.uuid5(SYSTEM_NAMESPACE, name))


def emulator_or_skip(config: pytest.Config, executable: Path = EMULATOR) -> Path:
    """The venv's sushy-emulator; a missing one fails under CI=true (never a silent skip)."""
    strict = tiers.strict_tiers(bool(config.getoption("--require-all-tiers")), os.environ.get("CI"))
    return require_emulator(executable, strict=strict)


def require_emulator(executable: Path, *, strict: bool) -> Path:
    if executable.is_file():
        return executable
    reason = f"{executable} is missing: install the test extras (make setup)"
    if strict:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


class SushyEmulator:
    """One running emulator and the Systems it holds (names -> UUIDs)."""

    def __init__(self, directory: Path, names: list[str], *, executable: Path = EMULATOR) -> None:
        self.directory = directory
        self.executable = executable
        self.port = free_port()
        now = datetime.now(UTC)
        self._ca = pki.new_ca("local-ccm-test-bmc-ca", now)
        self._serving = pki.issue_serving(self._ca, now)
        self.ca_pem = self._ca.cert_pem.decode()
        self.username, self.password = USERNAME, PASSWORD
        self.systems = {name: system_uuid(name) for name in names}
        self.power_on_start = dict.fromkeys(names, "On")
        self.child: Child | None = None
        self.state_dir = directory / "state"
        self.log_path = directory / "sushy-emulator.log"
        self._write_files()

    # ---------------------------------------------------------------- addresses

    def system_path(self, name: str) -> str:
        return f"/redfish/v1/Systems/{self.systems[name]}"

    def address(self, name: str) -> str:
        """The BMC address of ``name``'s System, as a BareMetalHost would write it."""
        return f"redfish://127.0.0.1:{self.port}{self.system_path(name)}"

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- the process

    def start(self) -> None:
        """Start (or restart, on the same port and state) and wait until it answers."""
        if self.child is not None and self.child.exited() is None:
            return
        self._write_config()
        args = [str(self.executable), "--config", str(self.directory / "emulator.conf")]
        self.child = spawn("sushy-emulator", args, self.log_path)
        self._wait_ready()

    def stop(self) -> None:
        """Stop the emulator: its port refuses connections (a BMC that went down)."""
        if self.child is not None:
            self.child.stop(grace=5.0)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        assert self.child is not None
        while time.monotonic() < deadline:
            if self.child.exited() is not None:
                raise StartupError(f"sushy-emulator exited:\n{tail(self.log_path)}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.request("GET", "/redfish/v1/Systems", timeout=10.0)[0] == 200:
                    return  # the first authenticated request also loaded every System
            time.sleep(0.05)
        raise StartupError(f"sushy-emulator did not answer in {START_TIMEOUT}s:\n"
                           f"{tail(self.log_path)}")  # fmt: skip

    # ---------------------------------------------------------------- behind the controller's back

    def set_password(self, password: str) -> None:
        """Rotate the BMC password; the next request is checked against the new one."""
        self.password = password
        self._write_htpasswd()

    def set_power(self, name: str, state: str) -> None:
        """Power ``name`` On or Off at once, in the driver's state (a pending action is dropped)."""
        with self._state() as db:
            key, system = self._row(db, name)
            system.update(power_state=state, pending_power=None)
            db.execute("UPDATE cache SET value = ? WHERE key = ?", (pickle.dumps(system), key))

    def remove_system(self, name: str) -> None:
        """Remove ``name``'s System: its path answers 404 from now on."""
        with self._state() as db:
            key, _ = self._row(db, name)
            db.execute("DELETE FROM cache WHERE key = ?", (key,))
        self.power_on_start.pop(name)

    def add_system(self, name: str, power_state: str = "On") -> str:
        """Add a System while the emulator runs; its address is served at once."""
        self.systems[name] = system_uuid(name)
        self.power_on_start[name] = power_state
        with self._state() as db:
            db.execute(
                "INSERT OR REPLACE INTO cache VALUES (?, ?)",
                (pickle.dumps(self.systems[name]), pickle.dumps(self._system(name, power_state))),
            )
        return self.address(name)

    def reset(self, name: str, reset_type: str) -> int:
        """POST ``reset_type`` through the emulator's own Redfish API; takes effect 1-11 s later."""
        path = f"{self.system_path(name)}/Actions/ComputerSystem.Reset"
        return self.request("POST", path, {"ResetType": reset_type})[0]

    def power_state(self, name: str) -> str:
        """What the emulator answers now (reading applies a pending action that is due)."""
        status, doc = self.request("GET", self.system_path(name))
        assert status == 200, (status, doc)
        return str(doc["PowerState"])

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 10.0
    ) -> tuple[int, Any]:
        """One request with the current credentials: (status, parsed JSON or None)."""
        context = ssl.create_default_context(cadata=self.ca_pem)
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=timeout)
        token = b64encode(f"{self.username}:{self.password}".encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        return response.status, json.loads(raw) if raw.strip() else None

    # ---------------------------------------------------------------- files

    def _write_files(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(exist_ok=True)
        (self.directory / "ca.crt").write_bytes(self._ca.cert_pem)
        (self.directory / "tls.crt").write_bytes(self._serving.cert_pem)
        key = self.directory / "tls.key"
        key.write_bytes(self._serving.key_pem)
        key.chmod(0o600)
        self._write_htpasswd()

    def _write_htpasswd(self) -> None:
        import bcrypt  # noqa: PLC0415 (sushy-tools brings it; a missing one is reported)

        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=BCRYPT_ROUNDS))
        path = self.directory / "htpasswd"
        spare = path.with_suffix(".new")
        spare.write_text(f"{self.username}:{digest.decode()}\n")
        spare.replace(path)  # the emulator reads it on every request: never half written

    def _write_config(self) -> None:
        systems = [self._system(name, state) for name, state in self.power_on_start.items()]
        d = self.directory
        config = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(d / "tls.crt"),
            "SUSHY_EMULATOR_SSL_KEY": str(d / "tls.key"),
            "SUSHY_EMULATOR_AUTH_FILE": str(d / "htpasswd"),
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_STATE_DIR": str(self.state_dir),
            "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
        }
        # Flask reads the configuration as Python (config.from_pyfile).
        text = "".join(f"{key} = {value!r}\n" for key, value in config.items())
        (d / "emulator.conf").write_text(text)

    def _system(self, name: str, power_state: str) -> dict[str, Any]:
        return {"uuid": self.systems[name], "name": name, "power_state": power_state,
                "external_notifier": False, "nics": []}  # fmt: skip

    @contextlib.contextmanager
    def _state(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.state_dir / "fakedriver.sqlite", timeout=10.0)
        try:
            with db:  # one transaction
                yield db
        finally:
            db.close()

    def _row(self, db: sqlite3.Connection, name: str) -> tuple[bytes, dict[str, Any]]:
        want = self.systems[name]
        for key, value in db.execute("SELECT key, value FROM cache"):
            if pickle.loads(key) == want:
                return key, pickle.loads(value)
        raise KeyError(f"{name} ({want}) is not in the emulator's state")


@contextlib.contextmanager
def start_sushy(
    directory: Path, systems: int = 8, *, prefix: str = "bmc", executable: Path = EMULATOR
) -> Iterator[SushyEmulator]:
    """A started emulator with ``systems`` Systems named ``<prefix>-<n>``, all On; stopped at
    the end. Its files and log are in ``directory``."""
    names = [f"{prefix}-{n}" for n in range(systems)]
    emulator = SushyEmulator(directory, names, executable=executable)
    try:
        emulator.start()
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def sushy(request: pytest.FixtureRequest) -> Iterator[SushyEmulator]:
    """One emulator per test module (8 Systems, ``bmc-0`` to ``bmc-7``, all On), logging to
    test-artifacts/<run>/sushy-<module>/. A test that stops it or changes the password puts it
    back; each test uses Systems of its own."""
    executable = emulator_or_skip(request.config)
    module = request.node.nodeid.rsplit("/", 1)[-1].removesuffix(".py")
    directory = run_state(request.config).artifacts / f"sushy-{module}-{os.getpid()}"
    with start_sushy(directory, executable=executable) as emulator:
        yield emulator
