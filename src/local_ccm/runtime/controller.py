"""The controller contract: what every controller is, whatever it decides (the central
controllers, and the agent with its one key, its Node).

A controller names itself, says what it watches (each watch: a source of changes, an informer
for the central controllers, and how one of its changes maps to the keys worth another look),
decides one key at a time (`sync`), says whether it is ready and which permissions it needs.
It neither starts tasks nor retries nor asks whether this process may write:
`runtime.worker.Worker` runs it (one queue, the workers, the leader's write fence, the error
policy). docs/design.md, "The controller kit".

A controller whose decision is global (a periodic monitor, as kube-controller-manager has)
uses one fixed key: its watches map every change to that key, `synced` returns it and `sync`
ends with `RequeueAfter(period)`; the slow work the evaluation plans (a probe, a deletion) goes
to keys of its own, named in `RequeueAfter.others`, so workers run it beside the evaluation and
its sync ends with `Done(others=(the fixed key,))` to have the result evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol

from local_ccm.kube.nodes import Access
from local_ccm.records import dataclass
from local_ccm.runtime import events as ev

# ---------------------------------------------------------------- what a sync ends with


@dataclass(frozen=True)
class Done:
    """The key is settled until something changes; `others`: keys this sync made worth
    another look (an address it released may be what they wait for)."""

    others: tuple[str, ...] = ()


@dataclass(frozen=True)
class Retry:
    """Not settled: again after the key's rate-limited backoff (doubling, capped)."""

    reason: str


@dataclass(frozen=True)
class RequeueAfter:
    """Settled for now; look again after `seconds` (not a failure: the backoff starts over);
    `others`, as for `Done`: keys worth a look now (the work a global evaluation planned)."""

    seconds: float
    others: tuple[str, ...] = ()


Result = Done | Retry | RequeueAfter
DONE = Done()

# ---------------------------------------------------------------- what it watches and needs


class Source(Protocol):
    """What a controller watches: a `kube.informer.Informer` (its changes are `Change`s), or
    another source of changes (the agent's kernel subscription, a timer)."""

    @property
    def name(self) -> str: ...

    def add_handler(self, handler: Callable[[Any], None]) -> None:
        """`handler(change)` on the event loop for every change; it only maps and wakes."""
        ...

    async def run(self) -> None:
        """Produce changes until cancelled; raises when it cannot go on."""
        ...

    async def wait_synced(self) -> None:
        """Returns once the first state is read (an informer's LIST)."""
        ...


@dataclass(frozen=True)
class Watch:
    """One source and the keys a change of it makes worth another look."""

    source: Source
    keys: Callable[[Any], Iterable[str]]


@dataclass(frozen=True)
class Permission:
    """One RBAC rule the controller needs, as a Role states it: API group ("" the core group),
    resource ("services/status" for a subresource), verbs, and optionally the only object
    names (`resourceNames`) and the namespace (None: cluster-wide)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    namespace: str | None = None


def accesses(permissions: Iterable[Permission]) -> list[Access]:
    """The permissions as the start-up access review asks them, one per verb and name."""
    found: list[Access] = []
    for p in permissions:
        resource, _, sub = p.resource.partition("/")
        for verb in p.verbs:
            found += [Access(verb, resource, p.group, namespace=p.namespace or "", name=name,
                             subresource=sub) for name in p.names or ("",)]  # fmt: skip
    return found


Fence = Callable[[], Coroutine[Any, Any, None]]  # returns once this process may write


async def open_fence() -> None:
    """The fence a controller holds before the worker hands over its own (`beside`)."""


class Controller(Protocol):
    """What `runtime.worker.Worker` runs."""

    @property
    def name(self) -> str:
        """Its name in logs and the `controller` label (e.g. "service-lb-ipam")."""
        ...

    @property
    def permissions(self) -> Sequence[Permission]: ...

    def watches(self) -> Sequence[Watch]:
        """Every source it reads; sync is called only once all of them have their first state."""
        ...

    def synced(self) -> Iterable[str]:
        """Called once every watch has listed, before the first sync: state rebuilt from the
        caches, and the keys to start with."""
        ...

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        """Loops that run next to the syncs once synced (its Event outbox, say); one that
        writes awaits `fence()` before each write."""
        ...

    async def sync(self, key: str) -> Result:
        """Decide one key and write; raises the API's errors (the worker's error policy)."""
        ...

    def subject(self, key: str) -> ev.Subject | None:
        """The object an Event about a failing `key` is about, if any."""
        ...

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        """Post an Event (through its outbox, once per subject, reason and message)."""
        ...

    def ready(self) -> tuple[bool, str]: ...
