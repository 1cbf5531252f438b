"""A validating admission webhook served by the test process, to produce races
deterministically.

The server listens on ``127.0.0.1`` with its own CA and serving certificate; a
ValidatingWebhookConfiguration (``clientConfig.url``, the CA as ``caBundle``) sends it UPDATEs
of ``nodes`` and ``nodes/status`` for objects carrying the test's labels only. The first request
that ``match`` accepts runs ``action`` *before* the answer: e.g. an extra admin write to the
same Node, which makes the request under review lose its optimistic-concurrency race, or a
wait on a gate. Every request is answered ``allowed``.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.resources import Resource
from tests.support import pki
from tests.support.cleanup import Tracker
from tests.support.waiting import eventually

log = logging.getLogger(__name__)
WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
AGENT_FIELD_MANAGER = "local-ccm"
PROBE_ANNOTATION = "test.local-ccm.io/webhook-probe"
Request = Mapping[str, Any]  # AdmissionReview.request


def field_manager(request: Request) -> str:
    return str((request.get("options") or {}).get("fieldManager") or "")


def is_agent_patch(request: Request, subresource: str) -> bool:
    """The agent's PATCH of the Node (``""``) or its status (``"status"``)."""
    return (
        field_manager(request) == AGENT_FIELD_MANAGER
        and str(request.get("subResource") or "") == subresource
    )


class RaceWebhook:
    """``with RaceWebhook(kube, track, labels, match=..., action=...) as hook:``.

    ``labels`` select the Nodes the webhook sees (the test's own); ``hook.seen`` lists every
    request with its arrival time; ``hook.fired`` is set once ``action`` has run.
    """

    def __init__(
        self,
        kube: Client,
        track: Tracker,
        labels: Mapping[str, str],
        *,
        name: str,
        match: Callable[[Request], bool],
        action: Callable[[Request], None],
    ) -> None:
        self.kube, self.track, self.labels, self.name = kube, track, dict(labels), name
        self.match, self.action = match, action
        self.seen: list[tuple[float, Request]] = []  # (monotonic arrival time, request)
        self.fired = threading.Event()
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._server = self._serve()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="race-webhook", daemon=True
        )

    # -------------------------------------------------------------- HTTPS server
    def _serve(self) -> ThreadingHTTPServer:
        now = datetime.now(UTC)
        self.ca = pki.new_ca("local-ccm-test-webhook-ca", now)
        serving = pki.issue_serving(self.ca, now)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="local-ccm-webhook-") as directory:
            cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            cert.write_bytes(serving.cert_pem)
            key.write_bytes(serving.key_pem)  # the directory is 0700; read once, then removed
            context.load_cert_chain(str(cert), str(key))
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        return server

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}/validate"

    def review(self, request: Request) -> None:
        """Record ``request``; run the action for the first match (before answering)."""
        with self._lock:
            self.seen.append((time.monotonic(), request))
            first = not self.fired.is_set() and self.match(request)
            if first:
                self.fired.set()
        if first:
            try:
                self.action(request)
            except BaseException as exc:  # surfaced by the test through hook.errors
                log.exception("race webhook action failed")
                self.errors.append(exc)

    def agent_requests(self, subresource: str) -> list[tuple[float, Request]]:
        """The agent's PATCHes of the Node (``""``) or its status seen so far."""
        with self._lock:
            return [(t, q) for t, q in self.seen if is_agent_patch(q, subresource)]

    # -------------------------------------------------------------- registration
    def configuration(self) -> Obj:
        rule = {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["nodes", "nodes/status"],
            "scope": "Cluster",
        }
        ca_bundle = base64.b64encode(self.ca.cert_pem).decode()
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name, "labels": self.labels},
            "webhooks": [
                {
                    "name": "race.test.local-ccm.io",
                    "clientConfig": {"url": self.url, "caBundle": ca_bundle},
                    "rules": [rule],
                    "objectSelector": {"matchLabels": self.labels},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",  # (the extra write is the point of the test)
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 15,
                }
            ],
        }

    def start(self, probe_node: str) -> RaceWebhook:
        """Serve, register, and wait until the apiserver calls us for ``probe_node``."""
        self._thread.start()
        self.kube.create(WEBHOOK_CONFIGURATIONS, self.configuration())
        self.track(WEBHOOK_CONFIGURATIONS, self.name)
        probes = iter(range(1_000_000))

        def called() -> bool:
            patch = {"metadata": {"annotations": {PROBE_ANNOTATION: str(next(probes))}}}
            self.kube.patch(
                Resource("", "v1", "nodes", "Node", False), probe_node, patch, patch_type="merge"
            )
            with self._lock:
                return any(field_manager(s) != AGENT_FIELD_MANAGER for _, s in self.seen)

        eventually(called, timeout=20, interval=0.5, message="the webhook is being called")
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> RaceWebhook:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _handler(hook: RaceWebhook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            review = json.loads(self.rfile.read(length))
            request = review.get("request") or {}
            hook.review(request)
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request.get("uid", ""), "allowed": True},
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook: " + format, *args)

    return Handler
