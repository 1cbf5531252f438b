"""Kernel: the address and link dumps are read again only after the netlink subscription
reported a change (real kernel, a test namespace); the route lookups run on every pass."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from ipaddress import ip_address

from local_ccm.agent.core.candidates import Found
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AgentConfig
from local_ccm.agent.kernel import Kernel
from local_ccm.netlink import Change
from tests.netns.agent.test_detect_routes import V4_TARGET, settings
from tests.support.netns import NetnsFactory

CONFIG = AgentConfig(internal=settings(cidrs="203.0.113.0/24"), external=settings(V4_TARGET))
WAIT = 5.0


def test_a_quiet_kernel_is_not_dumped_again_and_a_change_is(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    kernel = Kernel(CONFIG, up.node.name)

    async def scenario() -> None:
        seen: list[Sequence[Change]] = []
        changes = kernel.changes()
        reader = asyncio.ensure_future(_collect(changes, seen))
        await asyncio.sleep(0.2)  # the subscription is open
        first = await kernel.detect()
        assert first[EXTERNAL, 4] == Found(ip_address("192.0.2.10"), "route", "eth0")
        assert kernel.dumps == 1
        for _ in range(3):  # quiet: the route lookups only
            assert await kernel.detect() == first
        assert kernel.dumps == 1

        up.node.add_address("eth0", "203.0.113.7/24")
        await _until(lambda: any(c.kind == "address" for batch in seen for c in batch))
        after = await kernel.detect()
        assert after[INTERNAL, 4] == Found(ip_address("203.0.113.7"), "cidr", "eth0")
        assert kernel.dumps == 2

        up.node.ip("route", "replace", "default", "via", "192.0.2.1", "src", "203.0.113.7")
        await _until(lambda: len(seen) >= 2)
        moved = await kernel.detect()
        assert moved[EXTERNAL, 4] == Found(ip_address("203.0.113.7"), "route", "eth0")
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)

    asyncio.run(scenario())


def test_without_a_subscription_every_pass_dumps(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    kernel = Kernel(CONFIG, up.node.name)

    async def scenario() -> None:
        await kernel.detect()
        up.node.add_address("eth0", "203.0.113.8/24")
        detected = await kernel.detect()
        assert detected[INTERNAL, 4] == Found(ip_address("203.0.113.8"), "cidr", "eth0")
        assert kernel.dumps == 2

    asyncio.run(scenario())


async def _collect(changes: AsyncIterator[Sequence[Change]], seen: list[Sequence[Change]]) -> None:
    async for batch in changes:
        seen.append(batch)


async def _until(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        assert loop.time() < deadline, "no netlink notification arrived"
        await asyncio.sleep(0.05)
