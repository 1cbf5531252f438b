"""The agent's kernel adapters: address detection in a worker thread (netlink calls block) and
the netlink change subscription. `netns` runs either in a network namespace (tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from local_ccm.agent.core.config import AgentConfig
from local_ccm.agent.detect import detect_addresses
from local_ccm.agent.loop import ChangeSource, Detected, DetectFn
from local_ccm.netlink import Change, Monitor


def kernel_detector(config: AgentConfig, netns: str | None = None) -> DetectFn:
    async def detect() -> Detected:
        report = await asyncio.to_thread(detect_addresses, config, netns=netns)
        return report.results

    return detect


def kernel_changes(netns: str | None = None) -> ChangeSource:
    """Each call opens a netlink subscription at once and iterates it."""

    def open_changes() -> AsyncIterator[Sequence[Change]]:
        return _batches(Monitor(netns=netns))

    return open_changes


async def _batches(monitor: Monitor) -> AsyncIterator[Sequence[Change]]:
    with contextlib.closing(monitor):
        async for batch in monitor.changes():
            yield batch
