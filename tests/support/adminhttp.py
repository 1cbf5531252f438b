"""Harness plumbing: HTTPS requests to the test apiserver with the admin client certificate.

Used for readiness, the admission self-test and TokenRequest, so the control plane starts and
is checked without depending on the product's REST layer (which the tests are about).
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


@dataclass(frozen=True)
class AdminHttp:
    port: int
    ca_file: Path
    cert_file: Path
    key_file: Path
    timeout: float = 10.0

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def request(self, method: str, path: str, body: Any = None) -> Response:
        """One request on a fresh connection; transport errors propagate as OSError."""
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self._context(), timeout=self.timeout
        )
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json", "User-Agent": "local-ccm-test-harness"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return Response(resp.status, resp.read())
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        """A request that must succeed (2xx); returns the decoded body."""
        resp = self.request(method, path, body)
        if not 200 <= resp.status < 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {resp.text[:2000]}")
        return resp.json()
