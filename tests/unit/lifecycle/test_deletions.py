"""The deletion pipeline driven through `Sim`, the loop's part played synchronously."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from local_ccm.labels import parse_label_selector
from local_ccm.lifecycle.core.deletions import (
    breaker,
    breaker_threshold,
    is_fresh,
    may_start_probe,
    rate_tokens,
)
from local_ccm.lifecycle.core.health import Scope, parse_protected
from local_ccm.lifecycle.core.model import ICMP, Family, NodeView, Verdict, tcp
from local_ccm.lifecycle.core.state import (
    DRY_RUN_PREFIX,
    DeleteAction,
    EventAction,
    PipelineSettings,
    PipelineState,
    ProbeRecord,
    dry_run_message,
    forget,
    record_attempt,
    record_probe,
    self_check_result,
)
from local_ccm.validate import CountOrPercent, parse_count_or_percent
from tests.fakes.lifecycle import NOW, FakeProber, Sim, node

FAST = PipelineSettings(
    interval=1.0, max_unhealthy=CountOrPercent(100, percent=True), self_check=False
)


def sim(*nodes_: NodeView, settings: PipelineSettings = FAST, **kwargs: Any) -> Sim:
    return Sim(list(nodes_), settings, **kwargs)


# ------------------------------------------------------------------ breaker arithmetic
@pytest.mark.parametrize(
    ("limit", "population", "threshold"),
    [("40%", 10, 4), ("40%", 1, 1), ("40%", 0, 1), ("0%", 10, 0), ("3", 10, 3),
     ("100%", 7, 7), ("55%", 9, 4), ("0", 5, 0)],
)  # fmt: skip
def test_breaker_threshold(limit: str, population: int, threshold: int) -> None:
    assert breaker_threshold(parse_count_or_percent(limit), population) == threshold


def test_breaker_opens_only_above_the_threshold() -> None:
    limit = parse_count_or_percent("40%")
    assert not breaker(limit, 10, 4).open
    assert breaker(limit, 10, 5).open


@pytest.mark.parametrize(
    ("limit", "cluster", "why"),
    [("40%", (1, 1, 1), "every Node NotReady (1)"),
     ("40%", (4, 4, 0), "every Node NotReady (4)"),  # autoscaler's or not: a shared fault
     ("40%", (13, 10, 10), "cluster U=10 T=5 N=13"),
     ("40%", (4, 1, 1), ""), ("100%", (1, 1, 1), ""), ("3", (3, 3, 3), ""),
     ("2", (3, 3, 3), "every Node NotReady (3)")],
)  # fmt: skip
def test_the_whole_cluster_opens_the_breaker_too(
    limit: str, cluster: tuple[int, int, int], why: str
) -> None:
    """A population of one (one worker, or the Nodes a --node-selector picks) could never open
    it on its own counts; every Node NotReady, or the cluster's unhealthy count over the same
    limit, does. A limit that allows every Node to be unhealthy turns both off."""
    opened = breaker(parse_count_or_percent(limit), 1, 1, cluster)
    assert (opened.open, opened.why) == (bool(why), why)


def test_a_lone_worker_of_a_cluster_all_notready_is_not_deleted() -> None:
    """A hosted control plane and one worker, cut off from each other: no peer for the
    self-check, a population of one; nothing is deleted."""
    settings = replace(FAST, max_unhealthy=parse_count_or_percent("40%"), self_check=True)
    s = sim(node("w1", taints=()), settings=settings, scope=Scope(watch_autoscaler_taint=False))
    s.run(3)
    assert (s.deleted, s.probe_batches) == ([], 0)
    assert str(s.plans[-1].breaker) == "U=1 T=1 N=1; every Node NotReady (1)"


def test_with_a_node_selector_only_the_selected_nodes_count() -> None:
    """Its watch sees only the selected Nodes (the manager's shared watch selects as the
    API server would): what lies beyond is not known, so neither whole-cluster rule applies,
    and a lone selected Node that is dead is deleted, as the demo's is."""
    settings = replace(FAST, max_unhealthy=parse_count_or_percent("40%"))
    scope = Scope(watch_autoscaler_taint=False, selector=parse_label_selector("pool=a"))
    s = sim(node("a0", taints=(), labels={"pool": "a"}), settings=settings, scope=scope)
    s.run(3)
    assert s.deleted_names() == ["a0"]
    assert str(s.plans[0].breaker) == "U=1 T=1 N=1"
    assert not any(plan.breaker.open for plan in s.plans)


