"""The one worker every central controller runs on (`runtime.controller.Controller`).

For one leadership term (`run()` until cancelled) it owns:

- the watches: each source (an informer, or the agent's kernel subscription and timers)
  runs as a task, and each change goes through its watch's `keys` into one `WorkQueue`
  (client-go's `workqueue_*` and controller-runtime's `controller_runtime_reconcile_*` series);
- the start: no key is synced before every source has its first state (an informer: listed);
  then `synced()` gives the first keys and `beside()` the controller's other loops;
- `workers` tasks, each taking one key at a time (a key is never synced twice at once);
- the leader's write fence: `sync` is called only while `may_write()` holds (the Lease was
  renewed recently enough for a write to land before a successor could take over); a key that
  comes while it does not waits in the queue, not counted as a failure, and the fence is asked
  again once a worker took the key. Losing the Lease cancels `run()` (the elector does): the
  syncs in flight are cancelled and nothing new starts;
- the error policy, by kind: a conflict (409) is synced again at once, up to
  `MAX_CONFLICTS` times in a row, then with backoff; 429, 5xx and transport errors retry with
  the key's doubling, capped backoff; any other API error (a 4xx retrying cannot fix by
  itself: RBAC, admission, validation) is logged, reported as an Event on the controller's
  subject for the key when it has one, and retried with backoff; an unexpected exception is
  logged with its traceback once per key and kind, retried with backoff, and never ends a
  worker;
- the end: every task it started is cancelled and awaited, the delayed additions too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from local_ccm.clock import Clock
from local_ccm.kube.errors import ApiError, Conflict, Transient
from local_ccm.logs import kv
from local_ccm.runtime import events as ev
from local_ccm.runtime.controller import Controller, RequeueAfter, Result, Retry, Watch
from local_ccm.runtime.metrics import QueueMetrics
from local_ccm.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)
FENCE_POLL = 0.1  # how often a fenced worker asks again whether it may write
MAX_CONFLICTS = 5  # conflicts in a row synced again at once; then the backoff
SYNC_FAILED = "SyncFailed"  # the Event reason of an API error retrying cannot fix alone


class Worker:
    """Runs `controller` for one leadership term: `run()` until cancelled."""

    def __init__(
        self,
        controller: Controller,
        *,
        clock: Clock,
        backoff: tuple[float, float],
        metrics: QueueMetrics | None = None,
        may_write: Callable[[], bool] = lambda: True,
        workers: int = 1,
    ) -> None:
        self.controller, self.clock, self.may_write = controller, clock, may_write
        self.workers = workers
        self.queue = WorkQueue(clock, backoff, metrics)
        self.conflicts: dict[str, int] = {}  # conflicts in a row per key
        self.traced: set[tuple[str, str]] = set()  # (key, exception type) logged with traceback
        self.watches = list(controller.watches())
        for watch in self.watches:
            watch.source.add_handler(self._enqueuer(watch))

    def _enqueuer(self, watch: Watch) -> Callable[[Any], None]:
        def on_change(change: Any) -> None:
            for key in watch.keys(change):
                self.queue.add(key)

        return on_change

    def ready(self) -> tuple[bool, str]:
        return self.controller.ready()

    # ------------------------------------------------------------ the term

    async def run(self) -> None:
        """Watch, wait for every cache, then sync keys until cancelled; raises when a
        source or a loop of the controller ends (it must not), with its error if it had one."""
        tasks: list[asyncio.Task[None]] = []
        try:
            for watch in self.watches:
                tasks.append(asyncio.create_task(watch.source.run(), name=watch.source.name))
            await self._synced(tasks)
            for key in self.controller.synced():
                self.queue.add(key)
            tasks += [asyncio.create_task(loop) for loop in self.controller.beside(self.fence)]
            tasks += [asyncio.create_task(self._work(), name=f"worker-{n}")
                      for n in range(self.workers)]  # fmt: skip
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            _raise_ended(done)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.queue.close()

    async def _synced(self, sources: list[asyncio.Task[None]]) -> None:
        async def every_one() -> None:
            for watch in self.watches:
                await watch.source.wait_synced()

        synced = asyncio.ensure_future(every_one())
        waiting: set[asyncio.Future[Any]] = {synced, *sources}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
        _raise_ended({t for t in sources if t.done()})

    async def fence(self) -> None:
        """Returns once this process may write."""
        while not self.may_write():
            await self.clock.sleep(FENCE_POLL)

    async def _work(self) -> None:
        while True:
            await self.fence()  # while not leading, the keys wait in the queue
            await self.queue.process(self.sync)
            # A sync that never had to wait (its reads answered from memory) and a queue that
            # always has the next key would otherwise never let the event loop run anything else.
            # With no next key the queue's get waits anyway: no extra turn of the loop then.
            if self.queue.qsize():
                await asyncio.sleep(0)

    # ------------------------------------------------------------ one key

    async def sync(self, key: str) -> None:
        """Sync `key` once the fence allows it, and apply the error policy to the outcome."""
        await self.fence()  # the Lease may have aged since this worker took the key
        try:
            result = await self.controller.sync(key)
        except Conflict as exc:
            self._conflict(key, exc)
        except Transient as exc:
            log.warning("sync failed, retrying: %s", exc, extra=self._fields(key))
            self.queue.retry(key)
        except ApiError as exc:
            self._refused(key, exc)
        except Exception as exc:  # a bug: logged, retried, never the end of a worker
            self._crashed(key, exc)
        else:
            self._settled(key, result)

    def _settled(self, key: str, result: Result) -> None:
        if isinstance(result, Retry):
            log.debug("retrying: %s", result.reason, extra=self._fields(key))
            self.queue.retry(key)
            return
        self.conflicts.pop(key, None)
        self.queue.done(key)
        if isinstance(result, RequeueAfter):
            self.queue.add_after(key, result.seconds)
        for other in result.others:
            self.queue.add(other)

    def _conflict(self, key: str, exc: Conflict) -> None:
        count = self.conflicts[key] = self.conflicts.get(key, 0) + 1
        if count <= MAX_CONFLICTS:
            log.debug("changed meanwhile, syncing again: %s", exc, extra=self._fields(key))
            self.queue.requeue(key)
            return
        log.warning("%d write conflicts in a row, retrying: %s", count, exc,
                    extra=self._fields(key))  # fmt: skip
        self.queue.retry(key)

    def _refused(self, key: str, exc: ApiError) -> None:
        log.warning("sync refused, retrying: %s", exc, extra=self._fields(key))
        subject = self.controller.subject(key)
        if subject is not None:
            spec = ev.EventSpec("Warning", SYNC_FAILED, f"{self.controller.name}: {exc}")
            self.controller.emit(spec, subject)
        self.queue.retry(key)

    def _crashed(self, key: str, exc: Exception) -> None:
        kind = type(exc).__name__
        first = (key, kind) not in self.traced
        self.traced.add((key, kind))
        log.error("sync failed unexpectedly, retrying: %s: %s", kind, exc,
                  exc_info=exc if first else None, extra=self._fields(key))  # fmt: skip
        self.queue.retry(key)

    def _fields(self, key: str) -> dict[str, object]:
        return kv(controller=self.controller.name, key=key)


def _raise_ended(done: set[asyncio.Task[None]]) -> None:
    """A task that must run until cancelled has ended: its error, or that it ended."""
    for task in done:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s failed: %r", task.get_name(), error)
            raise error
        raise RuntimeError(f"{task.get_name()} ended")
