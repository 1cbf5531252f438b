"""/readyz of the leader and the `nodes_with_foreign_cidrs` census: the pure rules, then the
controller keeping both current."""

from __future__ import annotations

from ipaddress import ip_network

from local_ccm.ipam.core.model import default_pool
from local_ccm.ipam.readiness import (
    WATCH_GRACE,
    WatchState,
    observe_watch,
    readiness,
    watch_problems,
)
from local_ccm.ipam.run import Controller
from tests.fakes.ipam import FakeApi, node_obj, run_scenario, settle

KCM = "kube-controller-manager"
FOREIGN = "local_ccm_ipam_nodes_with_foreign_cidrs"


# ---------------------------------------------------------------- pure rules


def test_outage_starts_when_first_seen_and_ends_on_reconnect() -> None:
    down = observe_watch(WatchState(), "reconnecting", 100.0)
    assert down == WatchState(100.0)
    assert observe_watch(down, "reconnecting", 130.0) == down  # still the same outage
    assert observe_watch(down, "failing", 131.0) == WatchState(100.0, failing=True)
    assert observe_watch(down, "connected", 132.0) == WatchState()


def test_reconnecting_less_than_the_grace_is_no_problem() -> None:
    states = [("nodes", WatchState(100.0)), ("clustercidrs", WatchState())]
    assert watch_problems(states, 100.0 + WATCH_GRACE - 1) == []
    (problem,) = watch_problems(states, 100.0 + WATCH_GRACE)
    assert problem == "watch of nodes reconnecting for 60s (limit 60s)"


def test_a_failing_watch_is_a_problem_at_once() -> None:
    (problem,) = watch_problems([("nodes", WatchState(100.0, failing=True))], 101.0)
    assert problem == "watch of nodes failing for 1s: API server unavailable"


def test_readiness_checks_recovery_then_pool_source_then_watches() -> None:
    assert readiness(recovered=False, pool_source=True, problems=[])[0] is False
    not_ready, why = readiness(recovered=True, pool_source=False, problems=[])
    assert not not_ready
    assert "nothing can be allocated" in why
    assert readiness(recovered=True, pool_source=True, problems=["x", "y"]) == (False, "x; y")
    assert readiness(recovered=True, pool_source=True, problems=[]) == (True, "ok")


# ---------------------------------------------------------------- the controller

POOL = default_pool((ip_network("10.99.0.0/16"),), 24, 64)


def test_readyz_tolerates_a_reconnecting_watch_for_less_than_60s() -> None:
    seen: list[tuple[float, bool]] = []

    async def scenario(controller: Controller, api: FakeApi) -> None:
        assert controller.ready() == (True, "ok")
        start = controller.clock.monotonic()
        api.watch_statuses["nodes"] = "reconnecting"
        while controller.clock.monotonic() < start + WATCH_GRACE + 5:
            await settle(60)
            seen.append((controller.clock.monotonic() - start, controller.ready()[0]))
        assert "watch of nodes reconnecting" in controller.ready()[1]
        api.watch_statuses["nodes"] = "connected"
        now = controller.clock.monotonic()
        while controller.clock.monotonic() < now + 2:
            await settle(60)
        assert controller.ready() == (True, "ok")

    run_scenario(FakeApi([node_obj("n")]), scenario, default_pool=POOL, status_interval=1.0)
    assert all(ok for elapsed, ok in seen if elapsed < WATCH_GRACE)
    assert not seen[-1][1]


def test_readyz_is_503_while_a_watch_fails_and_200_once_it_reconnects() -> None:
    async def scenario(controller: Controller, api: FakeApi) -> None:
        api.watch_statuses["clustercidrs"] = "failing"
        await settle(120)  # one status tick observes it
        ok, why = controller.ready()
        assert not ok
        assert "watch of clustercidrs failing" in why
        api.watch_statuses["clustercidrs"] = "connected"
        await settle(120)
        assert controller.ready() == (True, "ok")

    run_scenario(FakeApi([node_obj("n")]), scenario, default_pool=POOL, status_interval=1.0)


def test_readyz_looks_at_the_watches_itself_not_only_at_the_status_tick() -> None:
    """The status tick shares its loop with ClusterCIDR status writes, which retry for seconds
    during an outage; /readyz must not wait for it."""

    async def scenario(controller: Controller, api: FakeApi) -> None:
        assert controller.ready() == (True, "ok")
        controller.observe_watches = lambda: None  # type: ignore[method-assign]  # a held tick
        api.watch_statuses["nodes"] = "failing"
        await settle(20)
        ok, why = controller.ready()
        assert not ok
        assert "watch of nodes failing" in why

    run_scenario(FakeApi([node_obj("n")]), scenario, default_pool=POOL, status_interval=1.0)


def test_nodes_with_foreign_cidrs_follows_the_nodes() -> None:
    theirs = node_obj("a", cidrs=["10.99.0.0/24"], managers=[KCM])
    samples: list[float | None] = []

    async def scenario(controller: Controller, api: FakeApi) -> None:
        def gauge() -> float | None:
            return controller.metrics.registry.get_sample_value(FOREIGN, {"manager": KCM})

        samples.append(gauge())  # at start-up
        later = node_obj("b", cidrs=["10.99.1.0/24"], managers=[KCM])
        api.nodes["b"] = later
        api.send("nodes", "ADDED", later)
        await settle()
        samples.append(gauge())
        api.send("nodes", "DELETED", api.nodes.pop("a"))
        await settle()
        samples.append(gauge())
        ours = node_obj("c")
        api.nodes["c"] = ours
        api.send("nodes", "ADDED", ours)  # we allocate it: ours are not foreign
        await settle()
        samples.append(gauge())

    run_scenario(FakeApi([theirs]), scenario, default_pool=POOL)
    assert samples == [1.0, 2.0, 1.0, 1.0]
