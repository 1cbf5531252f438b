"""A scripted Redfish server on loopback, for what the real emulator (tests/support/sushy.py)
cannot show. The happy paths and Basic auth are tested against sushy-tools; this server exists
for:

- **keep-alive**: sushy-tools' server closes every connection after one answer, so a client
  that keeps one connection for N requests can only be shown on a server that keeps them
  (``connections`` counts them); ``drop_idle`` closes each connection silently after its
  answer, as a BMC does with an idle one;
- **Redfish sessions**: sushy-tools 2.2 serves no SessionService (``sessions=True`` here:
  ``Links.Sessions`` in the root, POST makes an ``X-Auth-Token`` unless ``login`` says
  otherwise, DELETE ends it, `expire_sessions` forgets every token as a BMC restart does);
- **answers a BMC should not give**: ``reply`` (any status, headers and body: garbage JSON,
  429 with Retry-After, 500), ``raw`` (bytes that are not HTTP), ``delay`` (a slow BMC),
  ``hang`` (a BMC that never answers);
- **concurrency**: ``max_in_flight`` records the most requests it was answering at once.

Plain HTTP, or HTTPS with a certificate of the test PKI (``tls``). The System it serves is
``/redfish/v1/Systems/1``; credentials are `USERNAME` / `PASSWORD`.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tests.support import pki

SYSTEM_PATH = "/redfish/v1/Systems/1"
SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"
USERNAME, PASSWORD = "admin", "fake-bmc-password"


def system_json(power_state: str = "On") -> bytes:
    return json.dumps({
        "@odata.id": SYSTEM_PATH, "Id": "1", "Name": "fake", "PowerState": power_state,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Actions": {"#ComputerSystem.Reset": {
            "target": f"{SYSTEM_PATH}/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}},
    }).encode()  # fmt: skip


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Seen:
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    connection: int  # which connection (1 = the first accepted)


@dataclass
class Script:
    """What the server does; tests change it while it runs (under `FakeBmc.lock`)."""

    reply: Reply | None = None  # for the System's path and its reset action; None: the System
    login: Reply | None = None  # for the session login; None: a session is made
    raw: bytes | None = None  # written instead of an HTTP answer, then the connection closes
    delay: float = 0.0
    hang: bool = False
    trickle: float = 0.0  # > 0: the status line, then one byte every this many seconds, forever
    drop_idle: bool = False
    power_state: str = "On"
    tokens: set[str] = field(default_factory=set)


class FakeBmc:
    def __init__(self, *, tls: bool = False, sessions: bool = False) -> None:
        self.lock = threading.Lock()
        self.script = Script()
        self.sessions = sessions
        self.seen: list[Seen] = []
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.stopping = threading.Event()
        self.ca_pem: str | None = None
        context: ssl.SSLContext | None = None
        if tls:
            now = datetime.now(UTC)
            ca = pki.new_ca("local-ccm-test-fake-bmc-ca", now)
            serving = pki.issue_serving(ca, now)
            self.ca_pem = ca.cert_pem.decode()
            context = _server_context(serving)
        self._server = _Server(self, context)
        self.port: int = self._server.server_address[1]
        serve = self._server.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), name="fake-bmc", daemon=True)

    def address(self) -> str:
        scheme = "redfish" if self._server.context is not None else "redfish+http"
        return f"{scheme}://127.0.0.1:{self.port}{SYSTEM_PATH}"

    def expire_sessions(self) -> None:
        with self.lock:
            self.script.tokens.clear()

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if method in (None, s.method) and path in (None, s.path)]

    def __enter__(self) -> FakeBmc:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------ answering (handler threads)

    def answer(self, handler: _Handler, body: bytes) -> None:
        seen = Seen(handler.command, handler.path,
                    {k.lower(): v for k, v in handler.headers.items()}, body,
                    handler.connection_number)  # fmt: skip
        with self.lock:
            self.seen.append(seen)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            script = Script(**vars(self.script))
        try:
            if script.hang:
                self.stopping.wait()
                handler.close_connection = True
                return
            if script.trickle:
                handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
                while not self.stopping.wait(script.trickle):
                    handler.wfile.write(b"X")
                return
            if script.delay:
                time.sleep(script.delay)
            if script.raw is not None:
                handler.wfile.write(script.raw)
                handler.close_connection = True
                return
            _send(handler, self._reply(seen, script))
            handler.close_connection = script.drop_idle or handler.close_connection
        finally:
            with self.lock:
                self.in_flight -= 1

    def _reply(self, seen: Seen, script: Script) -> Reply:
        if seen.path == "/redfish/v1/":
            root: dict[str, Any] = {"@odata.id": "/redfish/v1/", "Systems": {
                "@odata.id": "/redfish/v1/Systems"}}  # fmt: skip
            if self.sessions:
                root["Links"] = {"Sessions": {"@odata.id": SESSIONS_PATH}}
            return Reply(200, json.dumps(root).encode())
        if self.sessions and seen.path == SESSIONS_PATH and seen.method == "POST":
            return script.login or self._login(seen)
        if not self._authorized(seen, script):
            return Reply(401, b'{"error": {"message": "Authentication required"}}')
        if seen.path.startswith(SESSIONS_PATH + "/") and seen.method == "DELETE":
            with self.lock:
                self.script.tokens.discard(seen.headers.get("x-auth-token", ""))
            return Reply(204)
        return self._system(seen, script)

    def _system(self, seen: Seen, script: Script) -> Reply:
        if script.reply is not None and seen.path.startswith(SYSTEM_PATH):
            return script.reply
        if seen.path == SYSTEM_PATH and seen.method == "GET":
            return Reply(200, system_json(script.power_state))
        if seen.path == f"{SYSTEM_PATH}/Actions/ComputerSystem.Reset" and seen.method == "POST":
            reset_type = json.loads(seen.body)["ResetType"]
            with self.lock:
                self.script.power_state = "Off" if reset_type == "ForceOff" else "On"
            return Reply(204)
        return Reply(404, b'{"error": {"message": "no such resource"}}')

    def _login(self, seen: Seen) -> Reply:
        doc = json.loads(seen.body)
        if (doc.get("UserName"), doc.get("Password")) != (USERNAME, PASSWORD):
            return Reply(401, b'{"error": {"message": "Invalid credentials"}}')
        token = secrets.token_hex(8)
        with self.lock:
            self.script.tokens.add(token)
        location = f"{SESSIONS_PATH}/{token[:6]}"
        return Reply(201, json.dumps({"@odata.id": location}).encode(),
                     (("X-Auth-Token", token), ("Location", location)))  # fmt: skip

    def _authorized(self, seen: Seen, script: Script) -> bool:
        token = seen.headers.get("x-auth-token")
        if token is not None:
            return token in script.tokens
        expected = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
        return seen.headers.get("authorization") == f"Basic {expected}"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, bmc: FakeBmc, context: ssl.SSLContext | None) -> None:
        self.bmc, self.context = bmc, context
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, peer = self.socket.accept()
        if self.context is None:
            return sock, peer
        # The handshake happens in the connection's own thread, at its first read.
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), peer


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # the head and the body are two writes
    server: _Server

    connection_number = 0

    def setup(self) -> None:
        super().setup()
        bmc = self.server.bmc
        with bmc.lock:
            bmc.connections += 1
            self.connection_number = bmc.connections

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.bmc.answer(self, self.rfile.read(length) if length else b"")

    do_GET = do_POST = do_DELETE = do_PATCH = _any  # noqa: N815 (http.server's names)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            super().handle()


def _send(handler: _Handler, reply: Reply) -> None:
    handler.send_response(reply.status)
    for name, value in reply.headers:
        handler.send_header(name, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(reply.body)))
    handler.end_headers()
    handler.wfile.write(reply.body)


def _server_context(serving: pki.Issued) -> ssl.SSLContext:
    import tempfile  # noqa: PLC0415

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as d:
        cert, key = f"{d}/tls.crt", f"{d}/tls.key"
        with open(cert, "wb") as f:
            f.write(serving.cert_pem)
        with open(key, "wb") as f:
            f.write(serving.key_pem)
        context.load_cert_chain(cert, key)
    return context


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A port whose kernel completes TCP handshakes that nobody accepts: a TLS client waits
    for a ServerHello that never comes (a wedged BMC)."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as listener:
        yield listener.getsockname()[1]
