"""What can go wrong talking to a BMC, in the few kinds the controller reports. Pure, no I/O.

Each kind is a condition reason and a metric label value, so it is a short, stable word:

| kind | when |
|---|---|
| ``unreachable`` | no TCP connection (refused, no route, connect timeout, DNS), or it dropped |
| ``tls`` | the TLS handshake failed: certificate refused (unknown CA, wrong name, expired) |
| ``auth`` | 401 or 403: credentials rejected or not allowed |
| ``not-found`` | 404 on the System's own path: the System is gone |
| ``invalid-response`` | not HTTP, not JSON, not an object, a wrong type; a redirect |
| ``server-error`` | 5xx, or 429; ``retry_after`` carries the BMC's Retry-After as a hint |
| ``timeout`` | connected, but no answer (or no TLS handshake) within the read timeout |
| ``rejected`` | any other 4xx: the BMC refused this request (a reset type it does not offer) |
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Final, Literal, get_args

ErrorKind = Literal[
    "unreachable",
    "tls",
    "auth",
    "not-found",
    "invalid-response",
    "server-error",
    "timeout",
    "rejected",
]
ERROR_KINDS: Final[tuple[ErrorKind, ...]] = get_args(ErrorKind)
# A BMC's error text is quoted into conditions and logs: at most this much of it.
MAX_MESSAGE: Final = 200
_HTTP_DATE: Final = "%a, %d %b %Y %H:%M:%S GMT"  # RFC 9110's IMF-fixdate, the one to accept


class BmcError(Exception):
    """A failed BMC request: ``kind`` for the controller's policy, ``message`` for people.

    ``status`` is the HTTP status when there was an answer (0 otherwise); ``retry_after`` the
    seconds a 429 or 503 asked to wait, when it said.
    """

    def __init__(
        self, kind: ErrorKind, message: str, *, status: int = 0, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: ErrorKind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BmcError) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"BmcError{self._fields()!r}"

    def _fields(self) -> tuple[object, ...]:
        return (self.kind, self.message, self.status, self.retry_after)


def error_of_status(
    status: int,
    body: bytes,
    *,
    what: str,
    gone_on_404: bool,
    retry_after: str | None,
    now: datetime,
    location: str | None = None,
) -> BmcError:
    """The error an HTTP answer other than 2xx means. ``what`` names the request for the
    message ("GET /redfish/v1/Systems/1"); ``gone_on_404`` is true only for the System's own
    path, where 404 means the System is gone (elsewhere it is the BMC refusing the request);
    ``retry_after`` is the answer's header, read against ``now``; ``location`` a redirect's."""
    said = redfish_message(body)
    message = f"{what}: HTTP {status}" + (f": {said}" if said else "")
    if status in (401, 403):
        return BmcError("auth", message, status=status)
    if status == 404 and gone_on_404:
        return BmcError("not-found", message, status=status)
    if status == 429 or status >= 500:
        hint = parse_retry_after(retry_after, now)
        return BmcError("server-error", message, status=status, retry_after=hint)
    if 400 <= status < 500:
        return BmcError("rejected", message, status=status)
    if 300 <= status < 400 and location:
        # Not followed: the credentials would go along to wherever it points. sushy-tools
        # answers 307 for a System named by its name rather than its UUID, and some BMCs
        # redirect http to https; the operator fixes the address once, so say where it points.
        return BmcError("invalid-response", f"{message}: a redirect to {shorten(location)!r}, "
                        "not followed: write the address it names in spec.address",
                        status=status)  # fmt: skip
    return BmcError("invalid-response", f"{message} (not an answer a Redfish client expects)",
                    status=status)  # fmt: skip


def redfish_message(body: bytes) -> str:
    """The message of a Redfish error body (``error.message``, else the first
    ``@Message.ExtendedInfo`` entry's ``Message``), shortened; "" when there is none."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return ""
    info = error.get("@Message.ExtendedInfo")
    first = info[0] if isinstance(info, list) and info and isinstance(info[0], dict) else {}
    for text in (first.get("Message"), error.get("message")):
        if isinstance(text, str) and text.strip():
            return shorten(text.strip())
    return ""


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line of at most `limit` characters; a control character the BMC sent (a NUL, an
    escape) is written as its escape, never copied into a condition, an Event or a log line."""
    flat = " ".join(text.split())
    if not flat.isprintable():
        flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Retry-After (RFC 9110 10.2.3) as seconds from ``now``: delay-seconds or an HTTP-date;
    None when absent or unreadable, 0 for a date in the past."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = datetime.strptime(text, _HTTP_DATE).replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(0.0, (when - now).total_seconds())