# ------------------------------------------------------------------ probe scheduling
def test_probe_scheduling_at_most_once_per_interval_never_twice_at_once() -> None:
    assert may_start_probe(None, 0.0, 1.0)
    running = ProbeRecord(started=0.0)
    assert not may_start_probe(running, 5.0, 1.0)
    done = replace(running, running=False, finished=0.4)
    assert not may_start_probe(done, 0.9, 1.0)
    assert may_start_probe(done, 1.0, 1.0)


def test_verdict_is_valid_for_one_interval_after_completion() -> None:
    done = ProbeRecord(started=0.0, running=False, finished=0.5)
    assert is_fresh(done, 1.4, 1.0)
    assert not is_fresh(done, 1.5, 1.0)
    assert not is_fresh(ProbeRecord(started=0.0), 0.1, 1.0)


def test_rate_tokens_count_a_sliding_window() -> None:
    assert rate_tokens([10.0, 12.0], now=12.5, interval=3.0, limit=2) == 0
    assert rate_tokens([10.0, 12.0], now=13.0, interval=3.0, limit=2) == 1


@pytest.mark.parametrize(
    ("verdicts", "result"),
    [((), "skipped"), (("unreachable", "reachable"), "passed"),
     (("unreachable", "unknown"), "failed")],
)  # fmt: skip
def test_self_check_result(verdicts: tuple[Verdict, ...], result: str) -> None:
    assert self_check_result(verdicts) == result


# ------------------------------------------------------------------ scenarios
def test_l01_unreachable_eligible_node_is_probed_then_deleted() -> None:
    s = sim(node("w1"))
    first = s.evaluate()
    assert [d.step for d in first.decisions] == ["probing"]
    assert [(p.name, tuple(map(str, p.addresses)), p.kinds) for p in first.probes] == [
        ("w1", ("198.51.100.9",), (ICMP,))
    ]
    assert [e.reason for e in first.events] == ["CheckingReachability"]
    s.finish_probes(first)
    second = s.evaluate()
    assert [d.step for d in second.decisions] == ["delete"]
    (action,) = second.deletions
    assert (action.name, action.uid, action.dry_run, action.t0) == (
        "w1", "uid-w1", False, NOW - timedelta(seconds=60),
    )  # fmt: skip
    assert action.summary == "icmp 198.51.100.9: no_reply"
    s.perform(second)
    assert s.deleted_names() == ["w1"]


def test_l03_l04_nodes_outside_eligibility_are_never_probed() -> None:
    s = sim(node("ready", ready="True"), node("untainted", taints=()))
    s.run(5)
    assert (s.probe_batches, s.deleted, s.events) == (0, [], [])


def test_l08_reachable_node_is_kept_with_one_event_and_a_probe_per_interval() -> None:
    s = sim(node("w1", addresses=[("InternalIP", "127.0.0.2")]),
            prober=FakeProber({"127.0.0.2": "reply"}))  # fmt: skip
    s.run(5)
    assert s.deleted == []
    assert s.event_reasons() == ["CheckingReachability", "NodeReachable"]
    assert 5 <= s.probe_batches <= 6
    assert s.state.skipped == frozenset({("uid-w1", "reachable")})


def test_l09_any_reply_of_any_address_wins() -> None:
    addresses = [("InternalIP", "198.51.100.7"), ("InternalIP", "::1")]
    s = sim(node("w1", addresses=addresses), prober=FakeProber({"::1": "reply"}))
    s.run(3)
    assert s.deleted == []


def test_l10_dual_stack_unreachable_node_is_deleted() -> None:
    addresses = [("InternalIP", "198.51.100.8"), ("InternalIP", "2001:db8::8")]
    s = sim(node("w1", addresses=addresses))
    s.tick()
    assert s.deleted_names() == ["w1"]


def test_l11_tcp_refused_counts_as_a_reply() -> None:
    settings = replace(FAST, kinds=(tcp(10250),))
    s = sim(
        node("a", addresses=[("InternalIP", "127.0.0.3")]),
        node("b", addresses=[("InternalIP", "127.0.0.4")]),
        node("c", addresses=[("InternalIP", "198.51.100.9")]),
        settings=replace(settings, max_deletions=3),
        prober=FakeProber({"127.0.0.3": "reply", "127.0.0.4": "reply"}),
    )
    s.run(2)
    assert s.deleted_names() == ["c"]


