"""Authentication with a Redfish service: where its sessions are made, what a session answer
carries, and the headers of a request. Pure, no I/O.

DMTF DSP0266 (Redfish specification), "Security details": a client POSTs UserName and Password
to the sessions collection named by the service root's ``Links.Sessions`` and sends the
``X-Auth-Token`` it gets back on every request, then DELETEs the session (its ``Location``)
when done; the service root itself is readable without credentials. A service without a
session service takes HTTP Basic authentication on every request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import field
from typing import Final, Literal

from local_ccm.bmc.core.address import path_of
from local_ccm.records import dataclass

ROOT_PATH: Final = "/redfish/v1/"
STANDARD_SESSIONS: Final = "/redfish/v1/SessionService/Sessions"
TOKEN_HEADER: Final = "X-Auth-Token"
AuthMode = Literal["auto", "session", "basic"]


@dataclass(frozen=True)
class Credentials:
    """A BMC user; the password never shows in a repr (logs, tracebacks)."""

    username: str
    password: str = field(repr=False)

    @property
    def padded(self) -> bool:
        """The username or the password begins or ends with whitespace: sent as it is (Metal3
        does the same), but most likely the newline `echo` adds when a Secret is made with
        `echo pw | base64`, the first thing to look at when the BMC refuses them."""
        return any(text != text.strip() for text in (self.username, self.password))


@dataclass(frozen=True)
class Session:
    token: str
    path: str | None  # what to DELETE at the end; None when the BMC did not say


def sessions_path(root: bytes) -> str | None:
    """The sessions collection the service root names, or None when it names no session service
    (or is not a readable root): ``Links.Sessions``, else the standard path when it has a
    ``SessionService``."""
    try:
        doc = json.loads(root)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    links = doc.get("Links")
    sessions = links.get("Sessions") if isinstance(links, dict) else None
    named = path_of(sessions.get("@odata.id")) if isinstance(sessions, dict) else None
    if named is not None:
        return named
    return STANDARD_SESSIONS if isinstance(doc.get("SessionService"), dict) else None


def login_body(credentials: Credentials) -> bytes:
    return json.dumps({"UserName": credentials.username, "Password": credentials.password}).encode()


def parse_session(headers: Mapping[str, str], body: bytes) -> Session | None:
    """The session a 2xx answer to the login POST made, or None when it carries no token.
    ``headers`` has lower-case names. The session's path is ``Location``, else the body's
    ``@odata.id``."""
    token = headers.get(TOKEN_HEADER.lower(), "").strip()
    if not token:
        return None
    path = path_of(headers.get("location"))
    if path is None:
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            doc = None
        path = path_of(doc.get("@odata.id")) if isinstance(doc, dict) else None
    return Session(token, path)


def auth_headers(credentials: Credentials, session: Session | None) -> dict[str, str]:
    """The session's token when there is one, else HTTP Basic (RFC 7617, UTF-8)."""
    if session is not None:
        return {TOKEN_HEADER: session.token}
    pair = f"{credentials.username}:{credentials.password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
