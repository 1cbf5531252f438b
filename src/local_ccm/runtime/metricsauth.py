"""Who may read `/metrics`: bearer token → TokenReview → SubjectAccessReview → 401/403/200.

Pure, no I/O. The same decision controller-runtime's `filters.WithAuthenticationAndAuthorization`
and kube-rbac-proxy make: no token or a token the API server does not authenticate is 401, an
authenticated user who may not `get` the non-resource URL `/metrics` is 403, else 200. The API
calls sit behind the `Reviewer` protocol (`runtime.metricsserver.KubeReviewer` is the real one);
a review the API server could not answer is 503 and is never cached.

Answers are cached by the SHA-256 of the token (never the token itself) for a short time, so a
Prometheus scraping every 15 s costs two API requests every `ALLOWED_TTL`, not every scrape.
Denials are kept for a shorter time, so a freshly created RoleBinding takes effect quickly.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, Protocol

from local_ccm.records import dataclass

METRICS_PATH = "/metrics"
ALLOWED_TTL = 120.0  # kube-rbac-proxy and controller-runtime cache an authentication for 2 min
DENIED_TTL = 10.0
CACHE_SIZE = 256


@dataclass(frozen=True)
class User:
    """An authenticated identity, as TokenReview reports it and SubjectAccessReview takes it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """What the server answers: the status code and a one-line body."""

    status: int
    message: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


class ReviewUnavailable(Exception):  # noqa: N818 (names the condition, like the API's reasons)
    """The API server did not answer a review (down, timed out, or forbade the review itself)."""


class Reviewer(Protocol):
    """The two API calls; raise `ReviewUnavailable` when the API server cannot answer."""

    def authenticate(self, token: str) -> User | None: ...

    def may_get(self, user: User, path: str) -> bool: ...


# ---------------------------------------------------------------- request and response bodies


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for anything else."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def token_review(token: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def reviewed_user(review: Mapping[str, Any]) -> User | None:
    """The user of an answered TokenReview; None when the token was not authenticated."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None
    info = status.get("user") or {}
    extra = {key: tuple(values) for key, values in (info.get("extra") or {}).items()}
    return User(
        name=str(info.get("username", "")),
        uid=str(info.get("uid", "")),
        groups=tuple(info.get("groups") or ()),
        extra=extra,
    )


def subject_access_review(user: User, path: str, verb: str = "get") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": user.name,
        "groups": list(user.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


# ---------------------------------------------------------------- the decision


UNAUTHORIZED = Verdict(401, "Unauthorized")
UNAVAILABLE = Verdict(503, "metrics authorization unavailable: the API server did not answer")


def decide(token: str | None, user: User | None, may_get: bool) -> Verdict:
    """401 without an authenticated user, 403 when RBAC says no, else 200."""
    if token is None or user is None:
        return UNAUTHORIZED
    if not may_get:
        return Verdict(403, f'Forbidden: user "{user.name}" may not get {METRICS_PATH}')
    return Verdict(200, "ok")


def token_key(token: str) -> str:
    import hashlib  # noqa: PLC0415  (lazy: 0.5 MiB that a process without secure metrics never needs)

    return hashlib.sha256(token.encode()).hexdigest()


class VerdictCache:
    """Verdicts by token hash, each until its TTL passes; the oldest entry goes first when full.
    Thread-safe: the HTTP server answers every request in its own thread."""

    def __init__(self, now: Callable[[], float], size: int = CACHE_SIZE) -> None:
        self._now = now
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._now():
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: str, verdict: Verdict, ttl: float) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (self._now() + ttl, verdict)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class MetricsAuth:
    """The guard of `/metrics`: headers in, `Verdict` out, API answers cached."""

    def __init__(self, reviewer: Reviewer, cache: VerdictCache):
        self._reviewer = reviewer
        self._cache = cache

    def check(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHORIZED
        key = token_key(token)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            verdict = self._review(token)
        except ReviewUnavailable:
            return UNAVAILABLE
        self._cache.put(key, verdict, ALLOWED_TTL if verdict.allowed else DENIED_TTL)
        return verdict

    def _review(self, token: str) -> Verdict:
        user = self._reviewer.authenticate(token)
        if user is None:
            return decide(token, None, False)
        return decide(token, user, self._reviewer.may_get(user, METRICS_PATH))
