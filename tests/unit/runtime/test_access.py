"""The one start-up permission check (local_ccm.runtime.access): rules reviews first, an access
review only for what no rule grants; an API server that does not answer is waited for, never a
crash; a stop ends the wait; rejected credentials and missing permissions end the process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.clock import SystemClock
from local_ccm.kube import errors as ke
from local_ccm.kube.nodes import Access
from local_ccm.lifecycle.run import permissions
from local_ccm.runtime.access import check_access, is_granted, lease_permissions
from local_ccm.runtime.controller import accesses
from tests.fakes.clock import FakeClock

Rule = Mapping[str, Any]


class FakeReviews:
    """`rules` answers `rules_by_namespace`; `allowed` denies `denied` (by text); both raise the
    scripted errors first. Records every request."""

    def __init__(
        self,
        rules: Mapping[str, Sequence[Rule]] | None = None,
        denied: set[str] | None = None,
        errors: list[ke.ApiError] | None = None,
    ) -> None:
        self.rules_by_namespace, self.denied = rules or {}, denied or set()
        self.errors, self.requests = errors or [], list[str]()

    async def rules(self, namespace: str) -> Sequence[Rule]:
        self.requests.append(f"rules {namespace}")
        self._fail()
        return self.rules_by_namespace.get(namespace, ())

    async def allowed(self, permission: Access) -> bool:
        self.requests.append(f"access {permission}")
        self._fail()
        return str(permission) not in self.denied

    def _fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)


NEEDED = accesses(permissions(event_namespace="default", out_of_service=False))
NEEDED += lease_permissions("kube-system", "nlc")


def check(reviews: FakeReviews, stop: asyncio.Event | None = None) -> Any:
    return asyncio.run(check_access(reviews, NEEDED, stop or asyncio.Event(), FakeClock()))


def problem_of(result: Any) -> str | None:
    """The old single-string verdict: None when nothing is missing."""
    if isinstance(result, list):
        return "missing RBAC permissions: " + "; ".join(map(str, result)) if result else None
    return result  # type: ignore[no-any-return]


def test_missing_permissions_are_listed() -> None:
    denied = {"delete nodes", "update leases.coordination.k8s.io/nlc in namespace kube-system"}
    problem = problem_of(check(FakeReviews(denied=denied)))
    assert problem is not None
    assert "delete nodes" in problem
    assert "update leases.coordination.k8s.io/nlc" in problem


def test_rejected_credentials_are_a_precondition_failure() -> None:
    problem = check(FakeReviews(errors=[ke.Unauthorized(401, "Unauthorized", "bad token")]))
    assert isinstance(problem, str)
    assert "401" in problem


def test_credentials_that_cannot_be_obtained_are_not_called_rejected() -> None:
    """An exec plugin that does not run sends no request: no 401 was ever answered."""
    error = ke.Unauthorized(401, "CredentialError", "exec plugin /nonexist failed to run")
    problem = check(FakeReviews(errors=[error]))
    assert (
        problem
        == "no Kubernetes credentials could be obtained: exec plugin /nonexist failed to run"
    )


def test_all_permissions_present_passes() -> None:
    assert check(FakeReviews()) == []


def test_transient_errors_are_retried_and_reported_until_the_api_answers() -> None:
    clock, seen = FakeClock(), list[str]()
    errors: list[ke.ApiError] = [ke.Transient(0, "StreamBroken", "connection refused")] * 5

    async def scenario() -> Any:
        check = asyncio.ensure_future(check_access(
            FakeReviews(errors=list(errors)), NEEDED, asyncio.Event(), clock,
            on_error=seen.append,
        ))  # fmt: skip
        await clock.advance(600)  # far beyond a minute: no give-up
        return await check

    assert asyncio.run(scenario()) == []
    assert len(seen) == 5
    assert "connection refused" in seen[-1]


class InstantClock(SystemClock):
    """Backoff sleeps return at once; `stop` (if given) is set by the first one."""

    def __init__(self, stop: asyncio.Event | None = None) -> None:
        self.stop, self.slept = stop, 0

    async def sleep(self, seconds: float) -> None:
        self.slept += 1
        if self.stop is not None:
            self.stop.set()
        await asyncio.sleep(0)


def refused() -> ke.Transient:
    return ke.Transient(0, "ConnectionError", "[Errno 111] Connection refused")


def test_a_stop_while_waiting_for_the_api_server_ends_the_check_without_a_verdict() -> None:
    stop = asyncio.Event()
    reviews = FakeReviews(errors=[refused() for _ in range(1000)])
    assert asyncio.run(check_access(reviews, NEEDED, stop, InstantClock(stop))) is None
    assert len(reviews.requests) == 1


def test_an_unanswering_api_server_is_retried_until_the_review_passes() -> None:
    reviews, clock = FakeReviews(errors=[refused() for _ in range(5)]), InstantClock()
    assert asyncio.run(check_access(reviews, NEEDED, asyncio.Event(), clock)) == []
    assert clock.slept == 5


# ---------------------------------------------------------------- few requests

EVERYTHING: list[Rule] = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
CONTROLLER_ROLE: list[Rule] = [
    {"verbs": ["get", "list", "watch", "delete"], "apiGroups": [""], "resources": ["nodes"]},
    {"verbs": ["create", "patch"], "apiGroups": [""], "resources": ["events"]},
]
LEASE_ROLE: list[Rule] = [
    {"verbs": ["create"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"]},
    {"verbs": ["get", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "resourceNames": ["nlc"]},
]  # fmt: skip


def test_one_rules_review_per_namespace_and_no_access_review() -> None:
    reviews = FakeReviews({"default": CONTROLLER_ROLE, "kube-system": LEASE_ROLE})
    assert check(reviews) == []
    assert reviews.requests == ["rules default", "rules kube-system"]


def test_cluster_scoped_permissions_alone_take_one_request() -> None:
    reviews = FakeReviews({"default": EVERYTHING})
    nodes = [Access("list", "nodes"), Access("patch", "nodes", subresource="status")]
    assert asyncio.run(check_access(reviews, nodes, asyncio.Event(), FakeClock())) == []
    assert reviews.requests == ["rules default"]


def test_what_no_rule_grants_is_asked_with_an_access_review() -> None:
    lease = "create leases.coordination.k8s.io in namespace kube-system"
    reviews = FakeReviews({"default": CONTROLLER_ROLE}, denied={lease})
    missing = check(reviews)
    assert [str(m) for m in missing] == [lease]
    assert reviews.requests.count("rules kube-system") == 1
    assert len([r for r in reviews.requests if r.startswith("access ")]) == 3


class RefusedRules(FakeReviews):
    async def rules(self, namespace: str) -> Sequence[Rule]:
        self.requests.append(f"rules {namespace}")
        raise ke.Invalid(400, "BadRequest", "no rules reviews here")


def test_a_refused_rules_review_falls_back_to_one_access_review_each() -> None:
    reviews = RefusedRules()
    assert check(reviews) == []
    assert len([r for r in reviews.requests if r.startswith("access ")]) == len(NEEDED)


def test_rules_match_verbs_groups_subresources_and_names() -> None:
    status = Access("patch", "nodes", subresource="status")
    assert is_granted(
        status, [{"verbs": ["patch"], "apiGroups": [""], "resources": ["nodes/status"]}]
    )
    assert is_granted(status, [{"verbs": ["patch"], "apiGroups": [""], "resources": ["nodes/*"]}])
    assert not is_granted(status, [{"verbs": ["patch"], "apiGroups": [""], "resources": ["nodes"]}])
    named = Access("get", "leases", "coordination.k8s.io", "ns", "nlc")
    assert is_granted(named, LEASE_ROLE)
    assert not is_granted(Access("get", "leases", "coordination.k8s.io", "ns", "x"), LEASE_ROLE)
    assert not is_granted(Access("delete", "nodes", "apps"), CONTROLLER_ROLE)
