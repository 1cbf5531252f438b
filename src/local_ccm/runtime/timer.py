"""A timer as a source of changes (`runtime.controller.Source`): its name, after every
`interval()` seconds, for a controller that wakes on a clock besides its watches (the agent's
periodic pass and full resync)."""

from __future__ import annotations

from collections.abc import Callable

from local_ccm.clock import Clock


class Timer:
    """Hands its `name` to the handlers after every `interval()` seconds, until cancelled;
    it has nothing to read first."""

    def __init__(self, name: str, interval: Callable[[], float], clock: Clock) -> None:
        self._name, self._interval, self._clock = name, interval, clock
        self._handlers: list[Callable[[str], None]] = []

    @property
    def name(self) -> str:
        return self._name

    def add_handler(self, handler: Callable[[str], None]) -> None:
        self._handlers.append(handler)

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval())
            for handler in self._handlers:
                handler(self._name)

    async def wait_synced(self) -> None:
        return
