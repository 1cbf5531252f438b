"""Hypothesis: the circuit breaker never lets a shared fault delete more than T Nodes."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from local_ccm.lifecycle.core.deletions import breaker_threshold
from local_ccm.lifecycle.core.health import Scope, is_unhealthy
from local_ccm.lifecycle.core.model import NodeView
from local_ccm.lifecycle.core.state import PipelineSettings
from local_ccm.validate import CountOrPercent
from tests.fakes.lifecycle import AUTOSCALER, NOW, Sim, node

limits = st.one_of(
    st.builds(CountOrPercent, st.integers(0, 100), st.just(True)),
    st.builds(CountOrPercent, st.integers(0, 12), st.just(False)),
)
# A step: ("fail" | "recover", node index) or ("tick", seconds).
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["fail", "recover"]), st.integers(0, 29)),
        st.tuples(st.just("tick"), st.sampled_from([0.5, 1.0, 3.0])),
    ),
    max_size=40,
)


def _worker(i: int, *, failed: bool, tainted: bool) -> NodeView:
    return node(
        f"w{i:02d}", taints=(AUTOSCALER,) if tainted else (),
        ready="Unknown" if failed else "True", since=NOW - timedelta(seconds=120),
    )  # fmt: skip


def _sim(limit: CountOrPercent, size: int, failed: set[int], tainted: set[int]) -> Sim:
    pipeline = PipelineSettings(
        interval=1.0, max_unhealthy=limit, max_deletions=100, kinds=(), self_check=False
    )
    nodes = [_worker(i, failed=i in failed, tainted=i in tainted) for i in range(size)]
    return Sim(nodes, pipeline, scope=Scope(watch_autoscaler_taint=False))


@settings(max_examples=150, deadline=None)
@given(limit=limits, size=st.integers(1, 30), tainted=st.sets(st.integers(0, 29)), steps=steps)
def test_breaker_never_deletes_more_than_the_threshold_in_any_evaluation(
    limit: CountOrPercent, size: int, tainted: set[int], steps: list[tuple[str, float]]
) -> None:
    s = _sim(limit, size, set(), tainted)
    for action, arg in [*steps, ("tick", 1.0)]:
        if action == "tick":
            s.tick(arg)
        elif any(n.name == f"w{int(arg):02d}" for n in s.nodes):
            failed = action == "fail"
            s.replace(f"w{int(arg):02d}", _worker(int(arg), failed=failed, tainted=arg in tainted))
        for plan in s.plans:
            if plan.deletions:
                assert not plan.breaker.open
                assert plan.breaker.unhealthy <= plan.breaker.threshold
            untainted = [d for d in plan.deletions if int(d.name[1:]) not in tainted]
            assert len(untainted) <= plan.breaker.threshold
        s.plans.clear()


@settings(max_examples=150, deadline=None)
@given(
    limit=limits,
    size=st.integers(1, 30),
    failed=st.sets(st.integers(0, 29)),
    tainted=st.sets(st.integers(0, 29)),
    ticks=st.integers(1, 20),
)
def test_a_simultaneous_failure_never_deletes_more_than_the_initial_threshold(
    limit: CountOrPercent, size: int, failed: set[int], tainted: set[int], ticks: int
) -> None:
    s = _sim(limit, size, failed, tainted)
    threshold = breaker_threshold(limit, size)
    for _ in range(ticks):
        s.tick(1.0)
    untainted_deleted = [n for n in s.deleted_names() if int(n[1:]) not in tainted]
    assert len(untainted_deleted) <= threshold
    unhealthy_at_start = sum(1 for i in failed if i < size and i not in tainted)
    if unhealthy_at_start > threshold:
        assert untainted_deleted == []


def test_property_setup_counts_tainted_nodes_as_healthy() -> None:
    assert not is_unhealthy(node("w", taints=(AUTOSCALER,)))
    assert replace(PipelineSettings(interval=1.0), kinds=()).unprobed
