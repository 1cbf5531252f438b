"""What the controllers of the kit build the same way: the Event outbox of a controller in the
manager, informers made alike, the last write of each object while the cache lags it, and the
time stamp a status or approval condition carries. docs/design.md, "The controller kit".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from local_ccm.clock import Clock
from local_ccm.kube.informer import DEFAULT_ERRORS, ErrorKinds, Informer, ListWatch, StreamEnd
from local_ccm.runtime import events as ev
from local_ccm.runtime.outbox import EventOutbox, EventSink

T = TypeVar("T")
Obj = dict[str, Any]
OUTBOX_CAPACITY: Final = 1000  # Events waiting to be sent; more are dropped


def event_outbox(
    sink: EventSink, clock: Clock, name: str, *, instance: str, namespace: str
) -> EventOutbox:
    """The Event outbox of controller `name` (the Events' reporting component) run by the
    manager's `instance`, posting to `namespace` (an Event about a namespaced object goes to
    the object's), at most `OUTBOX_CAPACITY` Events waiting."""
    return EventOutbox(sink, clock, ev.Reporter(name, instance), namespace=namespace,
                       capacity=OUTBOX_CAPACITY)  # fmt: skip


class Informers:
    """Makes a controller's informers alike: one clock and random source, and the end of each
    one's watch counted under its name (`ControllerMetrics.watch_ended`)."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random | None,
        ended: Callable[[str], Callable[[StreamEnd], None]],
    ) -> None:
        self.clock, self.rng, self.ended = clock, rng or random.Random(), ended

    def make(
        self,
        source: ListWatch,
        project: Callable[[Obj], T],
        name: str,
        errors: ErrorKinds = DEFAULT_ERRORS,
    ) -> Informer[T]:
        return Informer(source, project, clock=self.clock, rng=self.rng, name=name,
                        errors=errors, on_end=self.ended(name))  # fmt: skip


def version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class LastWrites:
    """What this controller's last write of each object returned, kept while the cache still
    shows a version that write (or one before it) replaced: its watch event is on the way, and
    deciding on the older copy would only end in a refused write."""

    def __init__(self) -> None:
        self._written: dict[str, tuple[frozenset[str], Obj]] = {}

    def fresh(self, key: str, cached: Obj | None) -> Obj | None:
        """The copy to decide on: the last write's answer while `cached` is a version it
        replaced, else `cached` (and the answer is forgotten: the cache caught up)."""
        mine = self._written.get(key)
        if cached is not None and mine is not None and version(cached) in mine[0]:
            return mine[1]
        self._written.pop(key, None)
        return cached

    def wrote(self, key: str, base: Obj, answer: Obj) -> None:
        """A write of `key`, decided on `base`, returned `answer`."""
        replaced = self._written.get(key, (frozenset[str](), base))[0] | {version(base)}
        self._written[key] = (replaced, answer)

    def forget(self, key: str) -> None:
        self._written.pop(key, None)


def stamp(clock: Clock) -> str:
    """Now, as a condition's or an approval's time (metav1.Time)."""
    return ev.rfc3339(clock.now())
