"""ClusterCIDR readiness and finalizer decisions."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm.ipam.core.model import InvalidClusterCIDR, project_cluster_cidr
from local_ccm.ipam.core.status import plan_finalizer, pool_readiness
from tests.unit.ipam.builders import cc, cc_obj


def invalid(*, finalizer: bool = False, deleting: bool = False) -> InvalidClusterCIDR:
    view = project_cluster_cidr(
        cc_obj("zero-cap", "10.0.0.0/24", "", 10, finalizer=finalizer, deleting=deleting)
    )
    assert isinstance(view, InvalidClusterCIDR)
    return view


def test_ready_needs_a_persisted_finalizer() -> None:
    assert pool_readiness(cc("p", "10.0.0.0/16"))[0] == "Ready"
    assert pool_readiness(cc("p", "10.0.0.0/16", finalizer=False))[0] == "FinalizerPending"


def test_i34_invalid_and_frozen_pools_are_not_ready() -> None:
    reason, message = pool_readiness(invalid())
    assert reason == "Invalid"
    assert "perNodeHostBits must not exceed the host bits of ipv4" in message
    assert pool_readiness(cc("edited", "10.84.0.0/23", generation=2))[0] == "SpecChanged"


def test_i09_terminating_wins_over_spec_changed() -> None:
    assert pool_readiness(cc("p", "10.0.0.0/16", deleting=True, generation=2))[0] == "Terminating"


@pytest.mark.parametrize(
    ("kwargs", "owned", "action"),
    [
        ({}, 0, None),  # already has it: never re-sent
        ({"finalizer": False}, 0, "add"),
        ({"finalizer": False, "generation": 2}, 3, "add"),  # frozen pools still own CIDRs
        ({"deleting": True}, 2, None),  # I09: terminating while owning CIDRs
        ({"deleting": True}, 0, "remove"),
        ({"deleting": True, "finalizer": False}, 0, None),
    ],
)
def test_finalizer_decisions_for_valid_pools(
    kwargs: dict[str, Any], owned: int, action: str | None
) -> None:
    assert plan_finalizer(cc("p", "10.0.0.0/16", **kwargs), owned) == action


def test_i34_invalid_pool_never_gets_the_finalizer_and_loses_ours_on_deletion() -> None:
    assert plan_finalizer(invalid(), 0) is None
    assert plan_finalizer(invalid(finalizer=True), 0) is None
    assert plan_finalizer(invalid(finalizer=True, deleting=True), 5) == "remove"
    assert plan_finalizer(invalid(deleting=True), 0) is None