@pytest.mark.parametrize(
    ("addresses", "families", "event"),
    [
        ([("Hostname", "n1")], ("ipv4", "ipv6"), "NoProbeAddress"),  # l30 n1
        ([("InternalIP", "2001:db8::9")], ("ipv4",), "NoProbeAddress"),  # l34
    ],
)
def test_l30_l34_no_probe_address_never_deletes(
    addresses: list[tuple[str, str]], families: tuple[Family, ...], event: str
) -> None:
    s = sim(node("n1", addresses=addresses), settings=replace(FAST, families=families))
    s.run(5)
    assert (s.deleted, s.probe_batches) == ([], 0)
    assert s.event_reasons() == [event]
    assert s.plans[-1].decisions[0].step == "no_address"


def test_l26_probe_error_is_unknown_and_never_deletes() -> None:
    s = sim(node("w1"), prober=FakeProber({"198.51.100.9": "error"}))
    s.run(5)
    assert s.deleted == []
    assert s.event_reasons() == ["CheckingReachability", "ProbeFailed"]
    assert s.state.skipped == frozenset({("uid-w1", "unknown")})


def test_no_route_is_unknown_and_never_deletes() -> None:
    s = sim(node("w1"), prober=FakeProber({"198.51.100.9": "no_route"}))
    s.run(3)
    assert s.deleted == []


def test_l22_circuit_breaker_blocks_without_probing_then_holds_one_interval() -> None:
    nodes = [node("z")] + [node(f"r{i}", taints=(), ready="True") for i in range(4)]
    nodes += [node(f"u{i}", taints=()) for i in range(5)]
    settings = replace(FAST, max_unhealthy=parse_count_or_percent("40%"))
    s = sim(*nodes, settings=settings)
    s.run(3)
    assert (s.deleted, s.probe_batches) == ([], 0)
    assert s.event_reasons("z") == ["DeletionBlockedByCircuitBreaker"]
    opened = s.plans[-1].breaker
    assert (opened.open, str(opened)) == (True, "U=5 T=4 N=10")
    s.replace("u0", node("u0", taints=(), ready="True"))
    s.replace("u1", node("u1", taints=(), ready="True"))
    closed_at = s.mono + 0.5
    s.tick(0.5)
    closed = s.plans[-1].breaker
    assert (closed.open, s.deleted) == (False, [])
    assert s.plans[-1].decisions[0].step == "breaker_hold"
    s.run(2, step=0.25)
    assert s.deleted_names() == ["z"]
    assert s.deleted[0][0] >= closed_at + 1.0


def test_l23_self_check_blocks_during_own_partition_then_passes() -> None:
    peers = [
        node(f"p{i}", taints=(), ready="True", addresses=[("InternalIP", f"198.51.100.2{i}")])
        for i in range(3)
    ]
    settings = replace(FAST, self_check=True)
    s = sim(node("w1"), *peers, settings=settings, prober=FakeProber({"127.0.0.5": "reply"}))
    s.run(3)
    assert s.deleted == []
    assert "DeletionBlockedBySelfCheck" in s.event_reasons("w1")
    assert s.state.self_check is not None
    assert s.state.self_check.result == "failed"
    s.replace("p1", node("p1", taints=(), ready="True", addresses=[("InternalIP", "127.0.0.5")]))
    s.run(3)
    assert s.deleted_names() == ["w1"]


def test_self_check_never_uses_the_own_node_and_is_skipped_without_peers() -> None:
    own = node("me", taints=(), ready="True", addresses=[("InternalIP", "127.0.0.5")])
    s = sim(node("w1"), own, settings=replace(FAST, self_check=True), scope=Scope(own_node="me"),
            prober=FakeProber({"127.0.0.5": "reply"}))  # fmt: skip
    s.tick()
    assert s.deleted_names() == ["w1"]
    assert s.state.self_check is not None
    assert (s.state.self_check.result, s.state.self_check.peers) == ("skipped", ())


