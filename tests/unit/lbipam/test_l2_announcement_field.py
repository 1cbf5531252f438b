"""`spec.l2Announcement` of a pool: parsed and validated with the pool's other fields, and
never read by the allocator."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm.labels import LabelSelector, Requirement
from local_ccm.lbipam.core.allocator import Allocation, decide, hold
from local_ccm.lbipam.core.ledger import Ledger
from local_ccm.lbipam.core.pools import InvalidPool, Pool, parse_pool
from local_ccm.lbipam.core.service import ServiceRequest
from local_ccm.lbipam.core.status import desired_status
from local_ccm.lbpools import L2Announcement


def pool_obj(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"addresses": ["192.0.2.0/28"], **spec}}


def valid(obj: dict[str, Any]) -> Pool:
    parsed = parse_pool(obj)
    assert isinstance(parsed, Pool), parsed
    return parsed


def problems(obj: dict[str, Any]) -> tuple[str, ...]:
    parsed = parse_pool(obj)
    assert isinstance(parsed, InvalidPool), parsed
    return parsed.problems


def test_absent_means_the_pool_is_not_announced() -> None:
    assert valid(pool_obj()).l2_announcement is None


def test_an_empty_object_announces_on_every_node_on_the_on_link_interfaces() -> None:
    assert valid(pool_obj(l2Announcement={})).l2_announcement == L2Announcement(None, ())
    assert valid(pool_obj(l2Announcement={"interfaces": []})).l2_announcement == L2Announcement()


def test_selector_and_globs_are_kept_globs_once_each_in_their_order() -> None:
    spec = {
        "nodeSelector": {
            "matchLabels": {"edge": "true"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "a"]}],
        },
        "interfaces": ["bond*", "eth0", "bond*"],
    }
    got = valid(pool_obj(l2Announcement=spec)).l2_announcement
    assert got == L2Announcement(
        LabelSelector(
            (Requirement("edge", "In", ("true",)), Requirement("zone", "In", ("a", "b")))
        ),
        ("bond*", "eth0"),
    )
    assert got is not None
    assert got.node_selector is not None
    assert got.node_selector.matches({"edge": "true", "zone": "a"})
    assert not got.node_selector.matches({"edge": "true"})


def test_every_problem_is_listed_with_the_other_fields_problems() -> None:
    spec = {
        "nodeSelector": {
            "matchExpressions": [{"key": "a", "operator": "In"}, {"key": "", "operator": "Bogus"}]
        },
        "interfaces": ["", "eth/0", "eth 0", "eth[0", "averyveryverylongname", 7, "ok*"],
    }
    assert problems(pool_obj(priority="x", l2Announcement=spec)) == (
        "spec.priority: 'x' is not an integer",
        "spec.l2Announcement.nodeSelector.matchExpressions[0].values: In and NotIn need values, "
        "Exists and DoesNotExist take none",
        "spec.l2Announcement.nodeSelector.matchExpressions[1].key: must be a non-empty string",
        "spec.l2Announcement.nodeSelector.matchExpressions[1].operator: 'Bogus' is not one of "
        "('In', 'NotIn', 'Exists', 'DoesNotExist')",
        'spec.l2Announcement.interfaces[0]: "": empty: an interface name has at least one '
        "character",
        "spec.l2Announcement.interfaces[1]: \"eth/0\": interface names contain no '/' or "
        "whitespace",
        "spec.l2Announcement.interfaces[2]: \"eth 0\": interface names contain no '/' or "
        "whitespace",
        "spec.l2Announcement.interfaces[3]: \"eth[0\": unclosed '[' (a character class is "
        "written [...])",
        'spec.l2Announcement.interfaces[4]: "averyveryverylongname": can never match: interface '
        "names have at most 15 characters",
        "spec.l2Announcement.interfaces[5]: 7 is not a string",
    )


@pytest.mark.parametrize(
    ("l2", "problem"),
    [
        ("yes", "spec.l2Announcement: must be an object"),
        ({"interfaces": "eth0"}, "spec.l2Announcement.interfaces: must be a list"),
        ({"nodeSelector": []}, "spec.l2Announcement.nodeSelector: must be an object"),
    ],
)
def test_wrong_types_are_problems(l2: object, problem: str) -> None:
    assert problems(pool_obj(l2Announcement=l2)) == (problem,)


def test_an_invalid_l2_announcement_is_reported_in_ready_like_any_field() -> None:
    parsed = parse_pool(pool_obj(l2Announcement={"interfaces": ["eth[0"]}))
    assert isinstance(parsed, InvalidPool)
    ready = desired_status(parsed, {}, [])["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "Invalid")
    assert "spec.l2Announcement.interfaces[0]" in ready["message"]


def test_the_allocator_hands_out_the_same_addresses_with_or_without_the_field() -> None:
    def run(**extra: Any) -> list[tuple[str, ...]]:
        pools = [
            valid(pool_obj("a", priority=1, **extra)),
            valid(pool_obj("b", addresses=["192.0.2.3-192.0.2.4", "2001:db8::/120"])),
        ]
        ledger, got = Ledger(), []
        for name in "wxyz":
            request = ServiceRequest(
                key=f"ns/{name}", namespace="ns", families=(4, 6), family_policy="RequireDualStack"
            )
            decision = decide(request, pools, ledger, {})
            assert isinstance(decision, Allocation), decision
            hold(ledger, decision)
            got.append(tuple(str(a) for a in decision.addresses))
        return got

    plain = run()
    assert plain == run(l2Announcement={})
    assert plain == run(
        l2Announcement={"nodeSelector": {"matchLabels": {"a": "b"}}, "interfaces": ["eth0"]}
    )
    assert plain[0] == ("192.0.2.3", "2001:db8::1")
