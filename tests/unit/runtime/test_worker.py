"""The worker every controller runs on, with an in-memory controller and a fake clock: watches
to keys, no sync before every cache has listed, the leader's write fence, the error policy by
kind, several workers never on one key, and nothing left running after a cancel."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

import pytest

from local_ccm.kube.errors import Conflict, Forbidden, NotFound, Transient
from local_ccm.kube.informer import Change, Informer, Page
from local_ccm.runtime import events as ev
from local_ccm.runtime.controller import (
    DONE,
    Done,
    Fence,
    Permission,
    RequeueAfter,
    Result,
    Retry,
    Watch,
    accesses,
)
from local_ccm.runtime.metrics import QueueMetrics
from local_ccm.runtime.promtext import Registry
from local_ccm.runtime.worker import FENCE_POLL, MAX_CONFLICTS, SYNC_FAILED, Worker
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import FakeListWatch

SUBJECT = ev.Subject("Thing", "a", "ua", "v1")
Outcome = Result | BaseException | Callable[[], Coroutine[Any, Any, Result]]


def obj(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"u{name}", "resourceVersion": "1"}}


class Memory:
    """A controller kept in memory: one informer per source, a change maps to its key, and
    `outcomes[key]` says what each sync of a key does, in turn (the last one repeats)."""

    name = "memory"
    permissions: Sequence[Permission] = (Permission("", "things", ("list", "watch")),)

    def __init__(self, clock: FakeClock, *sources: FakeListWatch, first: Iterable[str] = ()):
        self.clock = clock
        self.informers: list[Informer[Any]] = [
            Informer(s, dict, clock=clock, rng=random.Random(0), name=f"things{n}")
            for n, s in enumerate(sources)
        ]
        self.first = list(first)
        self.outcomes: dict[str, list[Outcome]] = {}
        self.synced_keys: list[str] = []
        self.events: list[tuple[ev.EventSpec, ev.Subject]] = []
        self.fences: list[Fence] = []

    def watches(self) -> Sequence[Watch]:
        def keys(change: Change[Any]) -> Iterable[str]:
            return [change.key] if change.type in ("ADDED", "MODIFIED", "DELETED") else []

        return [Watch(informer, keys) for informer in self.informers]

    def synced(self) -> Iterable[str]:
        return self.first

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        self.fences.append(fence)
        return []

    async def sync(self, key: str) -> Result:
        self.synced_keys.append(key)
        planned = self.outcomes.get(key, [DONE])
        outcome = planned.pop(0) if len(planned) > 1 else planned[0]
        if isinstance(outcome, BaseException):
            raise outcome
        if callable(outcome):
            return await outcome()
        return outcome

    def subject(self, key: str) -> ev.Subject | None:
        return SUBJECT if key == "a" else None

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        self.events.append((spec, subject))

    def ready(self) -> tuple[bool, str]:
        return True, "ok"


def listed(*names: str) -> FakeListWatch:
    source = FakeListWatch()
    source.pages.append(Page([obj(n) for n in names], "1"))
    return source


def started(
    made: Memory, *, may_write: Callable[[], bool] = lambda: True, workers: int = 1,
    registry: Registry | None = None, backoff: tuple[float, float] = (1.0, 4.0),
) -> tuple[Worker, asyncio.Task[None]]:  # fmt: skip
    metrics = QueueMetrics(registry, "memory", "memory") if registry is not None else None
    worker = Worker(made, clock=made.clock, backoff=backoff, metrics=metrics,
                    may_write=may_write, workers=workers)  # fmt: skip
    return worker, asyncio.create_task(worker.run())


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_no_key_is_synced_before_every_watch_has_listed() -> None:
    async def main() -> list[list[str]]:
        clock = FakeClock()
        late = FakeListWatch()
        late.pages.append(Transient(503, "ServiceUnavailable", "not yet"))
        made = Memory(clock, listed("a"), late, first=["start"])
        _, task = started(made)
        await settle()
        before = list(made.synced_keys)
        late.pages.append(Page([obj("b")], "1"))
        await clock.advance(2.0)  # the second informer lists again after its backoff
        await settle()
        after = list(made.synced_keys)
        late.stream.send("ADDED", obj("c"))
        await settle()
        await stopped(task)
        return [before, after, made.synced_keys]

    before, after, last = asyncio.run(main())
    assert before == []
    assert sorted(after) == ["a", "b", "start"]  # the listed objects, the controller's first
    assert last[-1] == "c"


def test_a_key_that_comes_while_this_process_may_not_write_waits_for_the_fence() -> None:
    async def main() -> tuple[list[str], list[str], float | None, bool]:
        clock, leading = FakeClock(), [False]
        registry = Registry()
        made = Memory(clock, listed("a"))
        _, task = started(made, may_write=lambda: leading[0], registry=registry)
        await clock.advance(5.0)
        waiting = list(made.synced_keys)
        leading[0] = True
        await clock.advance(FENCE_POLL)
        fence_open = False
        fence = asyncio.ensure_future(made.fences[0]())
        await settle()
        fence_open = fence.done()
        await stopped(task)
        retries = registry.get_sample_value("workqueue_retries_total", {"name": "memory"})
        return waiting, made.synced_keys, retries, fence_open

    waiting, synced, retries, fence_open = asyncio.run(main())
    assert waiting == []
    assert synced == ["a"]
    assert retries == 0  # waiting for the fence is not a failure
    assert fence_open  # the controller's own loops get the same fence


def test_a_conflict_is_synced_again_at_once_then_with_backoff() -> None:
    async def main() -> tuple[int, int]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [Conflict(409, "Conflict", "a")]
        _, task = started(made)
        await settle()
        at_once = len(made.synced_keys)
        await clock.advance(1.0)
        later = len(made.synced_keys)
        await stopped(task)
        return at_once, later

    at_once, later = asyncio.run(main())
    assert at_once == 1 + MAX_CONFLICTS  # no time passed
    assert later == at_once + 1  # then the first backoff step


def synced_at(made: Memory, clock: FakeClock, times: list[float]) -> Callable[[], None]:
    """Record the clock at each sync (wraps `made.sync`)."""
    plain = made.sync

    async def sync(key: str) -> Result:
        times.append(clock.monotonic())
        return await plain(key)

    made.sync = sync  # type: ignore[method-assign]
    return lambda: None


def keys_synced(made: Memory, clock: FakeClock) -> list[tuple[str, float]]:
    """Record each synced key with the time since the start (wraps `made.sync`)."""
    seen: list[tuple[str, float]] = []
    start, plain = clock.monotonic(), made.sync

    async def sync(key: str) -> Result:
        seen.append((key, clock.monotonic() - start))
        return await plain(key)

    made.sync = sync  # type: ignore[method-assign]
    return seen


def test_transient_errors_retry_with_a_doubling_capped_backoff() -> None:
    async def main() -> list[float]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [Transient(503, "ServiceUnavailable", "down")]
        times: list[float] = []
        synced_at(made, clock, times)
        _, task = started(made, backoff=(1.0, 4.0))
        await clock.advance(20.0)
        await stopped(task)
        return [b - a for a, b in itertools.pairwise(times)]

    assert asyncio.run(main())[:5] == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_refusal_is_an_event_on_the_subject_and_retried() -> None:
    async def main() -> tuple[Memory, int]:
        clock = FakeClock()
        made = Memory(clock, listed("a", "b"))
        made.outcomes["a"] = [Forbidden(403, "Forbidden", "no"), DONE]
        made.outcomes["b"] = [Forbidden(403, "Forbidden", "no"), DONE]
        _, task = started(made)
        await settle()
        first = len(made.synced_keys)
        await clock.advance(1.0)
        await stopped(task)
        return made, first

    made, first = asyncio.run(main())
    assert first == 2
    assert sorted(made.synced_keys) == ["a", "a", "b", "b"]
    [(spec, subject)] = made.events  # "b" has no subject: no Event
    assert (spec.type, spec.reason, subject) == ("Warning", SYNC_FAILED, SUBJECT)
    assert "403 Forbidden" in spec.message


def test_an_unexpected_exception_is_traced_once_and_never_ends_a_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[str]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [ValueError("bug"), ValueError("bug"), DONE]
        _, task = started(made)
        await clock.advance(10.0)
        made.informers[0]._source.stream.send("ADDED", obj("b"))  # type: ignore[attr-defined]
        await settle()
        await stopped(task)
        return made.synced_keys

    with caplog.at_level(logging.ERROR, logger="local_ccm.runtime.worker"):
        synced = asyncio.run(main())
    assert synced == ["a", "a", "a", "b"]
    failures = [r for r in caplog.records if "unexpectedly" in r.getMessage()]
    assert len(failures) == 2
    assert [r.exc_info is not None for r in failures] == [True, False]


def test_requeue_after_and_the_keys_a_sync_names() -> None:
    async def main() -> list[tuple[str, float]]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [RequeueAfter(30.0), Done(others=("z",)), DONE]
        seen = keys_synced(made, clock)
        _, task = started(made)
        await clock.advance(40.0)
        await stopped(task)
        return seen

    assert asyncio.run(main()) == [("a", 0.0), ("a", 30.0), ("z", 30.0)]


def test_retry_result_backs_off() -> None:
    async def main() -> list[float]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [Retry("not yet"), Retry("not yet"), DONE]
        times: list[float] = []
        synced_at(made, clock, times)
        _, task = started(made)
        await clock.advance(10.0)
        await stopped(task)
        return [t - 1000.0 for t in times]

    assert asyncio.run(main()) == [0.0, 1.0, 3.0]


def test_several_workers_never_sync_one_key_at_once() -> None:
    async def main() -> tuple[int, list[str]]:
        clock = FakeClock()
        made = Memory(clock, listed("a", "b"))
        gate, running, most = asyncio.Event(), [0], [0]

        async def slow() -> Result:
            running[0] += 1
            most[0] = max(most[0], running[0])
            await gate.wait()
            running[0] -= 1
            return DONE

        made.outcomes["a"] = [slow]
        worker, task = started(made, workers=3)
        await settle()
        worker.queue.add("a")  # while "a" is being synced
        worker.queue.add("a")
        await settle()
        gate.set()
        await settle()
        await stopped(task)
        return most[0], made.synced_keys

    most, synced = asyncio.run(main())
    assert most == 1
    assert sorted(synced) == ["a", "a", "b"]  # "a" once more after its first sync, not twice


def test_cancelling_the_term_leaves_nothing_running() -> None:
    async def main() -> set[asyncio.Task[Any]]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [Transient(0, "ConnectionRefused", "down")]  # a delayed retry
        gate = asyncio.Event()

        async def loop() -> None:
            await gate.wait()

        made.beside = lambda fence: [loop()]  # type: ignore[method-assign]
        _, task = started(made, workers=2)
        await settle()
        await stopped(task)
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(main()) == set()


def test_an_informer_that_ends_ends_the_term_with_its_error() -> None:
    async def main() -> BaseException | None:
        clock = FakeClock()
        broken = FakeListWatch()
        broken.pages.append(NotFound(404, "NotFound", "no such resource"))
        made = Memory(clock, listed("a"), broken)
        _, task = started(made)
        await settle()
        return task.exception() if task.done() else None

    assert isinstance(asyncio.run(main()), NotFound)


def test_permissions_become_the_start_up_review_one_verb_and_name_each() -> None:
    wanted = [
        Permission("certificates.k8s.io", "certificatesigningrequests/approval", ("update",)),
        Permission("", "configmaps", ("list", "watch"), names=("kubevip",),
                   namespace="kube-system"),
    ]  # fmt: skip
    assert [str(a) for a in accesses(wanted)] == [
        "update certificatesigningrequests.certificates.k8s.io/approval",
        "list configmaps/kubevip in namespace kube-system",
        "watch configmaps/kubevip in namespace kube-system",
    ]


def test_requeue_after_names_keys_worth_a_look_now() -> None:
    async def main() -> list[tuple[str, float]]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [RequeueAfter(30.0, others=("probe/x",)), DONE]
        seen = keys_synced(made, clock)
        _, task = started(made)
        await clock.advance(40.0)
        await stopped(task)
        return seen

    assert asyncio.run(main()) == [("a", 0.0), ("probe/x", 0.0), ("a", 30.0)]


def test_a_key_asked_again_after_its_period_on_every_sync_keeps_one_timer() -> None:
    """Each change syncs the global key, and each sync asks for a look after the period: the
    key is looked at once per period, not once per period for every change there was."""

    async def main() -> list[float]:
        clock = FakeClock()
        made = Memory(clock, listed("a"))
        made.outcomes["a"] = [RequeueAfter(10.0)]
        times: list[float] = []
        synced_at(made, clock, times)
        worker, task = started(made)
        for _ in range(3):
            await clock.advance(1.0)
            worker.queue.add("a")  # a change
        await clock.advance(30.0)
        await stopped(task)
        return [t - 1000.0 for t in times]

    assert asyncio.run(main()) == [0.0, 1.0, 2.0, 3.0, 10.0, 20.0, 30.0]
