"""asyncio wrappers: verbs in threads, watches through a reader thread, prompt cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from local_ccm.kube.aio import AsyncClient, ThreadedIterator
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import NotFound
from local_ccm.kube.request import Obj, Request, Response
from local_ccm.kube.resources import NODES
from tests.fakes.transport import FakeStream, FakeTransport, json_response


class BlockingSource:
    """Yields its items, then blocks (like a quiet watch) until ``stop()``."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.stopped = threading.Event()

    def __iter__(self) -> Iterator[int]:
        yield from self.items
        self.stopped.wait()

    def stop(self) -> None:
        self.stopped.set()


def test_cancelling_the_consumer_stops_the_reader_thread() -> None:
    source = BlockingSource([1, 2])
    it = ThreadedIterator(source, source.stop, "test-reader")
    got: list[int] = []

    async def consume() -> None:
        async for item in it:
            got.append(item)

    async def main() -> None:
        task = asyncio.create_task(consume())
        while len(got) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert got == [1, 2]
    assert source.stopped.is_set()
    assert it.join(timeout=5)


def test_the_reader_never_runs_more_than_max_pending_items_ahead_of_the_consumer() -> None:
    """Backpressure: a fast watch cannot pile events up in memory behind a slow loop."""
    pulled = 0
    ahead: list[int] = []

    def counting() -> Iterator[int]:
        nonlocal pulled
        for i in range(200):
            pulled += 1
            yield i

    it = ThreadedIterator(counting(), lambda: None, "test-reader", max_pending=4)

    async def main() -> list[int]:
        got: list[int] = []
        async for item in it:
            got.append(item)
            # The reader may hold one more item it has pulled but not yet queued.
            ahead.append(pulled - len(got))
        return got

    assert asyncio.run(main()) == list(range(200))
    assert max(ahead) <= 4 + 1, ahead


def test_errors_from_the_source_are_raised_in_the_consumer() -> None:
    def failing() -> Iterator[int]:
        yield 1
        raise NotFound(404, "NotFound", "x")

    async def main() -> list[int]:
        out: list[int] = []

        async def consume() -> None:
            async for item in ThreadedIterator(failing(), lambda: None, "t"):
                out.append(item)

        with pytest.raises(NotFound):
            await consume()
        return out

    assert asyncio.run(main()) == [1]


def test_async_client_verbs_and_watch() -> None:
    line = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n'
    fake = FakeTransport(
        [json_response(200, {"metadata": {"name": "n1"}})], streams=[FakeStream([line])]
    )
    client = AsyncClient(Client(ClusterConfig("https://h"), field_manager="fm", transport=fake))

    async def main() -> tuple[str, list[str]]:
        got = await client.get(NODES, "n1")
        async with client.watch(NODES, resource_version="1") as events:
            names = [e.object["metadata"]["name"] async for e in events]
        await client.close()
        return got["metadata"]["name"], names

    assert asyncio.run(main()) == ("n1", ["a"])
    assert fake.closed


CALLER = contextvars.ContextVar("caller", default="")


class Gathering(FakeTransport):
    """Answers each request only once `count` requests wait at once (a barrier), and records
    the thread each ran in and the caller it saw (`CALLER`)."""

    def __init__(self, count: int) -> None:
        super().__init__([json_response(200, {"metadata": {"name": "n1"}})] * count)
        self.barrier = threading.Barrier(count, timeout=10)  # only reached when one is missing
        self.threads: set[str] = set()
        self.callers: list[str] = []

    def send(self, req: Request, timeout: float) -> Response:
        self.threads.add(threading.current_thread().name)
        self.callers.append(CALLER.get())
        self.barrier.wait()
        return super().send(req, timeout)


def test_an_executor_of_its_own_runs_as_many_requests_at_once_as_it_has_threads() -> None:
    """More than the default executor has on a small machine (min(32, CPUs + 4)), each in one
    of the given threads, with the caller's context variables (as `asyncio.to_thread`)."""
    count = 40
    fake = Gathering(count)
    with ThreadPoolExecutor(count, thread_name_prefix="own") as threads:
        client = AsyncClient(Client(ClusterConfig("https://h"), field_manager="fm",
                                    transport=fake), threads)  # fmt: skip

        async def one(n: int) -> Obj:
            CALLER.set(f"task{n}")
            return await client.patch(NODES, "n1", {})

        async def main() -> list[Obj]:
            return await asyncio.gather(*(one(n) for n in range(count)))

        answers = asyncio.run(main())
    assert [a["metadata"]["name"] for a in answers] == ["n1"] * count
    assert len(fake.threads) == count
    assert all(name.startswith("own") for name in fake.threads)
    assert sorted(fake.callers) == sorted(f"task{n}" for n in range(count))
