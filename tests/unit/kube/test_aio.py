"""asyncio wrappers: verbs in threads, watches through a reader thread, prompt cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from local_ccm.kube.aio import AsyncClient, ThreadedIterator
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import NotFound
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