def test_l24_rate_limit_deletes_oldest_first_one_per_interval() -> None:
    nodes = [node(n, since=NOW - timedelta(seconds=age))
             for n, age in (("c", 70), ("a", 90), ("b", 80))]  # fmt: skip
    s = sim(*nodes, settings=replace(FAST, interval=3.0))
    s.run(12, step=0.5)
    assert s.deleted_names() == ["a", "b", "c"]
    times = [t for t, _ in s.deleted]
    assert all(later - earlier >= 3.0 for earlier, later in itertools.pairwise(times))
    assert "DeletionRateLimited" in s.event_reasons("b")
    assert "DeletionRateLimited" in s.event_reasons("c")
    assert s.event_reasons("c").count("DeletionRateLimited") == 1


def test_l25_dry_run_decides_once_per_episode_and_consumes_tokens() -> None:
    s = sim(node("a", since=NOW - timedelta(seconds=90)), node("b"),
            settings=replace(FAST, dry_run=True, interval=3.0))  # fmt: skip
    s.run(15)
    assert s.deleted == []
    assert s.dry_runs == ["a", "b"]
    assert s.deleted == []
    assert [p.decisions for p in s.plans if any(d.step == "delete" for d in p.decisions)]
    last = {d.name: d.step for d in s.plans[-1].decisions}
    assert last == {"a": "dry_run_done", "b": "dry_run_done"}


def test_l29_unprobed_mode_deletes_without_probes_or_self_check() -> None:
    s = sim(node("w1"), settings=replace(FAST, kinds=(), self_check=True))
    plan = s.evaluate()
    assert (plan.probes, plan.self_check_probes) == ((), ())
    assert plan.deletions[0].summary == "unprobed mode"
    s.perform(plan)
    assert s.deleted_names() == ["w1"]


def test_l18_recovery_between_probe_and_delete_aborts_and_returns_the_token() -> None:
    s = sim(node("a", since=NOW - timedelta(seconds=90)), node("b"),
            settings=replace(FAST, interval=30.0))  # fmt: skip
    s.finish_probes(s.evaluate())
    plan = s.evaluate()
    assert [d.name for d in plan.deletions] == ["a"]
    s.replace("a", node("a", ready="True"))
    s.perform(plan)
    assert s.aborts == [("a", "the Node is Ready")]
    s.tick(0.1)
    assert s.deleted_names() == ["b"]  # the aborted attempt gave its token back


def test_l17_recycled_name_during_a_probe_is_not_deleted() -> None:
    s = sim(node("r1", uid="U1"), settings=replace(FAST, interval=1.0), timeout=30.0)
    first = s.evaluate()
    s.replace("r1", node("r1", uid="U2", since=s.wall))
    s.finish_probes(first)  # the result for U1 arrives after U1 is gone
    s.run(10)
    assert s.deleted == []
    assert "U1" not in s.state.probes


def test_probe_result_of_a_node_that_stopped_being_eligible_is_ignored() -> None:
    scope = Scope(protected=parse_protected("hold"))
    s = sim(node("w1"), scope=scope)
    first = s.evaluate()
    s.replace("w1", node("w1", labels={"hold": ""}))
    s.evaluate()
    s.finish_probes(first)
    assert s.state.probes == {}
    s.replace("w1", node("w1"))
    plan = s.evaluate()
    assert [d.step for d in plan.decisions] == ["probing"]  # a new probe, not the old verdict


def test_a_stale_verdict_is_not_used() -> None:
    s = sim(node("w1"), settings=replace(FAST, self_check=False, interval=1.0))
    s.finish_probes(s.evaluate())
    s.advance(1.0)
    plan = s.evaluate()
    assert plan.deletions == ()
    assert [d.step for d in plan.decisions] == ["probing"]


def test_events_are_sent_once_per_episode_and_again_in_a_new_one() -> None:
    s = sim(node("w1", addresses=[("Hostname", "w1")]))
    s.run(3)
    s.replace("w1", node("w1", ready="True", addresses=[("Hostname", "w1")]))
    s.tick(1)
    s.replace("w1", node("w1", since=s.wall, addresses=[("Hostname", "w1")]))
    s.run(12)  # past the 10 s timeout of the new episode
    assert s.event_reasons() == ["NoProbeAddress", "NoProbeAddress"]


