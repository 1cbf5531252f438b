"""The Informer over an in-memory ListWatch and a fake clock: nothing sleeps."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from local_ccm.kube.errors import Forbidden, Gone, Invalid, Transient, Unauthorized
from local_ccm.kube.informer import SERVER_TIMEOUT_FLOOR, Change, Informer, Page, StreamEnd
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import FakeListWatch

Obj = dict[str, Any]


def node(name: str, rv: str, uid: str = "", **labels: str) -> Obj:
    meta = {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv, "labels": labels}
    return {"metadata": meta, "spec": {"big": "x" * 100}}


def slim(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return meta["name"], meta["uid"], meta["resourceVersion"]


class Run:
    """An informer running on a fake clock, with its changes and stream ends recorded."""

    def __init__(self, source: FakeListWatch, clock: FakeClock) -> None:
        self.source, self.clock = source, clock
        self.ends: list[StreamEnd] = []
        self.informer = Informer(source, slim, clock=clock, rng=random.Random(1), name="nodes",
                                 on_end=self.ends.append)  # fmt: skip
        self.changes: list[tuple[str, str]] = []
        self.informer.add_handler(lambda c: self.changes.append((c.type, c.key)))
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.informer.run())

    def reasons(self) -> list[str]:
        return [end.reason for end in self.ends]


def scenario(body: Callable[[Run], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        run = Run(FakeListWatch(), FakeClock())
        await body(run)
        run.informer.stop()
        await settle()

    asyncio.run(main())


def test_a_paged_list_fills_the_cache_with_projections_then_watches_from_its_version() -> None:
    async def body(run: Run) -> None:
        run.source.pages.extend([Page([node("a", "5")], "9", "tok"), Page([node("b", "6")], "9")])
        run.start()
        await settle()
        assert run.source.list_calls == [None, "tok"]
        assert dict(run.informer.cache) == {"a": ("a", "uid-a", "5"), "b": ("b", "uid-b", "6")}
        assert run.changes == [("ADDED", "a"), ("ADDED", "b"), ("SYNCED", "")]
        assert run.informer.has_synced()
        assert run.source.watch_calls[0][0] == "9"
        assert run.source.watch_calls[0][1] is None  # no timeoutSeconds: the server's own

    scenario(body)


def test_a_dropped_stream_resumes_from_the_last_version_without_a_list() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([node("a", "5")], "9"))
        run.start()
        await settle()
        run.source.stream.send("MODIFIED", node("a", "12", x="1"))
        run.source.stream.send("ADDED", node("c", "13"))
        run.source.stream.end(Transient(0, "ConnectionReset", "reset"))
        await run.clock.advance(1.0)
        assert run.source.list_calls == [None]
        assert [rv for rv, _ in run.source.watch_calls] == ["9", "13"]
        assert run.reasons() == ["error"]
        assert run.informer.cache["c"] == ("c", "uid-c", "13")
        run.source.stream.send("DELETED", node("c", "14"))
        await settle()
        assert "c" not in run.informer.cache
        assert run.changes[-1] == ("DELETED", "c")

    scenario(body)


def test_a_server_ending_the_stream_early_is_closed_later_is_timeout() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([], "9"))
        run.start()
        await settle()
        run.source.stream.send("ADDED", node("a", "10"))
        await run.clock.advance(SERVER_TIMEOUT_FLOOR / 2)
        run.source.stream.end()
        await settle()
        assert run.reasons() == ["closed"]
        assert len(run.source.streams) == 2  # it delivered: reconnect at once
        await run.clock.advance(300)
        run.source.stream.end()
        await settle()
        assert run.reasons() == ["closed", "timeout"]

    scenario(body)


def test_a_stream_closed_at_once_without_events_is_retried_after_a_backoff() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([], "9"))
        run.start()
        await settle()
        run.source.stream.end()
        await run.clock.advance(0.3)
        assert len(run.source.streams) == 1  # 0.5 s ±20 %
        await run.clock.advance(1.0)
        assert len(run.source.streams) == 2
        assert 0.4 <= run.ends[0].delay <= 0.6

    scenario(body)


def test_a_bookmark_moves_the_resource_version_and_changes_nothing() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([node("a", "5")], "9"))
        run.start()
        await settle()
        run.source.stream.send("BOOKMARK", {"metadata": {"resourceVersion": "40"}})
        await settle()
        assert run.informer.resource_version == "40"
        assert dict(run.informer.cache) == {"a": ("a", "uid-a", "5")}
        assert run.changes[-1] == ("BOOKMARK", "")
        run.source.stream.end()
        await run.clock.advance(0)
        assert run.source.watch_calls[-1][0] == "40"

    scenario(body)


def test_gone_relists_and_reports_the_difference_with_tombstones() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(
            Page([node("same", "5"), node("changed", "6"), node("vanished", "7"),
                  node("replaced", "8")], "9")
        )  # fmt: skip
        run.start()
        await settle()
        run.changes.clear()
        run.source.pages.append(
            Page([node("same", "5"), node("changed", "20"), node("new", "21"),
                  node("replaced", "22", uid="other")], "30")
        )  # fmt: skip
        run.source.stream.end(Gone(410, "Expired", "too old resource version"))
        await settle()
        assert sorted(run.changes) == sorted([
            ("DELETED", "vanished"), ("MODIFIED", "changed"), ("ADDED", "new"),
            ("DELETED", "replaced"), ("ADDED", "replaced"), ("SYNCED", ""),
        ])  # fmt: skip
        assert run.changes[-1] == ("SYNCED", "")
        assert run.informer.relists == 1
        assert run.reasons() == ["gone"]
        assert run.informer.cache["replaced"] == ("replaced", "other", "22")
        assert "vanished" not in run.informer.cache
        assert run.source.watch_calls[-1][0] == "30"

    scenario(body)


def test_a_deleted_tombstone_carries_the_old_projection() -> None:
    async def body(run: Run) -> None:
        seen: list[Change[tuple[str, str, str]]] = []
        run.informer.add_handler(seen.append)
        run.source.pages.extend([Page([node("a", "5")], "9"), Page([], "10")])
        run.start()
        await settle()
        run.source.stream.end(Gone(410, "Expired", "too old"))
        await settle()
        (deleted,) = [c for c in seen if c.type == "DELETED"]
        assert (deleted.old, deleted.new) == (("a", "uid-a", "5"), None)

    scenario(body)


@pytest.mark.parametrize("error", [Forbidden(403, "Forbidden", "rbac not synced"),
                                   Unauthorized(401, "Unauthorized", "no"),
                                   Transient(503, "ServiceUnavailable", "starting")])  # fmt: skip
def test_refusals_right_after_a_restart_are_retried_with_backoff(error: Exception) -> None:
    async def body(run: Run) -> None:
        run.source.pages.extend([error, error, Page([node("a", "5")], "9")])
        run.start()
        await settle()
        assert run.reasons() == ["error"]
        assert run.informer.status() == "failing"
        await run.clock.advance(0.6)
        assert run.reasons() == ["error", "error"]
        assert 0.8 <= run.ends[1].delay <= 1.2  # the second attempt waits twice as long
        await run.clock.advance(1.2)
        assert run.informer.has_synced()
        assert run.informer.status() == "connected"

    scenario(body)


def test_invalid_ends_the_run_with_the_error() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Invalid(422, "Invalid", "bad selector"))
        run.start()
        await settle()
        assert run.task is not None
        assert run.task.done()
        assert isinstance(run.task.exception(), Invalid)

    scenario(body)


def test_retry_after_is_honoured() -> None:
    async def body(run: Run) -> None:
        run.source.pages.extend([Transient(429, "TooManyRequests", "slow", retry_after=7.0)])
        run.start()
        await settle()
        assert run.ends[0].delay == 7.0

    scenario(body)


def test_stop_ends_the_run_and_reports_stopped() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([], "9"))
        run.start()
        await settle()
        run.informer.stop()
        await settle()
        assert run.task is not None
        assert run.task.done()
        assert not run.task.cancelled()
        assert run.reasons() == ["stopped"]
        assert run.informer.ends["stopped"] == 1

    scenario(body)


def test_a_primed_informer_watches_at_once_and_diffs_a_later_relist_against_it() -> None:
    async def body(run: Run) -> None:
        run.informer.prime([node("a", "5")], "9")
        run.start()
        await settle()
        assert run.source.list_calls == []
        assert run.source.watch_calls[0][0] == "9"
        run.source.pages.append(Page([node("a", "5")], "11"))
        run.source.stream.end(Gone(410, "Expired", "too old"))
        await settle()
        assert run.changes[-1] == ("SYNCED", "")
        assert run.informer.relists == 1
        assert [c for c in run.changes if c[1] == "a"] == []  # primed: nothing to tell

    scenario(body)


def test_forget_drops_a_key_and_a_later_deleted_is_a_no_op() -> None:
    async def body(run: Run) -> None:
        run.source.pages.append(Page([node("a", "5")], "9"))
        run.start()
        await settle()
        run.informer.forget("a")
        run.source.stream.send("DELETED", node("a", "10"))
        await settle()
        assert "a" not in run.informer.cache
        assert ("DELETED", "a") not in run.changes

    scenario(body)
