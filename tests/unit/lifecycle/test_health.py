"""Scope, population, episodes and NotReady age, re-check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from local_ccm.labels import parse_label_selector
from local_ccm.lifecycle.core.health import (
    Episode,
    Protection,
    Scope,
    assess,
    classify,
    in_population,
    is_unhealthy,
    not_ready_since,
    parse_protected,
    recheck,
    track_episodes,
)
from local_ccm.validate import ValidationError
from tests.fakes.lifecycle import CONTROL_PLANE, NOW, node

TIMEOUT = 10.0
ALL_WORKERS = Scope(watch_autoscaler_taint=False)
SPOT = Scope(selector=parse_label_selector("pool=spot"))
NO_EXECUTE = {"key": "ToBeDeletedByClusterAutoscaler", "value": "x", "effect": "NoExecute"}


def status(scope: Scope, **kwargs: Any) -> str:
    return classify(node("n", **kwargs), scope, None, NOW, TIMEOUT).status


# ------------------------------------------------------------------ scope and exclusions
@pytest.mark.parametrize(
    ("scope", "kwargs", "expected"),
    [
        (Scope(), {}, "eligible"),  # l01: the default eligible Node
        (Scope(), {"taints": ()}, "out_of_scope"),  # l04: untainted
        (Scope(), {"taints": (NO_EXECUTE,)}, "out_of_scope"),  # l05: other effect
        (ALL_WORKERS, {"taints": ()}, "eligible"),  # l06 w2
        (ALL_WORKERS, {"labels": {"node-role.kubernetes.io/master": ""}}, "excluded"),  # l06 cp1
        (SPOT, {"taints": (), "labels": {"pool": "spot"}}, "eligible"),  # l07 s1
        (SPOT, {}, "out_of_scope"),  # l07 t1: tainted, not selected
        (SPOT, {"labels": {"pool": "spot", **CONTROL_PLANE}}, "excluded"),  # l07 s2
        (Scope(), {"deleting": NOW}, "excluded"),
        (Scope(own_node="n"), {}, "excluded"),
        (Scope(), {"ready": "True"}, "ready"),  # l03
        (Scope(), {"since": NOW - timedelta(seconds=2)}, "waiting"),  # l02
    ],
)
def test_l01_l07_scope_and_exclusions(scope: Scope, kwargs: dict[str, Any], expected: str) -> None:
    assert status(scope, **kwargs) == expected


def test_control_plane_label_value_does_not_matter() -> None:
    assert status(ALL_WORKERS, labels={"node-role.kubernetes.io/control-plane": "false"}) == (
        "excluded"
    )


# ------------------------------------------------------------------ protection
def test_parse_protected_trims_drops_empty_and_splits_on_first_equals() -> None:
    assert parse_protected(" a , ,team=db, x/y=a=b ,k=") == (
        Protection("a"), Protection("team", "db"), Protection("x/y", "a=b"), Protection("k", ""),
    )  # fmt: skip


@pytest.mark.parametrize("entry", ["tier = gold", "tier =gold", "tier= gold"])
def test_parse_protected_refuses_spaces_around_the_equals_sign(entry: str) -> None:
    """The value " gold" matches no label: the entry would protect nothing, silently."""
    with pytest.raises(ValidationError, match=r"no spaces around '=' \(write tier=gold\)"):
        parse_protected(f"a,{entry}")


def test_parse_protected_rejects_an_invalid_key() -> None:
    with pytest.raises(ValidationError, match="Bad Key"):
        parse_protected("ok,Bad Key=1")


@pytest.mark.parametrize(
    ("entries", "labels", "annotations", "protected"),
    [
        # l12 p1: a bare key matches any value, even "false" [compat]
        ("cluster-autoscaler.kubernetes.io/scale-down-disabled,team=db",
         {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "false"}, None, True),
        ("cluster-autoscaler.kubernetes.io/scale-down-disabled,team=db",
         {"team": "web"}, None, False),  # l12 p2
        ("team=db", {"team": "db"}, None, True),
        ("team=", {"team": ""}, None, True),
        ("team=", {"team": "db"}, None, False),
        # l13: an annotation protects a Node with no labels at all [fix]
        ("kilo.squat.ai/leader", None, {"kilo.squat.ai/leader": "true"}, True),
        ("team=db", {"other": "x"}, {"team": "db"}, True),
        ("team=db", {"team": "web"}, {"team": "db"}, True),  # checked independently
    ],
)  # fmt: skip
def test_l12_l13_protection(
    entries: str, labels: dict[str, str] | None, annotations: dict[str, str] | None,
    protected: bool,
) -> None:  # fmt: skip
    scope = Scope(protected=parse_protected(entries))
    got = status(scope, labels=labels, annotations=annotations)
    assert got == ("protected" if protected else "eligible")


def test_protection_does_not_change_the_notready_age() -> None:
    scope = Scope(protected=parse_protected("hold"))
    since = NOW - timedelta(seconds=600)
    protected = classify(node("n", since=since, labels={"hold": ""}), scope, None, NOW, TIMEOUT)
    released = classify(node("n", since=since), scope, None, NOW, TIMEOUT)
    assert protected.status == "protected"
    assert (released.status, released.age) == ("eligible", 600.0)


# ------------------------------------------------------------------ population
def test_population_ignores_the_taint_filter_but_not_the_selector_or_control_plane() -> None:
    assert in_population(node("w", taints=()), Scope())
    assert not in_population(node("w", labels=CONTROL_PLANE), Scope())
    assert not in_population(node("w", labels={"pool": "x"}), SPOT)


@pytest.mark.parametrize(
    ("kwargs", "unhealthy"),
    [
        ({"taints": ()}, True),
        ({"taints": (), "ready": "True"}, False),
        ({}, False),  # autoscaler-tainted NoSchedule
        ({"taints": (NO_EXECUTE,)}, False),  # any effect
        ({"taints": (), "deleting": NOW}, False),
    ],
)
def test_unhealthy(kwargs: dict[str, Any], unhealthy: bool) -> None:
    assert is_unhealthy(node("w", **kwargs)) is unhealthy


def test_l22_assess_counts_population_and_unhealthy() -> None:
    nodes = [node("z")] + [node(f"r{i}", taints=(), ready="True") for i in range(4)]
    nodes += [node(f"u{i}", taints=()) for i in range(5)]
    nodes += [node("cp", labels=CONTROL_PLANE, taints=())]
    assessment = assess(nodes, Scope(), {}, NOW, TIMEOUT)
    assert (assessment.population, assessment.unhealthy) == (10, 5)
    assert [h.node.name for h in assessment.eligible] == ["z"]
    assert (assessment.managed, assessment.managed_unhealthy) == (1, 1)


def test_l24_eligible_nodes_are_walked_oldest_first_ties_by_name() -> None:
    nodes = [
        node("c", since=NOW - timedelta(seconds=70)),
        node("b", since=NOW - timedelta(seconds=90)),
        node("a", since=NOW - timedelta(seconds=70)),
    ]
    eligible = assess(nodes, Scope(), {}, NOW, TIMEOUT).eligible
    assert [h.node.name for h in eligible] == ["b", "a", "c"]


# ------------------------------------------------------------------ timing
def test_l02_age_comes_from_last_transition_time() -> None:
    health = classify(node("n", since=NOW - timedelta(seconds=2)), Scope(), None, NOW, TIMEOUT)
    assert (health.status, health.t0, health.age) == ("waiting", NOW - timedelta(seconds=2), 2.0)
    view = node("n", since=NOW - timedelta(seconds=2))
    assert classify(view, Scope(), None, NOW + timedelta(seconds=7.9), TIMEOUT).status == "waiting"
    assert classify(view, Scope(), None, NOW + timedelta(seconds=8), TIMEOUT).status == "eligible"


def test_l14_missing_ready_condition_counts_from_creation() -> None:
    created = NOW - timedelta(seconds=9)
    view = node("n", ready=None, created=created)
    assert classify(view, Scope(), None, NOW, TIMEOUT).status == "waiting"
    assert classify(view, Scope(), None, NOW + timedelta(seconds=1), TIMEOUT).status == "eligible"


def test_a_future_timestamp_counts_as_now() -> None:
    view = node("n", since=NOW + timedelta(hours=1))
    assert not_ready_since(view, None, NOW) == NOW


def test_first_sighting_is_earlier_than_a_moved_transition_time() -> None:
    # False -> Unknown moves lastTransitionTime although the Node never became Ready
    episode = Episode("uid-n", "n", NOW - timedelta(seconds=30))
    view = node("n", since=NOW - timedelta(seconds=5))
    assert not_ready_since(view, episode, NOW) == NOW - timedelta(seconds=30)


def test_l16_a_restarted_process_keeps_the_countdown_from_the_api() -> None:
    # no in-memory episode after a restart: t0 still comes from lastTransitionTime [fix]
    view = node("n", since=NOW - timedelta(seconds=20))
    update = track_episodes({}, [view], NOW)
    health = classify(view, Scope(), update.episodes["uid-n"], NOW, 30.0)
    assert (health.status, health.age) == ("waiting", 20.0)
    later = NOW + timedelta(seconds=10)
    assert classify(view, Scope(), update.episodes["uid-n"], later, 30.0).status == "eligible"


def test_l17_a_recycled_name_is_a_new_episode() -> None:
    old = node("r1", uid="U1", since=NOW - timedelta(seconds=600))
    first = track_episodes({}, [old], NOW - timedelta(seconds=600))
    new = node("r1", uid="U2", since=NOW)
    second = track_episodes(first.episodes, [new], NOW)
    assert (second.started, second.ended) == (("U2",), ("U1",))
    health = classify(new, Scope(), second.episodes["U2"], NOW, 30.0)
    assert (health.status, health.age) == ("waiting", 0.0)


def test_l15_ready_in_between_ends_the_episode() -> None:
    start = track_episodes({}, [node("n", since=NOW - timedelta(seconds=8))], NOW)
    ready = track_episodes(start.episodes, [node("n", ready="True")], NOW + timedelta(seconds=1))
    assert ready.ended == ("uid-n",)
    again_at = NOW + timedelta(seconds=3)
    again = track_episodes(ready.episodes, [node("n", ready="False", since=again_at)], again_at)
    view = node("n", ready="False", since=again_at)
    episode = again.episodes["uid-n"]
    assert episode.first_observed == again_at
    assert classify(view, Scope(), episode, NOW + timedelta(seconds=12), TIMEOUT).status == (
        "waiting"
    )
    assert classify(view, Scope(), episode, NOW + timedelta(seconds=13), TIMEOUT).status == (
        "eligible"
    )


def test_deleted_node_ends_its_episode() -> None:
    start = track_episodes({}, [node("n")], NOW)
    assert track_episodes(start.episodes, [], NOW).ended == ("uid-n",)


# ------------------------------------------------------------------ re-check
def _recheck(fresh: Any, **kwargs: Any) -> str | None:
    options: dict[str, Any] = {"episode": None, "now": NOW, "timeout": TIMEOUT,
                               "breaker_open": False} | kwargs  # fmt: skip
    abort = recheck(fresh, "uid-n", Scope(), **options)
    return None if abort is None else f"{abort.result}: {abort.check}"


def test_recheck_passes_an_unchanged_eligible_node() -> None:
    assert _recheck(node("n")) is None


@pytest.mark.parametrize(
    ("fresh", "kwargs", "expected"),
    [
        (None, {}, "gone: the Node no longer exists"),
        (node("n", uid="other"), {}, "aborted: uid changed from uid-n to other"),  # l17
        (node("n", ready="True"), {}, "aborted: the Node is Ready"),  # l18
        (node("n", since=NOW), {}, "aborted: NotReady for only 0s (timeout 10s)"),
        (node("n", taints=()), {}, "aborted: no longer in scope"),
        (node("n", labels=CONTROL_PLANE), {}, "aborted: excluded (control_plane)"),
        (node("n", deleting=NOW), {}, "aborted: excluded (terminating)"),
        (node("n"), {"breaker_open": True}, "aborted: circuit breaker open"),
    ],
)
def test_l17_l18_recheck_aborts(fresh: Any, kwargs: dict[str, Any], expected: str) -> None:
    assert _recheck(fresh, **kwargs) == expected


def test_recheck_aborts_a_protected_node() -> None:
    abort = recheck(
        node("n", annotations={"hold": "1"}), "uid-n", Scope(protected=parse_protected("hold")),
        episode=None, now=NOW, timeout=TIMEOUT, breaker_open=False,
    )  # fmt: skip
    assert abort is not None
    assert abort.check == "protected by hold"
