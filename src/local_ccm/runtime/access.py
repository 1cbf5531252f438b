"""The start-up permission check every binary runs: one list of permissions, as few API requests
as possible.

A SelfSubjectRulesReview lists what the credentials may do in one namespace in one request:
the cluster-wide grants and that namespace's. One review per namespace the permissions name
(cluster-scoped permissions are looked up in the first). Rules reviews may be incomplete
(webhook authorizers answer only SelfSubjectAccessReviews) or refused, so a permission no rule
grants is asked with one SelfSubjectAccessReview before it counts as missing. With RBAC alone
that is one or two requests where one review per permission took six (the agent) to eleven (the
IPAM controller). A Role naming a cluster-scoped resource would pass for a grant here (RBAC
ignores it): the first real request then gets 403, which every loop already handles.

Policy: rejected credentials (401) end the check at once; any other error (the API server
unreachable, hung, answering errors) is retried with backoff until it passes or `stop` is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from local_ccm.clock import Clock, sleep_unless_stopped
from local_ccm.kube import errors as ke
from local_ccm.kube import resources as r
from local_ccm.kube.backoff import Backoff
from local_ccm.kube.nodes import Access
from local_ccm.kube.request import access_review, review_allowed

if TYPE_CHECKING:  # either async client
    from local_ccm.kube.loopclient import AsyncVerbs

log = logging.getLogger(__name__)
Obj = dict[str, Any]
ACCESS_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=30.0, jitter=0.2)
SELF_SUBJECT_RULES_REVIEWS = r.Resource(
    "authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False
)
DEFAULT_NAMESPACE = "default"  # where cluster-scoped permissions are looked up when none is named


def lease_permissions(namespace: str, name: str) -> tuple[Access, ...]:
    """What leader election on the Lease `namespace`/`name` needs."""
    group = "coordination.k8s.io"
    return (
        Access("get", "leases", group, namespace, name),
        Access("create", "leases", group, namespace),
        Access("update", "leases", group, namespace, name),
    )


# ---------------------------------------------------------------- pure: rules


def _matches(values: Iterable[str] | None, wanted: str) -> bool:
    listed = list(values or ())
    return "*" in listed or wanted in listed


def _resource_matches(resources: Iterable[str] | None, p: Access) -> bool:
    listed = set(resources or ())
    if not p.subresource:
        return bool(listed & {"*", p.resource})
    wanted = {"*", f"{p.resource}/{p.subresource}", f"{p.resource}/*", f"*/{p.subresource}"}
    return bool(listed & wanted)


def is_granted(permission: Access, rules: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a rule of a rules review's `status.resourceRules` allows `permission`."""
    for rule in rules:
        names = rule.get("resourceNames") or ()
        if (
            _matches(rule.get("verbs"), permission.verb)
            and _matches(rule.get("apiGroups"), permission.group)
            and _resource_matches(rule.get("resources"), permission)
            and (not names or permission.name in names)
        ):
            return True
    return False


# ---------------------------------------------------------------- the seam and its adapter


class Reviews(Protocol):
    async def rules(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        """The resource rules of a SelfSubjectRulesReview in `namespace`."""
        ...

    async def allowed(self, permission: Access) -> bool:
        """The verdict of one SelfSubjectAccessReview."""
        ...


class KubeReviews:
    """`Reviews` over the REST client (either async face)."""

    def __init__(self, client: AsyncVerbs, *, timeout: float | None = None) -> None:
        self._client, self._timeout = client, timeout

    async def rules(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": namespace}}  # fmt: skip
        review = await self._client.create(SELF_SUBJECT_RULES_REVIEWS, body, timeout=self._timeout)
        return list((review.get("status") or {}).get("resourceRules") or ())

    async def allowed(self, permission: Access) -> bool:
        p = permission
        body = access_review(p.verb, p.resource, group=p.group, namespace=p.namespace,
                             subresource=p.subresource, name=p.name)  # fmt: skip
        res = r.SELF_SUBJECT_ACCESS_REVIEWS
        return review_allowed(await self._client.create(res, body, timeout=self._timeout))


# ---------------------------------------------------------------- the check


async def read_missing(reviews: Reviews, permissions: Sequence[Access]) -> list[Access]:
    """The permissions these credentials lack: one rules review per namespace, one access
    review per permission no rule grants."""
    first = next((p.namespace for p in permissions if p.namespace), DEFAULT_NAMESPACE)
    rules: dict[str, Sequence[Mapping[str, Any]]] = {}
    missing = []
    for p in permissions:
        namespace = p.namespace or first
        if namespace not in rules:
            rules[namespace] = await _rules(reviews, namespace)
        if not is_granted(p, rules[namespace]) and not await reviews.allowed(p):
            missing.append(p)
    return missing


async def _rules(reviews: Reviews, namespace: str) -> Sequence[Mapping[str, Any]]:
    """No rules when the API refuses rules reviews (every permission is then asked alone)."""
    try:
        return await reviews.rules(namespace)
    except (ke.Forbidden, ke.NotFound, ke.Invalid) as exc:
        log.info("no rules review in namespace %s (%s): asking per permission", namespace, exc)
        return ()


async def check_access(
    reviews: Reviews,
    permissions: Sequence[Access],
    stop: asyncio.Event,
    clock: Clock,
    *,
    on_error: Callable[[str], None] | None = None,
) -> list[Access] | str | None:
    """The missing permissions ([] when all are there), the problem text when the credentials
    are rejected, None when `stop` was set first. Each transient error goes to `on_error`
    (the /readyz reason) and is retried after a backoff."""
    failures = 0
    while not stop.is_set():
        try:
            return await read_missing(reviews, permissions)
        except ke.Unauthorized as exc:
            if exc.reason == "CredentialError":  # no request was sent: the kubeconfig's doing
                return f"no Kubernetes credentials could be obtained: {exc.message}"
            return f"the Kubernetes credentials were rejected (401): {exc.message}"
        except ke.ApiError as exc:
            delay = ACCESS_BACKOFF.next_delay(failures, exc.retry_after)
            log.warning("checking permissions failed (%s); retry in %.1fs", exc, delay)
            if on_error is not None:
                on_error(str(exc))
            failures += 1
            await sleep_unless_stopped(clock, delay, stop)
    return None
