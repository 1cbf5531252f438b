"""The L2 announcement's metrics, on the agent's registry (added only when it runs): the
addresses this Node answers for, takeovers, releases, Leases deleted by the clean-up, failed
Lease writes, and the speaker's
frame counters, read from `Speaker.counters` when scraped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from local_ccm.announce.speaker import Counters
from local_ccm.runtime.metrics import counter, gauge
from local_ccm.runtime.promtext import Family, Registry, Sample

PREFIX: Final = "local_ccm_agent_l2_"
WRITE_FAILURES: Final = ("conflict", "transient", "refused")  # the `reason` label's values


class AnnounceMetrics:
    """Every L2 metric, registered on the agent's `registry`."""

    def __init__(self, registry: Registry, counters: Counters) -> None:
        self.announced = gauge(
            "addresses_announced", "Addresses this Node answers ARP/NDP for now"
        ).create(PREFIX, registry)
        self.takeovers = counter(
            "takeovers_total", "Addresses this Node took over (a successful Lease acquire)"
        ).create(PREFIX, registry)
        self.releases = counter(
            "releases_total", "Addresses this Node released (no longer eligible, or stopping)"
        ).create(PREFIX, registry)
        self.deleted = counter(
            "leases_deleted_total",
            "Leases of addresses no longer announced that this Node deleted (the clean-up)",
        ).create(PREFIX, registry)
        self.write_failures = counter(
            "lease_write_failures_total", "Lease writes that failed", "reason",
            series=[WRITE_FAILURES],
        ).create(PREFIX, registry)  # fmt: skip
        registry.register(SpeakerCollector(counters))


class SpeakerCollector:
    """The speaker's plain counters as Prometheus counters, read at scrape time."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def collect(self) -> Iterable[Family]:
        c = self.counters
        yield _family("replies", "ARP replies and Neighbor Advertisements sent",
                      ("interface", "family"), c.replies)  # fmt: skip
        yield _family("announcements", "Gratuitous ARP and unsolicited advertisements sent",
                      ("interface", "family"), c.announcements)  # fmt: skip
        yield _family("frames_dropped", "Frames read and not answered, by reason",
                      ("interface", "reason"), c.dropped)  # fmt: skip
        yield _family("socket_reopens", "Packet socket reopens after an error",
                      ("interface",), {(k,): v for k, v in c.reopens.items()})  # fmt: skip


def _family(name: str, doc: str, labels: tuple[str, ...], values: Mapping[Any, int]) -> Family:
    return Family(PREFIX + name, "counter", doc, list(_samples(PREFIX + name, labels, values)))


def _samples(name: str, labels: tuple[str, ...], values: Mapping[Any, int]) -> Iterator[Sample]:
    for key, value in sorted(dict(values).items()):
        yield Sample(name + "_total", dict(zip(labels, key, strict=True)), float(value))
