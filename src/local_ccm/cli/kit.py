"""The unit of a controller of the kit (`runtime.controller`): what every central controller's
composition ends with, whichever binary runs it."""

from __future__ import annotations

from collections.abc import Callable

from local_ccm.cli.common import Unit, leader_unit
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube.client import Client
from local_ccm.runtime.controller import Controller, accesses
from local_ccm.runtime.metrics import ControllerMetrics, QueueMetrics
from local_ccm.runtime.worker import Worker


def kit_unit(
    client: Client,
    metrics: ControllerMetrics,
    queue: QueueMetrics,
    make: Callable[[], Controller],
    *,
    backoff: tuple[float, float],
    clock: Clock | None = None,
    workers: int = 1,
    check: str = "",
) -> Unit:
    """For each leadership term a fresh controller from `make()`, run by a `Worker` with
    `workers` workers fenced by the term's write window; the permissions the controller
    declares are what the start-up review asks; /readyz asks its `ready()` (as `check`, else
    its name)."""
    first = make()

    def worker(may_write: Callable[[], bool]) -> Worker:
        return Worker(make(), clock=clock or SystemClock(), backoff=backoff, metrics=queue,
                      may_write=may_write, workers=workers)  # fmt: skip

    return leader_unit(first.name, client, accesses(first.permissions), metrics, worker,
                       check=check)  # fmt: skip
