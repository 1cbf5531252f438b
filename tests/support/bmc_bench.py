"""Measuring node-bmc at scale (tests/bench/test_bmc_scale.py): what is read from the
controller's /metrics, the Redfish emulator's access log and the API server's audit log, and
the summary of the power-off -> taint latencies. Pure functions, but `read_log_from`."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.audit import AuditEvent

# werkzeug's access line: 127.0.0.1 - - [02/Dec/2026 12:40:12] "GET /redfish/v1/ HTTP/1.1" 200 -
_ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) ')
REDFISH_COUNT = "local_ccm_bmc_redfish_request_duration_seconds_count"
REDFISH_BUCKET = "local_ccm_bmc_redfish_request_duration_seconds_bucket"


# ------------------------------------------------------------------ the emulator's access log
def access_requests(text: str) -> dict[str, int]:
    """The requests an emulator's log `text` records, by "METHOD status"."""
    found = Counter(f"{m.group(1)} {m.group(3)}" for m in _ACCESS.finditer(text))
    return dict(sorted(found.items()))


def read_log_from(path: Path, offset: int) -> tuple[str, int]:
    """The text appended to `path` since byte `offset`, and the new offset (whole lines)."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return data[:end].decode(errors="replace"), offset + end


# ------------------------------------------------------------------ /metrics
@dataclass(frozen=True)
class Scrape:
    """One /metrics text as samples: (name, labels, value)."""

    samples: tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        found = [
            (s.name, tuple(sorted(s.labels.items())), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
        return cls(tuple(found))

    def total(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`."""
        return sum(v for n, ls, v in self.samples
                   if n == name and labels.items() <= dict(ls).items())  # fmt: skip

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """`name`'s samples summed by the value of `label`."""
        out: dict[str, float] = {}
        for n, ls, v in self.samples:
            if n == name:
                key = dict(ls).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out


def bucket_delta(before: Scrape, after: Scrape, name: str) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets (le, count) over the interval, every label summed."""
    old, new = before.by_label(name, "le"), after.by_label(name, "le")
    return sorted((float(le), count - old.get(le, 0.0)) for le, count in new.items())


def quantile_le(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (None: no observation)."""
    total = buckets[-1][1] if buckets else 0.0
    return next((le for le, count in buckets if total and count >= q * total), None)


def mean_of(count: float, seconds_sum: float) -> float | None:
    return seconds_sum / count if count else None


# ------------------------------------------------------------------ the audit log
def by_request(events: Iterable[AuditEvent]) -> dict[str, int]:
    """Requests by "verb resource" (a watch counts when it is opened)."""
    found = Counter(f"{e.verb} {e.resource or e.raw.get('requestURI', '-')}" for e in events)
    return dict(sorted(found.items()))


# ------------------------------------------------------------------ rates and latencies
def per_hour(value: float, seconds: float) -> float:
    return round(value * 3600.0 / seconds, 1)


def per_node_hour(value: float, seconds: float, nodes: int) -> float:
    return round(value * 3600.0 / seconds / nodes, 2)


def latency_summary(values: Sequence[float], interval: float) -> dict[str, Any]:
    """Median, 90th percentile (nearest rank) and extremes of `values`, also as a share of
    the poll `interval`."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    p90 = ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]
    median = statistics.median(ordered)
    return {
        "count": len(ordered), "min_s": round(ordered[0], 2), "median_s": round(median, 2),
        "p90_s": round(p90, 2), "max_s": round(ordered[-1], 2),
        "median_per_interval": round(median / interval, 2),
        "max_per_interval": round(ordered[-1] / interval, 2),
    }  # fmt: skip


def spread(names: Sequence[str], count: int) -> list[str]:
    """`count` of `names`, evenly spaced (all of them when there are fewer)."""
    if count >= len(names):
        return list(names)
    step = len(names) / count
    return [names[int(i * step)] for i in range(count)]


def shares(requests: Mapping[str, int], groups: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """`requests` ("verb resource") summed into named groups of resources; the rest "other"."""
    out = dict.fromkeys([*groups, "other"], 0)
    for key, n in requests.items():
        resource = key.split(" ", 1)[-1]
        group = next((g for g, rs in groups.items() if resource in rs), "other")
        out[group] += n
    return out
