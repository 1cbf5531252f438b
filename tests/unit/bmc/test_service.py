"""Redfish authentication as data: the sessions collection, a session answer, the headers."""

from __future__ import annotations

import json

import pytest

from local_ccm.bmc.core.service import (
    Credentials,
    Session,
    auth_headers,
    login_body,
    parse_session,
    sessions_path,
)

SUSHY_ROOT = {"@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Systems": {
    "@odata.id": "/redfish/v1/Systems"}, "@odata.id": "/redfish/v1/"}  # fmt: skip


@pytest.mark.parametrize(
    ("root", "path"),
    [
        (SUSHY_ROOT, None),  # sushy-tools 2.2 serves no SessionService
        ({**SUSHY_ROOT, "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/S"}}},
         "/redfish/v1/SessionService/S"),
        ({"Links": {"Sessions": {"@odata.id": "/rf/Sessions"}}}, "/rf/Sessions"),
        ({"SessionService": {"@odata.id": "/redfish/v1/SessionService"}},
         "/redfish/v1/SessionService/Sessions"),
        ({"Links": {"Sessions": "x"}}, None),
        ({"Links": "x"}, None),
        ([], None),
    ],
)  # fmt: skip
def test_the_sessions_collection_is_found_in_the_service_root(
    root: object, path: str | None
) -> None:
    assert sessions_path(json.dumps(root).encode()) == path


def test_an_unreadable_service_root_names_no_sessions() -> None:
    assert sessions_path(b"<html>") is None


def test_the_login_body_carries_the_credentials() -> None:
    body = login_body(Credentials("admin", 'p"w'))
    assert json.loads(body) == {"UserName": "admin", "Password": 'p"w'}


@pytest.mark.parametrize(
    ("headers", "body", "session"),
    [
        ({"x-auth-token": "t1", "location": "/redfish/v1/SessionService/Sessions/7"}, b"",
         Session("t1", "/redfish/v1/SessionService/Sessions/7")),
        ({"x-auth-token": "t1", "location": "https://10.0.0.1/rf/Sessions/7"}, b"",
         Session("t1", "/rf/Sessions/7")),
        ({"x-auth-token": "t1"}, b'{"@odata.id": "/rf/Sessions/8"}',
         Session("t1", "/rf/Sessions/8")),
        ({"x-auth-token": "t1"}, b"not json", Session("t1", None)),
        ({"x-auth-token": " "}, b"", None),
        ({"location": "/rf/Sessions/7"}, b"", None),
    ],
)  # fmt: skip
def test_a_session_answer_gives_the_token_and_what_to_delete(
    headers: dict[str, str], body: bytes, session: Session | None
) -> None:
    assert parse_session(headers, body) == session


def test_a_session_is_used_before_basic_auth() -> None:
    creds = Credentials("admin", "secret")
    assert auth_headers(creds, Session("t1", None)) == {"X-Auth-Token": "t1"}
    assert auth_headers(creds, None) == {"Authorization": "Basic YWRtaW46c2VjcmV0"}
    assert auth_headers(Credentials("é", "ü"), None) == {"Authorization": "Basic w6k6w7w="}


def test_the_password_never_shows_in_a_repr() -> None:
    assert "secret" not in repr(Credentials("admin", "secret"))
    assert "secret" not in str(Credentials("admin", "secret"))
