"""One list and watch for several informers (local_ccm.runtime.shared): each consumer keeps its
own projection and cache, the API server sees one LIST and one WATCH; a relist of the shared
watch makes the consumers relist from the shared cache, a broken stream makes them "failing"
until the shared watch resumes from the same version; a consumer with a selector sees what a
selector watch would."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from local_ccm.kube.errors import Gone, Transient
from local_ccm.kube.informer import Change, Informer, Page
from local_ccm.kube.request import WatchEvent
from local_ccm.runtime.shared import SharedWatch, seen_by
from tests.fakes.clock import FakeClock, settle
from tests.fakes.informer import FakeListWatch
from tests.unit.kube.test_informer import node

Obj = dict[str, Any]
RUNNING: list[asyncio.Task[None]] = []  # the informers' tasks, referenced while they run


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"]["labels"])


CLOCKS: list[FakeClock] = []


async def world() -> tuple[FakeListWatch, SharedWatch, Informer[str], Informer[dict[str, str]]]:
    source, clock = FakeListWatch(), FakeClock()
    CLOCKS[:] = [clock]
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


async def stop_all(shared: SharedWatch, *consumers: Informer[Any]) -> None:
    for informer in consumers:
        informer.stop()
    assert shared.informer is not None
    shared.informer.stop()
    await settle()


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
        assert [first.status(), second.status()] == ["connected", "connected"]
        await stop_all(shared, first, second)

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
        await stop_all(shared, first, second)

    asyncio.run(main())


def test_an_outage_of_the_shared_watch_is_failing_for_every_consumer_without_a_relist() -> None:
    async def main() -> None:
        source, shared, first, second = await world()
        source.open_errors.append(Transient(503, "ServiceUnavailable", "connection refused"))
        source.stream.end(Transient(503, "ServiceUnavailable", "connection refused"))
        await settle()
        assert [first.status(), second.status()] == ["failing", "failing"]
        await CLOCKS[0].run_until(lambda: len(source.streams) == 3, timeout=60)
        await settle()  # the shared watch's backoff: one retry refused, the next one connects
        assert [first.status(), second.status()] == ["connected", "connected"]
        source.stream.send("ADDED", node("e", "30"))
        await settle()
        assert "e" in first.cache
        assert "e" in second.cache
        assert len(source.list_calls) == 1  # nobody relisted
        await stop_all(shared, first, second)

    asyncio.run(main())


def test_a_view_with_a_selector_sees_what_a_selector_watch_would() -> None:
    """A consumer that selects (the lifecycle controller's --node-selector) lists only the
    matching objects; one that starts matching is ADDED, one that stops is DELETED, and changes
    outside the selection never reach it. The unselective consumer sees everything."""

    async def main() -> None:
        source, shared, first, _ = await world()
        clock = CLOCKS[0]
        seen: list[tuple[str, str]] = []
        picky: Informer[str] = Informer(
            shared.view(lambda obj: labels_of(obj).get("role") == "w"), name_of, clock=clock,
            rng=random.Random(4),
        )  # fmt: skip
        picky.add_handler(lambda c: seen.append((c.type, c.key)))
        RUNNING.append(asyncio.get_running_loop().create_task(picky.run()))
        await picky.wait_synced()
        assert dict(picky.cache) == {}
        source.stream.send("ADDED", node("c", "10", role="w"))
        source.stream.send("MODIFIED", node("a", "11", role="w"))  # starts matching
        source.stream.send("MODIFIED", node("b", "12", role="x"))  # never matched
        source.stream.send("MODIFIED", node("c", "13"))  # stops matching
        source.stream.send("DELETED", node("b", "14", role="x"))
        await settle()
        assert dict(picky.cache) == {"a": "a"}
        assert seen[1:] == [("ADDED", "c"), ("ADDED", "a"), ("DELETED", "c")]
        assert set(first.cache) == {"a", "c"}
        await stop_all(shared, first, picky)

    asyncio.run(main())


def test_seen_by_follows_the_selector_transitions() -> None:
    def w(obj: Obj) -> bool:
        return labels_of(obj).get("role") == "w"

    inside, outside = node("a", "2", role="w"), node("a", "3")
    cases = [
        (Change("ADDED", "a", None, inside), ("ADDED", inside)),
        (Change("ADDED", "a", None, outside), None),
        (Change("MODIFIED", "a", outside, inside), ("ADDED", inside)),
        (Change("MODIFIED", "a", inside, inside), ("MODIFIED", inside)),
        (Change("MODIFIED", "a", inside, outside), ("DELETED", outside)),
        (Change("MODIFIED", "a", outside, outside), None),
        (Change("DELETED", "a", inside, None), ("DELETED", inside)),
        (Change("DELETED", "a", outside, None), None),
    ]
    for change, expected in cases:
        event = seen_by(change, w)
        assert (None if event is None else (event.type, event.object)) == expected, change
    assert seen_by(Change("MODIFIED", "a", inside, outside), None) == WatchEvent(
        "MODIFIED", outside
    )
