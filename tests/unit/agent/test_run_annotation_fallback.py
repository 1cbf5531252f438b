"""When a status write does not store the ownership annotation, the agent logs one
ERROR and from then on writes the annotation in its own guarded patch of the main resource,
before the status patch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from local_ccm import names
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.run import Agent
from tests.fakes.agent import FakeDetector, run_async, start_loop, stop
from tests.fakes.clock import FakeClock
from tests.fakes.nodes import FakeNodeApi, SentPatch
from tests.unit.agent.builders import EXT4, INT4, found
from tests.unit.agent.test_run_loop import BOTH, CONFIG, SETTINGS, tainted_api

Obj = dict[str, Any]


class MetadataDroppingApi(FakeNodeApi):
    """An apiserver that resets metadata on the status subresource (as it does ``spec``)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.sent: list[SentPatch] = []

    async def patch_node(
        self, name: str, operations: Sequence[Obj], *, subresource: str | None = None
    ) -> Obj:
        self.sent.append(SentPatch(subresource, tuple(operations)))
        if subresource == "status":
            operations = [op for op in operations if not _is_metadata_write(op)]
        return await super().patch_node(name, operations, subresource=subresource)


def _is_metadata_write(op: Obj) -> bool:
    return op["op"] != "test" and str(op["path"]).startswith("/metadata/")


def writes(api: MetadataDroppingApi) -> list[str]:
    """Each sent patch as ``status`` / ``annotation`` / ``main``."""
    kinds = []
    for patch in api.sent:
        paths = {str(op["path"]) for op in patch.operations if op["op"] != "test"}
        if patch.subresource == "status":
            kinds.append("status")
        elif all(p.startswith("/metadata/annotations") for p in paths):
            kinds.append("annotation")
        else:
            kinds.append("main")
    return kinds


def owned(api: FakeNodeApi) -> str | None:
    assert api.node is not None
    value = (api.node["metadata"].get("annotations") or {}).get(names.OWNED_ADDRESSES_ANNOTATION)
    return None if value is None else str(value)


async def started(api: FakeNodeApi, detector: FakeDetector, clock: FakeClock) -> asyncio.Task[int]:
    agent = Agent(SETTINGS, CONFIG, api, detector, clock=clock, metrics=AgentMetrics())
    task = await start_loop(agent, clock)
    await clock.advance(0)
    return task


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@run_async
async def test_a_dropped_annotation_is_logged_once_and_written_on_the_main_resource(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, detector, clock = tainted_api(MetadataDroppingApi("n1")), FakeDetector(BOTH), FakeClock()
    with caplog.at_level(logging.ERROR):
        task = await started(api, detector, clock)
        await clock.advance(3)
    assert writes(api)[:3] == ["status", "annotation", "main"]
    assert owned(api) == "InternalIP=192.0.2.10,ExternalIP=198.51.100.10"
    assert len(errors(caplog)) == 1
    assert names.OWNED_ADDRESSES_ANNOTATION in errors(caplog)[0]
    await stop(task)


@run_async
async def test_from_then_on_the_annotation_patch_precedes_an_address_status_patch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, detector, clock = tainted_api(MetadataDroppingApi("n1")), FakeDetector(BOTH), FakeClock()
    with caplog.at_level(logging.ERROR):
        task = await started(api, detector, clock)
        await clock.advance(3)
        before = len(api.sent)
        detector.set({INT4: found("192.0.2.10"), EXT4: found("198.51.100.20")})
        await clock.advance(5)  # past the settle time
    later = api.sent[before:]
    assert writes(api)[before:] == ["annotation", "status"]
    assert not any(_is_metadata_write(op) for op in later[1].operations)
    assert owned(api) == "InternalIP=192.0.2.10,ExternalIP=198.51.100.20"
    assert len(errors(caplog)) == 1  # logged once, not per write
    await stop(task)


@run_async
async def test_run_once_reaches_the_final_state_through_the_fallback() -> None:
    api, detector, clock = tainted_api(MetadataDroppingApi("n1")), FakeDetector(BOTH), FakeClock()
    agent = Agent(SETTINGS, CONFIG, api, detector, clock=clock, metrics=AgentMetrics())
    assert await agent.run_once() == 0
    assert owned(api) == "InternalIP=192.0.2.10,ExternalIP=198.51.100.10"


@run_async
async def test_an_apiserver_that_keeps_the_annotation_gets_a_single_status_patch() -> None:
    api, detector, clock = tainted_api(FakeNodeApi("n1")), FakeDetector(BOTH), FakeClock()
    task = await started(api, detector, clock)
    assert [p.subresource for p in api.patches] == ["status", None]
    assert any(_is_metadata_write(op) for op in api.patches[0].operations)
    await stop(task)
