"""The work queue's client-go series (`workqueue_*{name}`) and its worker's controller-runtime
series (`controller_runtime_reconcile_*{controller}`), on the injected clock."""

from __future__ import annotations

import asyncio

from local_ccm.runtime.metrics import QueueMetrics
from local_ccm.runtime.promtext import Registry
from local_ccm.runtime.workqueue import WorkQueue
from tests.fakes.clock import FakeClock


def value(registry: Registry, family: str, **labels: str) -> float | None:
    return registry.get_sample_value(family, labels)


def test_adds_depth_waits_work_retries_and_reconcile_results() -> None:
    async def main() -> tuple[Registry, list[float]]:
        registry, clock = Registry(), FakeClock()
        queue = WorkQueue(clock, (1.0, 8.0), QueueMetrics(registry, "q", "ctl"))
        queue.add("a")
        queue.add("a")  # already queued: not an add
        queue.add("b")
        assert value(registry, "workqueue_depth", name="q") == 2
        clock.step(2.0)
        running: list[float] = []

        async def work(key: str) -> None:
            clock.step(0.5)
            running.append(value(registry, "workqueue_unfinished_work_seconds", name="q") or 0)
            if key == "b":
                queue.retry(key)
            else:
                queue.done(key)

        await queue.process(work)
        await queue.process(work)
        await queue.close()
        return registry, running

    registry, running = asyncio.run(main())
    assert value(registry, "workqueue_adds_total", name="q") == 2
    assert value(registry, "workqueue_depth", name="q") == 0
    assert value(registry, "workqueue_retries_total", name="q") == 1
    assert running == [0.5, 0.5]
    assert value(registry, "workqueue_unfinished_work_seconds", name="q") == 0
    assert value(registry, "workqueue_longest_running_processor_seconds", name="q") == 0
    assert value(registry, "workqueue_queue_duration_seconds_count", name="q") == 2
    assert value(registry, "workqueue_queue_duration_seconds_sum", name="q") == 4.5
    assert value(registry, "workqueue_work_duration_seconds_sum", name="q") == 1.0
    assert value(registry, "controller_runtime_reconcile_total", controller="ctl",
                 result="success") == 1  # fmt: skip
    assert value(registry, "controller_runtime_reconcile_total", controller="ctl",
                 result="error") == 1  # fmt: skip
    assert value(registry, "controller_runtime_reconcile_errors_total", controller="ctl") == 1
    assert value(registry, "controller_runtime_reconcile_time_seconds_count",
                 controller="ctl") == 2  # fmt: skip


def test_every_series_exists_before_any_work() -> None:
    registry = Registry()
    QueueMetrics(registry, "q", "ctl")
    assert value(registry, "workqueue_depth", name="q") == 0
    assert value(registry, "workqueue_longest_running_processor_seconds", name="q") == 0
    assert value(registry, "controller_runtime_reconcile_errors_total", controller="ctl") == 0
    bucket = {"name": "q", "le": "1e-08"}
    assert registry.get_sample_value("workqueue_queue_duration_seconds_bucket", bucket) == 0