def test_a_node_seen_ready_is_credited_no_more_than_since_then() -> None:
    """Its Ready condition says NotReady for 60 s, but this process saw it Ready 1 s ago: the
    writer's clock is ahead of this host's (or this host's behind). It waits the timeout from
    what this process saw, not from the skewed timestamp."""
    s = sim(node("w1", ready="True"))
    s.tick(1)
    s.replace("w1", node("w1", since=s.wall - timedelta(seconds=60)))
    s.tick(1)
    assert [d.step for d in s.plans[-1].decisions] == []  # waiting: not eligible yet
    s.run(8)
    assert s.probe_batches == 0
    s.run(3)
    assert s.probe_batches >= 1  # eligible once 10 s have passed since it was seen Ready


def test_a_ready_condition_that_appears_later_credits_its_older_transition() -> None:
    """First seen without a Ready condition (just registered), then with Ready=Unknown since
    60 s: the older reading counts, as the earliest of the two times did before."""
    s = sim(node("w1", ready=None, created=NOW))
    s.tick(1)
    assert s.probe_batches == 0
    s.replace("w1", node("w1", since=s.wall - timedelta(seconds=60), created=NOW))
    s.tick(1)
    assert s.probe_batches >= 1


def test_a_false_to_unknown_transition_keeps_the_countdown() -> None:
    s = sim(node("w1", ready="False", since=NOW - timedelta(seconds=8)))
    s.tick(1)
    s.replace("w1", node("w1", ready="Unknown", since=s.wall))
    s.tick(1)
    assert s.probe_batches >= 1  # 8 + 2 s: the timeout (10 s) is reached, not restarted


def test_a_wall_clock_step_does_not_shorten_the_countdown() -> None:
    s = sim(node("w1", since=NOW))
    s.tick(1)
    s.wall += timedelta(hours=1)  # NTP steps the wall clock; the monotonic clock does not
    s.tick(1)
    assert s.probe_batches == 0
    assert [d.step for d in s.plans[-1].decisions] == []


def test_a_ready_stretch_missed_between_two_sightings_starts_a_new_episode() -> None:
    """Seen NotReady 20 s ago, then (unseen) Ready, now NotReady again with a transition 2 s
    old: the countdown starts again at that transition."""
    s = sim(node("w1", since=NOW))
    s.tick(1)
    s.advance(20)
    s.replace("w1", node("w1", since=s.wall - timedelta(seconds=2)))
    s.tick(0)
    assert s.probe_batches == 0
    assert [d.step for d in s.plans[-1].decisions] == []
    s.run(9)
    assert s.probe_batches >= 1


def test_record_attempt_precondition_failure_returns_the_token_and_allows_retry() -> None:
    state = PipelineState(starts=((1.0, "u1"), (1.0, "u2")), attempts={"u1": "running"})
    after = record_attempt(state, "u1", "precondition_failed")
    assert (after.starts, after.attempts) == (((1.0, "u2"),), {})


def test_record_attempt_keeps_the_token_of_a_sent_delete() -> None:
    state = PipelineState(starts=((1.0, "u1"),), attempts={"u1": "running"})
    assert record_attempt(state, "u1", "failed").starts == ((1.0, "u1"),)


def test_forget_drops_per_uid_state_but_not_started_deletions() -> None:
    state = PipelineState(
        probes={"u1": ProbeRecord(0.0), "u2": ProbeRecord(0.0)},
        starts=((1.0, "u1"),), attempts={"u1": "dry_run_done"},
        announced=frozenset({("u1", "NodeReachable"), ("u2", "NodeReachable")}),
        skipped=frozenset({("u1", "reachable")}),
    )  # fmt: skip
    after = forget(state, {"u1"})
    assert set(after.probes) == {"u2"}
    assert (after.attempts, after.skipped, after.starts) == ({}, frozenset(), ((1.0, "u1"),))
    assert after.announced == frozenset({("u2", "NodeReachable")})


def test_late_probe_result_after_forget_is_ignored() -> None:
    assert record_probe(PipelineState(), "u1", [], 5.0) == PipelineState()


def test_dry_run_message_has_the_compat_prefix() -> None:
    action = DeleteAction("uid-w1", "w1", NOW, 61.4, "icmp 198.51.100.9: no_reply", True, False)
    assert dry_run_message(action) == (
        f"{DRY_RUN_PREFIX} w1 uid=uid-w1 t0=2026-11-21T12:00:00Z age=61s "
        "probes=icmp 198.51.100.9: no_reply"
    )


def test_event_types() -> None:
    assert EventAction("u", "n", "ProbeFailed", "").type == "Warning"
    assert EventAction("u", "n", "NodeReachable", "").type == "Normal"
