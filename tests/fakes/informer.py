"""An Informer's `ListWatch` played by the test."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from local_ccm.kube.informer import Page
from local_ccm.kube.request import WatchEvent


class Unused:
    """A ListWatch the tests never run (the caches are primed)."""

    async def list_page(self, continue_token: str | None) -> Page:
        raise AssertionError("not listed")

    def watch(
        self, resource_version: str, timeout_seconds: int | None
    ) -> AsyncIterator[WatchEvent]:
        raise AssertionError("not watched")


class FakeWatch:
    """One watch stream of a `FakeListWatch`: the test sends events, ends or fails it."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self._queue: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue()
        self._fail = fail
        self.is_open = fail is None

    def send(self, kind: str, obj: dict[str, Any]) -> None:
        self._queue.put_nowait(WatchEvent(kind, copy.deepcopy(obj)))

    def end(self, error: BaseException | None = None) -> None:
        """The server ends the stream (``None``) or the connection fails with ``error``."""
        self._queue.put_nowait(error)

    def __aiter__(self) -> FakeWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        if self._fail is not None:
            raise self._fail
        item = await self._queue.get()
        if isinstance(item, WatchEvent):
            return item
        self.is_open = False
        if item is None:
            raise StopAsyncIteration
        raise item


class FakeListWatch:
    """An Informer's `ListWatch` played by the test: `pages` are answered in order (an
    exception is raised), `open_errors` fail the next watches when opened, `streams` are the
    watches opened so far."""

    def __init__(self) -> None:
        self.pages: deque[Page | BaseException] = deque()
        self.open_errors: deque[BaseException] = deque()
        self.streams: list[FakeWatch] = []
        self.list_calls: list[str | None] = []
        self.watch_calls: list[tuple[str, int | None]] = []

    async def list_page(self, continue_token: str | None) -> Page:
        self.list_calls.append(continue_token)
        item = self.pages.popleft()
        if isinstance(item, BaseException):
            raise item
        return copy.deepcopy(item)

    def watch(self, resource_version: str, timeout_seconds: int | None) -> FakeWatch:
        self.watch_calls.append((resource_version, timeout_seconds))
        stream = FakeWatch(self.open_errors.popleft() if self.open_errors else None)
        self.streams.append(stream)
        return stream

    @property
    def stream(self) -> FakeWatch:
        return self.streams[-1]
