"""Secure `/metrics` of the two controllers: HTTPS, TokenReview and SubjectAccessReview.

The adapters around `local_ccm.runtime.metricsauth` (the decision): the reviewer that asks the API
server and the server's TLS context (`--metrics-cert-dir`, else a self-signed certificate made
on the first connection), given to `serve.start_servers`: health probes stay
plain HTTP on their own address (kubelet probes them without a token), metrics HTTPS on theirs.
Certificates are read once; a rotated certificate takes effect at the next restart.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from local_ccm.kube import resources as r
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError, Forbidden
from local_ccm.kube.request import review_allowed
from local_ccm.kube.transport import pem_files
from local_ccm.logs import V4
from local_ccm.runtime.metricsauth import (
    MetricsAuth,
    ReviewUnavailable,
    User,
    VerdictCache,
    reviewed_user,
    subject_access_review,
    token_review,
)

log = logging.getLogger(__name__)

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
TlsContext = ssl.SSLContext  # for the composition roots, which do not speak TLS themselves
REVIEW_TIMEOUT = 10.0
WARN_EVERY = 60.0
CERT_CHILD_TIMEOUT = 60.0
KEY_MARKER = b"-----BEGIN PRIVATE KEY-----"
SELF_EXE = "/proc/self/exe"


class CertError(Exception):
    """The serving certificate cannot be loaded or made (one line, exit 2)."""


# ---------------------------------------------------------------- reviews


class Creator(Protocol):
    """The one API verb the reviews need (`local_ccm.kube.client.Client` is one)."""

    def create(self, res: r.Resource, body: Obj, *, timeout: float | None = None) -> Obj: ...


class KubeReviewer:
    """TokenReview and SubjectAccessReview with the controller's own credentials. A failed
    review is a WARNING at most once a minute (a scrape every 15 s would repeat it 4 times a
    minute), DEBUG in between."""

    def __init__(self, client: Creator, now: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._now = now
        self._lock = threading.Lock()
        self._warned_at: float | None = None

    def authenticate(self, token: str) -> User | None:
        return reviewed_user(self._create(r.TOKEN_REVIEWS, token_review(token)))

    def may_get(self, user: User, path: str) -> bool:
        return review_allowed(
            self._create(r.SUBJECT_ACCESS_REVIEWS, subject_access_review(user, path))
        )

    def _create(self, resource: r.Resource, body: Obj) -> Obj:
        try:
            return self._client.create(resource, body, timeout=REVIEW_TIMEOUT)
        except Forbidden as exc:
            self._warn("cannot review a /metrics request: %s; the controller's ClusterRole "
                       "needs create on %s.%s", exc, resource.plural, resource.group)  # fmt: skip
            raise ReviewUnavailable(str(exc)) from exc
        except (ApiError, OSError) as exc:
            self._warn("cannot review a /metrics request: %s", exc)
            raise ReviewUnavailable(str(exc)) from exc

    def _warn(self, message: str, *args: object) -> None:
        with self._lock:
            now = self._now()
            quiet = self._warned_at is not None and now - self._warned_at < WARN_EVERY
            if not quiet:
                self._warned_at = now
        log.log(V4 if quiet else logging.WARNING, message, *args)


def metrics_auth(client: Client) -> MetricsAuth:
    return MetricsAuth(KubeReviewer(client), VerdictCache(time.monotonic))


# What secure /metrics asks the API server; in the start-up access review, only warned about.
REVIEWS = (
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
)


# ---------------------------------------------------------------- TLS


def server_tls(cert_dir: str, name: str) -> ssl.SSLContext:
    """The serving context: `cert_dir`/tls.crt + tls.key (read now; raises CertError), else one
    whose self-signed certificate for `name` is made on the first connection."""
    if not cert_dir:
        return SelfSignedContext.for_name(name)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = os.path.join(cert_dir, CERT_FILE), os.path.join(cert_dir, KEY_FILE)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise CertError(f"--metrics-cert-dir={cert_dir}: cannot load {CERT_FILE} and "
                        f"{KEY_FILE}: {exc.strerror or exc}") from exc  # fmt: skip
    return context


class SelfSignedContext(ssl.SSLContext):
    """The serving context without --metrics-cert-dir. Its certificate is made when the first
    connection is wrapped, not at start-up: making one costs a child process with
    `cryptography` (about 0.08 CPU-s and 0.1 s), which a process nobody scrapes never pays and
    a scraped one pays once, at its first scrape. A failure is logged and fails that connection
    (an OSError, as any failed handshake); the next connection tries again."""

    name: str
    _lock: threading.Lock
    _loaded: bool

    @classmethod
    def for_name(cls, name: str) -> SelfSignedContext:
        context = cls(ssl.PROTOCOL_TLS_SERVER)  # what create_default_context(CLIENT_AUTH) makes
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.name, context._lock, context._loaded = name, threading.Lock(), False
        return context

    @property
    def loaded(self) -> bool:
        return self._loaded

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        with self._lock:
            if not self._loaded:
                self._load()
        return super().wrap_socket(*args, **kwargs)

    def _load(self) -> None:
        try:
            cert_pem, key_pem = self_signed(self.name)
        except CertError as exc:
            log.error("%s", exc)
            raise OSError(str(exc)) from exc
        with pem_files(cert_pem, key_pem) as (cert_path, key_path):
            self.load_cert_chain(cert_path, key_path)
        self._loaded = True
        log.info("serving /metrics with a self-signed certificate (no --metrics-cert-dir)")


def self_signed(name: str) -> tuple[bytes, bytes]:
    """(certificate, key) PEM for `name`, made by `runtime.metricscert` in a short-lived child
    process: importing `cryptography` would stay in this process's memory for its whole life
    (about 12.6 MiB of RSS, measured) for one certificate. Raises CertError."""
    # This very interpreter, with this process's import path: sys.executable may be a path the
    # process's user cannot exec (a venv link into a private directory) although it runs.
    python = SELF_EXE if os.path.exists(SELF_EXE) else sys.executable
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [python, "-P", "-m", "local_ccm.runtime.metricscert", name],
            capture_output=True, timeout=CERT_CHILD_TIMEOUT, check=False, env=env,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CertError(f"cannot make a self-signed certificate for /metrics: {exc}") from exc
    cert, marker, key = done.stdout.partition(KEY_MARKER)
    if done.returncode != 0 or not marker:
        lines = done.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise CertError(f"cannot make a self-signed certificate for /metrics: {lines[-1]}")
    return cert, marker + key


def certificate_name() -> str:
    return socket.gethostname() or "localhost"
