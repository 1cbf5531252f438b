"""The `LeaseApi` contract: what `FakeLeaseApi` and `KubeLeaseApi` must both do.

Each check gets a fresh `LeaseApi` bound to a Lease that does not exist yet. The unit
tier runs them against the fake, the integration tier against the real apiserver, so
the fake cannot drift from the server it stands in for.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from local_ccm.kube.errors import Conflict, NotFound
from local_ccm.lease.elector import LeaseApi

Check = Callable[[LeaseApi], Coroutine[Any, Any, None]]

SPEC: dict[str, Any] = {
    "holderIdentity": "node-a_0123456789abcdef",
    "leaseDurationSeconds": 4,
    "acquireTime": "2026-11-21T12:00:00.123456Z",
    "renewTime": "2026-11-21T12:00:00.123456Z",
    "leaseTransitions": 0,
}


def new_lease(api: LeaseApi, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": api.name, "namespace": api.namespace},
        "spec": {**SPEC, **spec},
    }


async def get_missing_is_not_found(api: LeaseApi) -> None:
    with pytest.raises(NotFound):
        await api.get()


async def create_then_get_returns_the_lease(api: LeaseApi) -> None:
    created = await api.create(new_lease(api))
    got = await api.get()
    assert created["metadata"]["resourceVersion"], created
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], got
    assert got["metadata"]["name"] == api.name, got
    assert got["spec"] == SPEC, got


async def create_existing_is_conflict(api: LeaseApi) -> None:
    await api.create(new_lease(api))
    with pytest.raises(Conflict):
        await api.create(new_lease(api, holderIdentity="node-b_fedcba9876543210"))
    assert (await api.get())["spec"]["holderIdentity"] == SPEC["holderIdentity"]


async def update_with_current_version_succeeds(api: LeaseApi) -> None:
    created = await api.create(new_lease(api))
    body = {**created, "spec": {**created["spec"], "renewTime": "2026-11-21T12:00:02.000001Z"}}
    updated = await api.update(body)
    assert updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert (await api.get())["spec"]["renewTime"] == "2026-11-21T12:00:02.000001Z"


async def update_with_stale_version_is_conflict(api: LeaseApi) -> None:
    stale = await api.create(new_lease(api))
    await api.update({**stale, "spec": {**stale["spec"], "leaseTransitions": 1}})
    with pytest.raises(Conflict):
        await api.update({**stale, "spec": {**stale["spec"], "holderIdentity": "thief"}})
    assert (await api.get())["spec"]["holderIdentity"] == SPEC["holderIdentity"]


async def update_of_a_missing_lease_creates_it(api: LeaseApi) -> None:
    # The apiserver's Lease strategy allows create-on-update, and then ignores the
    # resourceVersion precondition: a PUT never answers NotFound for a Lease.
    lease = new_lease(api)
    lease["metadata"]["resourceVersion"] = "12345"
    created = await api.update(lease)
    assert created["metadata"]["resourceVersion"], created
    assert (await api.get())["spec"] == SPEC


async def update_stores_the_whole_body(api: LeaseApi) -> None:
    # Annotations rather than spec.strategy: the server drops strategy/preferredHolder
    # unless the CoordinatedLeaderElection gate is on, and this contract is about storage.
    lease = new_lease(api)
    lease["metadata"]["annotations"] = {"test.local-ccm.io/note": "kept"}
    created = await api.create(lease)
    body = {**created, "spec": {**created["spec"], "holderIdentity": "node-b_fedcba9876543210"}}
    await api.update(body)
    got = await api.get()
    assert got["metadata"]["annotations"] == {"test.local-ccm.io/note": "kept"}, got
    assert got["spec"]["holderIdentity"] == "node-b_fedcba9876543210", got


CHECKS: list[Check] = [
    get_missing_is_not_found,
    create_then_get_returns_the_lease,
    create_existing_is_conflict,
    update_with_current_version_succeeds,
    update_with_stale_version_is_conflict,
    update_of_a_missing_lease_creates_it,
    update_stores_the_whole_body,
]


def check_id(check: Check) -> str:
    return getattr(check, "__name__", repr(check))
