"""Kubernetes API errors, translated from HTTP status and Status bodies. Pure, no I/O.

Callers see a handful of kinds (NotFound, Conflict, Forbidden, Unauthorized, Invalid,
Gone, Transient) instead of status codes; each loop writes one policy per kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """An error answer from the apiserver, or a transport failure (status 0); ``kind`` names
    the class in metrics labels (``not_found`` for NotFound)."""

    kind = "error"

    def __init_subclass__(cls) -> None:
        cls.kind = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
        request_sent: bool = True,  # see Transient
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body
        self.request_sent = request_sent


class NotFound(ApiError):  # noqa: N818 (the API's own reason names)
    """404."""


class Conflict(ApiError):  # noqa: N818 (the API's own reason names)
    """409 (Conflict, AlreadyExists), and a failed JSON Patch ``test`` operation."""


class Forbidden(ApiError):  # noqa: N818 (the API's own reason names)
    """403: RBAC or admission denied the request."""


class Unauthorized(ApiError):  # noqa: N818 (the API's own reason names)
    """401: credentials missing, expired or rejected (also a failing exec plugin)."""


class Invalid(ApiError):  # noqa: N818 (the API's own reason names)
    """422 Invalid and 400 BadRequest: retrying the same request cannot help."""


class Gone(ApiError):  # noqa: N818 (the API's own reason names)
    """410: the resourceVersion is too old (compacted); the caller must relist."""


class Transient(ApiError):  # noqa: N818 (the API's own reason names)
    """429, 5xx, timeouts and connection errors; ``status`` is 0 for transport errors.

    ``request_sent`` is False only when the failure happened before any byte of the
    request left (connection refused, TLS handshake): then even a write is safe to retry.
    """


# The kind of each status (other 5xx are Transient, other codes ApiError) and the reason an
# answer without a Status body gets.
_BY_STATUS: Mapping[int, tuple[type[ApiError], str]] = {
    400: (Invalid, "BadRequest"),
    401: (Unauthorized, "Unauthorized"),
    403: (Forbidden, "Forbidden"),
    404: (NotFound, "NotFound"),
    408: (Transient, "HTTP408"),
    409: (Conflict, "Conflict"),
    410: (Gone, "Expired"),
    422: (Invalid, "Invalid"),
    429: (Transient, "TooManyRequests"),
    500: (Transient, "InternalError"),
    503: (Transient, "ServiceUnavailable"),
    504: (Transient, "Timeout"),
}

# evanphx/json-patch says "testing value /metadata/resourceVersion failed: test failed",
# but kube-apiserver (checked on v1.37) drops that text: a JSON Patch that cannot be
# applied gets apimachinery's NewGenericServerResponse(422, ..., isUnexpectedResponse=
# false), i.e. this fixed sentence with empty details. Validation failures look different
# ('Node "x" is invalid: ...', with causes).
JSON_PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
_FAILED_TEST_OP = re.compile(r"testing value \S* failed|test failed|test operation .* failed")


def is_failed_json_patch(status: int, status_obj: Mapping[str, Any] | None, message: str) -> bool:
    """True for the answer to a JSON Patch whose operations could not be applied (a failed
    ``test`` among them; the apiserver does not say which operation failed)."""
    if status != 422:
        return False
    if _FAILED_TEST_OP.search(message):
        return True
    details = (status_obj or {}).get("details") or {}
    return message == JSON_PATCH_NOT_APPLIED and not details.get("causes")


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds; the HTTP-date form is not sent by the apiserver and is ignored."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _decode_status(body: bytes | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if body is None:
        return None
    if isinstance(body, Mapping):
        return dict(body)
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _cause_messages(status_obj: Mapping[str, Any]) -> list[str]:
    details = status_obj.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    if not isinstance(causes, list):
        return []
    return [str(c["message"]) for c in causes if isinstance(c, Mapping) and c.get("message")]


def _status_retry_after(status_obj: Mapping[str, Any]) -> float | None:
    details = status_obj.get("details")
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and seconds >= 0:
            return float(seconds)
    return None


def error_from_response(
    status: int,
    body: bytes | Mapping[str, Any] | None,
    retry_after: str | None = None,
    *,
    json_patch: bool = False,
) -> ApiError:
    """Build the exception for a non-2xx answer (or an ERROR watch event's Status)."""
    status_obj = _decode_status(body)
    reason, message = "", ""
    if status_obj is not None:
        reason = str(status_obj.get("reason") or "")
        message = str(status_obj.get("message") or "")
        # Generic server responses (a failed JSON Patch among them) keep the detail in
        # details.causes and a fixed sentence in message: show both.
        extra = [m for m in _cause_messages(status_obj) if m not in message]
        message = ": ".join([message, *extra]) if message else ": ".join(extra)
    elif isinstance(body, bytes):
        message = body[:300].decode("utf-8", "replace").strip()
    after = parse_retry_after(retry_after)
    if after is None and status_obj is not None:
        after = _status_retry_after(status_obj)
    cls = Transient if status >= 500 else _BY_STATUS.get(status, (ApiError, ""))[0]
    # Every JSON Patch in this project is built from an object it read and guarded by a
    # `test` of resourceVersion (or of a list element); when it cannot be applied the
    # object is no longer what was read. That is a stale read, handled like a 409:
    # re-read and recompute. So this 422 becomes Conflict; the status stays 422 so logs
    # show what the server said.
    if json_patch and is_failed_json_patch(status, status_obj, message):
        cls = Conflict
    reason = reason or _BY_STATUS.get(status, (ApiError, f"HTTP{status}"))[1]
    return cls(status, reason, message, retry_after=after, body=status_obj)
