"""One list and watch for several informers (local_ccm.runtime.shared): each consumer keeps its
own projection and cache, the API server sees one LIST and one WATCH; a relist or a broken
stream of the shared watch makes the consumers relist from the shared cache."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from local_ccm.kube.errors import Gone
from local_ccm.kube.informer import Informer, Page
from local_ccm.runtime.shared import SharedWatch
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import FakeListWatch
from tests.unit.kube.test_informer import node

Obj = dict[str, Any]
RUNNING: list[asyncio.Task[None]] = []  # the informers' tasks, referenced while they run


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"]["labels"])


async def world() -> tuple[FakeListWatch, SharedWatch, Informer[str], Informer[dict[str, str]]]:
    source, clock = FakeListWatch(), FakeClock()
    source.pages.append(Page([node("a", "5"), node("b", "6")], "9"))
    shared = SharedWatch(source, clock, random.Random(1), "nodes")
    first: Informer[str] = Informer(shared.view(), name_of, clock=clock, rng=random.Random(2))
    second: Informer[dict[str, str]] = Informer(shared.view(), labels_of, clock=clock,
                                                rng=random.Random(3))  # fmt: skip
    loop = asyncio.get_running_loop()
    RUNNING[:] = [loop.create_task(work) for work in (first.run(), second.run(), shared.run())]
    await first.wait_synced()
    await second.wait_synced()
    await settle()
    return source, shared, first, second


def test_two_informers_one_list_and_one_watch() -> None:
    async def main() -> None:
        source, shared, first, second = await world()
        assert dict(first.cache) == {"a": "a", "b": "b"}
        assert set(second.cache) == {"a", "b"}
        source.stream.send("ADDED", node("c", "10", zone="z1"))
        await settle()
        assert first.cache["c"] == "c"
        assert second.cache["c"] == {"zone": "z1"}
        source.stream.send("DELETED", node("a", "11"))
        await settle()
        assert "a" not in first.cache
        assert "a" not in second.cache
        assert len(source.list_calls) == 1
        assert len(source.watch_calls) == 1
        for informer in (first, second):
            assert informer.status() == "connected"
            informer.stop()
        assert shared.informer is not None
        shared.informer.stop()
        await settle()

    asyncio.run(main())


def test_a_relist_of_the_shared_watch_makes_the_consumers_relist_from_its_cache() -> None:
    async def main() -> None:
        source, shared, first, second = await world()
        source.pages.append(Page([node("b", "6"), node("d", "20")], "21"))
        source.stream.end(Gone(410, "Expired", "too old"))
        await settle()
        assert dict(first.cache) == {"b": "b", "d": "d"}
        assert set(second.cache) == {"b", "d"}
        assert len(source.list_calls) == 2  # the shared relist only
        source.stream.send("MODIFIED", node("d", "22", role="w"))
        await settle()
        assert second.cache["d"] == {"role": "w"}
        for informer in (first, second):
            informer.stop()
        assert shared.informer is not None
        shared.informer.stop()
        await settle()

    asyncio.run(main())
