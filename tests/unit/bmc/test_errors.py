"""HTTP answers to error kinds, Redfish error messages and Retry-After."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from local_ccm.bmc.core.errors import (
    ERROR_KINDS,
    BmcError,
    error_of_status,
    parse_retry_after,
    redfish_message,
    shorten,
)

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
SUSHY_401 = json.dumps({"error": {"code": "Base.1.0.GeneralError",
                                  "message": "Incorrect username or password",
                                  "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.GeneralError"}]}
                        }).encode()  # fmt: skip


def status(code: int, *, gone: bool = True, retry_after: str | None = None) -> BmcError:
    return error_of_status(code, b"", what="GET /s", gone_on_404=gone, retry_after=retry_after,
                           now=NOW)  # fmt: skip


def test_the_kinds_are_the_condition_reasons() -> None:
    assert ERROR_KINDS == ("unreachable", "tls", "auth", "not-found", "invalid-response",
                           "server-error", "timeout", "rejected")  # fmt: skip


@pytest.mark.parametrize(
    ("code", "gone", "kind"),
    [
        (401, True, "auth"),
        (403, True, "auth"),
        (404, True, "not-found"),
        (404, False, "rejected"),  # a 404 on the reset target is not the System gone
        (400, True, "rejected"),
        (405, True, "rejected"),
        (409, True, "rejected"),
        (429, True, "server-error"),
        (500, True, "server-error"),
        (503, True, "server-error"),
        (599, True, "server-error"),
        (302, True, "invalid-response"),
        (101, True, "invalid-response"),
    ],
)
def test_a_status_is_one_kind(code: int, gone: bool, kind: str) -> None:
    error = status(code, gone=gone)
    assert (error.kind, error.status) == (kind, code)


def test_the_message_names_the_request_and_quotes_the_bmc() -> None:
    error = error_of_status(401, SUSHY_401, what="GET /redfish/v1/Systems/1", gone_on_404=True,
                            retry_after=None, now=NOW)  # fmt: skip
    assert error.message == "GET /redfish/v1/Systems/1: HTTP 401: Incorrect username or password"
    assert str(error) == "auth: " + error.message


@pytest.mark.parametrize(
    ("location", "message"),
    [
        # sushy-tools' answer to a System named by its name instead of its UUID.
        ("/redfish/v1/Systems/3f1e", "GET /s: HTTP 307: a redirect to '/redfish/v1/Systems/3f1e', "
         "not followed: write the address it names in spec.address"),
        ("https://bmc.example/redfish/v1/Systems/1", "GET /s: HTTP 307: a redirect to "
         "'https://bmc.example/redfish/v1/Systems/1', not followed: write the address it names "
         "in spec.address"),
        (None, "GET /s: HTTP 307 (not an answer a Redfish client expects)"),
    ],
)  # fmt: skip
def test_a_redirect_says_where_it_points(location: str | None, message: str) -> None:
    error = error_of_status(307, b"", what="GET /s", gone_on_404=True, retry_after=None,
                            now=NOW, location=location)  # fmt: skip
    assert (error.kind, error.message) == ("invalid-response", message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (SUSHY_401, "Incorrect username or password"),
        # The first ExtendedInfo Message is more specific than the generic message.
        (json.dumps({"error": {"message": "General error", "@Message.ExtendedInfo": [
            {"Message": "The session was closed."}]}}).encode(), "The session was closed."),
        (json.dumps({"error": {"message": "  many   words\n here "}}).encode(), "many words here"),
        (json.dumps({"error": {"message": 5}}).encode(), ""),
        (json.dumps({"error": "x"}).encode(), ""),
        (json.dumps([1]).encode(), ""),
        (b"<html>Bad Gateway</html>", ""),
        (b"\xff", ""),
    ],
)  # fmt: skip
def test_the_redfish_message_is_read_when_there_is_one(body: bytes, message: str) -> None:
    assert redfish_message(body) == message


def test_control_characters_from_the_bmc_are_escaped_not_copied() -> None:
    body = b'{"error": {"message": "Fake system \\u0000 was not found\\u001b[31m"}}'
    said = redfish_message(body)
    assert said == "Fake system \\x00 was not found\\x1b[31m"
    assert said.isprintable()
    assert shorten("caf\u00e9 ok") == "caf\u00e9 ok"  # printable text stays as it is


def test_a_long_message_is_shortened() -> None:
    assert shorten("x" * 300) == "x" * 199 + "…"
    assert len(redfish_message(json.dumps({"error": {"message": "y" * 900}}).encode())) == 200


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("120", 120.0),
        (" 0 ", 0.0),
        ("Wed, 02 Dec 2026 12:00:30 GMT", 30.0),
        ("Wed, 02 Dec 2026 11:00:00 GMT", 0.0),  # in the past
        ("soon", None),
        ("-5", None),
        ("1.5", None),
    ],
)
def test_retry_after_is_seconds_from_now(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, NOW) == seconds


def test_retry_after_is_a_hint_on_429_and_5xx_only() -> None:
    assert status(429, retry_after="7").retry_after == 7.0
    assert status(503, retry_after="7").retry_after == 7.0
    assert status(400, retry_after="7").retry_after is None


def test_errors_compare_by_their_fields() -> None:
    assert BmcError("tls", "x") == BmcError("tls", "x")
    assert BmcError("tls", "x") != BmcError("tls", "y")
    assert BmcError("tls", "x") != "tls: x"
    assert len({BmcError("tls", "x"), BmcError("tls", "x")}) == 1
