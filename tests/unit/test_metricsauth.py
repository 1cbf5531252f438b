"""Who may read /metrics: the 401/403/200 decision, the review bodies and the verdict cache.

Pure: the reviewer is an in-memory fake of the `Reviewer` protocol, time a fake clock.
"""

from __future__ import annotations

import pytest

from local_ccm.kube.request import review_allowed
from local_ccm.runtime.metricsauth import (
    ALLOWED_TTL,
    DENIED_TTL,
    MetricsAuth,
    User,
    Verdict,
    VerdictCache,
    bearer_token,
    decide,
    reviewed_user,
    subject_access_review,
    token_key,
    token_review,
)
from tests.fakes.clock import FakeClock
from tests.fakes.reviewer import FakeReviewer

pytestmark = pytest.mark.unit

READER = User("system:serviceaccount:monitoring:prometheus", "u1", ("system:authenticated",))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def reviewer() -> FakeReviewer:
    other = User("system:serviceaccount:default:other")
    return FakeReviewer({"good": READER, "other": other}, {READER.name})


@pytest.fixture
def auth(reviewer: FakeReviewer, clock: FakeClock) -> MetricsAuth:
    return MetricsAuth(reviewer, VerdictCache(clock.monotonic))


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Basic dXNlcjpwdw==", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer a b", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
    ],
)
def test_bearer_token_is_read_from_the_authorization_header_only(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


def test_decide_is_401_without_a_user_403_without_permission_else_200() -> None:
    assert decide(None, None, False).status == 401
    assert decide("t", None, True).status == 401
    forbidden = decide("t", READER, False)
    assert forbidden.status == 403
    assert READER.name in forbidden.message
    assert decide("t", READER, True) == Verdict(200, "ok")


def test_review_bodies_carry_the_token_and_the_whole_user() -> None:
    assert token_review("abc")["spec"] == {"token": "abc"}
    user = User("u", "uid-1", ("g1", "g2"), {"scopes": ("a",)})
    spec = subject_access_review(user, "/metrics")["spec"]
    assert spec == {
        "user": "u", "uid": "uid-1", "groups": ["g1", "g2"], "extra": {"scopes": ["a"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }  # fmt: skip


def test_review_answers_are_parsed() -> None:
    answered = {"status": {"authenticated": True, "user": {
        "username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}}}}  # fmt: skip
    assert reviewed_user(answered) == User("u", "1", ("g",), {"k": ("v",)})
    assert reviewed_user({"status": {"authenticated": False}}) is None
    assert reviewed_user({}) is None
    assert review_allowed({"status": {"allowed": True}})
    assert not review_allowed({"status": {"denied": True}})


def test_no_token_is_401_without_asking_the_api(auth: MetricsAuth, reviewer: FakeReviewer) -> None:
    assert auth.check(None).status == 401
    assert reviewer.calls == []


def test_unknown_token_is_401_other_user_403_reader_200(auth: MetricsAuth) -> None:
    assert auth.check("Bearer nobody").status == 401
    assert auth.check("Bearer other").status == 403
    assert auth.check("Bearer good").status == 200


def test_an_allowed_token_is_reviewed_once_per_ttl(
    auth: MetricsAuth, reviewer: FakeReviewer, clock: FakeClock
) -> None:
    for _ in range(8):  # two minutes of scrapes every 15 s
        assert auth.check("Bearer good").allowed
        clock.step(15)
    assert reviewer.calls == ["TokenReview", "SubjectAccessReview /metrics"]
    clock.step(ALLOWED_TTL)
    assert auth.check("Bearer good").allowed
    assert len(reviewer.calls) == 4


def test_a_denial_is_kept_briefly_so_a_new_binding_takes_effect(
    auth: MetricsAuth, reviewer: FakeReviewer, clock: FakeClock
) -> None:
    assert auth.check("Bearer other").status == 403
    assert auth.check("Bearer other").status == 403
    assert len(reviewer.calls) == 2
    reviewer.allowed.add("system:serviceaccount:default:other")
    clock.step(DENIED_TTL)
    assert auth.check("Bearer other").status == 200


def test_an_unavailable_api_is_503_and_not_cached(
    auth: MetricsAuth, reviewer: FakeReviewer
) -> None:
    reviewer.down = True
    assert auth.check("Bearer good").status == 503
    reviewer.down = False
    assert auth.check("Bearer good").status == 200


def test_the_cache_is_bounded_and_keyed_by_a_hash(clock: FakeClock) -> None:
    cache = VerdictCache(clock.monotonic, size=3)
    for i in range(5):
        cache.put(token_key(f"t{i}"), Verdict(200, "ok"), 60)
    assert len(cache) == 3
    assert cache.get(token_key("t0")) is None
    assert cache.get(token_key("t4")) == Verdict(200, "ok")
    assert token_key("secret") != "secret"
    assert len(token_key("secret")) == 64


def test_cache_entries_expire(clock: FakeClock) -> None:
    cache = VerdictCache(clock.monotonic)
    cache.put("k", Verdict(403, "no"), 10)
    clock.step(9.9)
    assert cache.get("k") == Verdict(403, "no")
    clock.step(0.1)
    assert cache.get("k") is None
    assert len(cache) == 0
