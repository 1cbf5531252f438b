"""Kubernetes Events, once for every component: what one says, about which object, the core/v1
body, and the budget that keeps repeats and bursts out of ``kubectl describe``.

Pure, no I/O, no clock: times are parameters. Each component's ``core/events.py`` keeps only
its reasons and message builders; ``local_ccm.runtime.outbox`` posts the bodies.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final, Literal

from local_ccm.records import dataclass

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE: Final = 1024
SAME_EVENT_EVERY: Final = 600.0  # the same key at most once per 10 min


@dataclass(frozen=True)
class Subject:
    """The object an Event is about; `namespace` only for a namespaced one (a Service), whose
    Events must live in its own namespace."""

    kind: str
    name: str
    uid: str
    api_version: str
    namespace: str | None = None


def node(name: str, uid: str) -> Subject:
    return Subject("Node", name, uid, "v1")


@dataclass(frozen=True)
class Reporter:
    """Who reports: the component, its instance, and the host it runs on (the agent's)."""

    component: str
    instance: str
    host: str | None = None


@dataclass(frozen=True)
class EventSpec:
    type: EventType
    reason: str
    message: str


def clip(text: str) -> str:
    """At most `MAX_MESSAGE` characters, the cut marked."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def rfc3339(moment: datetime) -> str:
    """metav1.Time: UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    spec: EventSpec, subject: Subject, reporter: Reporter, *, namespace: str, now: datetime
) -> dict[str, Any]:
    """A core/v1 Event about `subject`, in its namespace or else in `namespace`."""
    stamp = rfc3339(now)
    involved = {"apiVersion": subject.api_version, "kind": subject.kind,
                "name": subject.name, "uid": subject.uid}  # fmt: skip
    if subject.namespace is not None:
        namespace = involved["namespace"] = subject.namespace
    source = {"component": reporter.component}
    if reporter.host is not None:
        source["host"] = reporter.host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{subject.name}.", "namespace": namespace},
        "involvedObject": involved,
        "type": spec.type,
        "reason": spec.reason,
        "message": clip(spec.message),
        "source": source,
        "reportingComponent": reporter.component,
        "reportingInstance": reporter.instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }  # fmt: skip


@dataclass(frozen=True)
class EventBudget:
    """Keys sent in the last `every` seconds and, with `per_minute`, the send times of the
    last minute (monotonic seconds)."""

    every: float = SAME_EVENT_EVERY
    per_minute: int | None = None
    recent: tuple[tuple[Hashable, float], ...] = ()
    sent: tuple[float, ...] = ()


def admit(budget: EventBudget, key: Hashable, now: float) -> tuple[EventBudget, bool]:
    """May the Event of `key` be sent now? Once per `every` seconds per key, and at most
    `per_minute` in any minute."""
    recent = tuple(e for e in budget.recent if now - e[1] < budget.every)
    sent = tuple(t for t in budget.sent if now - t < 60.0)
    pruned = replace(budget, recent=recent, sent=sent)
    full = budget.per_minute is not None and len(sent) >= budget.per_minute
    if full or any(k == key for k, _ in recent):
        return pruned, False
    return replace(pruned, recent=(*recent, (key, now)), sent=(*sent, now)), True


def forget(budget: EventBudget, key: Hashable) -> EventBudget:
    """`budget` without the last send of `key`: its next Event may go at once."""
    return replace(budget, recent=tuple(e for e in budget.recent if e[0] != key))
