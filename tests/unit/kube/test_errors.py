"""Error translation (local_ccm.kube.errors)."""

from __future__ import annotations

import json

import pytest

from local_ccm.kube.errors import (
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Transient,
    Unauthorized,
    error_from_response,
    parse_retry_after,
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, Invalid),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (408, Transient),
        (409, Conflict),
        (410, Gone),
        (422, Invalid),
        (429, Transient),
        (500, Transient),
        (503, Transient),
        (504, Transient),
        (418, ApiError),
    ],
)
def test_status_to_kind(status: int, kind: type[ApiError]) -> None:
    error = error_from_response(status, b'{"kind":"Status","reason":"R","message":"m"}')
    assert type(error) is kind
    assert (error.status, error.reason, error.message) == (status, "R", "m")


def test_already_exists_is_conflict() -> None:
    body = {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}
    assert isinstance(error_from_response(409, json.dumps(body).encode()), Conflict)


# What kube-apiserver v1.37 answers to a JSON Patch whose `test` failed (checked live).
PATCH_NOT_APPLIED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server rejected our request due to an error in our request",
    "reason": "Invalid",
    "details": {},
    "code": 422,
}


def test_json_patch_that_cannot_be_applied_is_conflict_keeping_status() -> None:
    error = error_from_response(422, json.dumps(PATCH_NOT_APPLIED).encode(), json_patch=True)
    assert isinstance(error, Conflict)
    assert error.status == 422


def test_the_same_answer_to_other_requests_stays_invalid() -> None:
    assert type(error_from_response(422, json.dumps(PATCH_NOT_APPLIED).encode())) is Invalid


def test_failed_test_message_is_conflict() -> None:
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": "testing value /metadata/resourceVersion failed: test failed",
    }
    assert isinstance(
        error_from_response(422, json.dumps(body).encode(), json_patch=True), Conflict
    )


def test_validation_failure_of_a_json_patch_stays_invalid() -> None:
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": 'Node "n1" is invalid: metadata.labels: Invalid value: "a b"',
        "details": {"name": "n1", "kind": "nodes", "causes": [{"field": "metadata.labels"}]},
    }
    assert type(error_from_response(422, json.dumps(body).encode(), json_patch=True)) is Invalid


def test_cause_messages_are_appended() -> None:
    body = {
        "kind": "Status",
        "code": 500,
        "reason": "InternalError",
        "message": "an error on the server",
        "details": {"causes": [{"message": "etcd timeout"}]},
    }
    assert error_from_response(500, json.dumps(body).encode()).message == (
        "an error on the server: etcd timeout"
    )


def test_other_422_stays_invalid() -> None:
    body = {"kind": "Status", "code": 422, "reason": "Invalid", "message": "spec.x: Required"}
    assert type(error_from_response(422, json.dumps(body).encode())) is Invalid


def test_retry_after_header_wins_over_status_details() -> None:
    body = {"kind": "Status", "reason": "TooManyRequests", "details": {"retryAfterSeconds": 3}}
    assert error_from_response(429, json.dumps(body).encode(), "7").retry_after == 7.0
    assert error_from_response(429, json.dumps(body).encode()).retry_after == 3.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("5", 5.0), (" 1.5 ", 1.5), ("-1", None), ("Wed, 21 Oct", None), (None, None)],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value) == seconds


def test_non_json_body_becomes_message() -> None:
    error = error_from_response(502, b"Bad Gateway from proxy")
    assert isinstance(error, Transient)
    assert error.message == "Bad Gateway from proxy"
    assert error.reason == "HTTP502"


def test_transient_request_sent_flag() -> None:
    assert Transient(0, "ConnectionError", "refused", request_sent=False).request_sent is False
    assert error_from_response(503, None).request_sent is True
