"""The agent's kernel adapters: address detection and the netlink change subscription, over
one `Kernel` so that detection knows whether the kernel reported a change. `netns` runs both
in a network namespace (tests).

Detection runs on the event loop: its netlink requests are answered by the kernel at once
(about a millisecond for a pass), and handing them to a worker thread cost more CPU than the
requests themselves on an idle node. In a named namespace it runs in a worker thread, since
entering the namespace changes the calling thread.

The address and link dumps are read again only when the subscription reported a change (or
lost some: an overflow is a change), or while there is no subscription; the route lookups
run on every pass, since a policy-routing rule can change their answer without an address,
link or route notification. So a quiet node's periodic pass costs the route lookups and, when
they answer as before, nothing else (the last report is the answer); the dumps are read again
every `full_every` seconds (--resync-interval) all the same, in case a notification was lost
without the kernel saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from local_ccm.agent.core.candidates import Detected
from local_ccm.agent.core.config import AgentConfig
from local_ccm.agent.detect import DetectionReport, detect_addresses
from local_ccm.clock import Clock, SystemClock
from local_ccm.netlink import Change, Monitor


class Kernel:
    """`detect` and `changes` of one agent, sharing what the subscription saw."""

    def __init__(
        self,
        config: AgentConfig,
        netns: str | None = None,
        *,
        full_every: float = 1800.0,
        clock: Clock | None = None,
    ) -> None:
        self._config, self._netns = config, netns
        self._full_every, self._clock = full_every, clock or SystemClock()
        self._dumped_at = 0.0
        self._last: DetectionReport | None = None  # the report of the current dump
        self._stale = True  # a change was reported since the last dump
        self._monitored = False  # a subscription is open
        self.dumps = 0  # address and link dumps read

    async def detect(self) -> Detected:
        due = self._clock.monotonic() - self._dumped_at >= self._full_every
        last = None if self._stale or due or not self._monitored else self._last
        self._stale = False  # a change reported while dumping makes the next pass dump again
        reuse = None if last is None else last.candidates
        if self._netns is None:
            report = detect_addresses(self._config, candidates=reuse, previous=last)
        else:
            report = await asyncio.to_thread(
                detect_addresses, self._config, netns=self._netns, candidates=reuse, previous=last
            )
        if reuse is None:
            self._keep(report)
        elif report is not last:
            self._last = report  # the same dump, other lookups
        return report.results

    def _keep(self, report: DetectionReport) -> None:
        if report.dump_failed:
            self._stale = True  # read it again next time
        else:
            self._last, self.dumps = report, self.dumps + 1
            self._dumped_at = self._clock.monotonic()

    def changes(self) -> AsyncIterator[Sequence[Change]]:
        """Each call opens a netlink subscription at once and iterates it."""
        return self._batches(Monitor(netns=self._netns))

    async def _batches(self, monitor: Monitor) -> AsyncIterator[Sequence[Change]]:
        with contextlib.closing(monitor):
            self._monitored, self._stale = True, True  # what changed before it opened is unknown
            try:
                async for batch in monitor.changes():
                    self._stale = True
                    yield batch
            finally:
                self._monitored = False
