"""Which Nodes the controller manages, how healthy the cluster is, and how long each Node has
been NotReady.

Pure, no I/O, no clock: `now` is a parameter. State that outlives one evaluation (the first
sighting of each NotReady episode) is passed in and returned, keyed by Node uid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field, replace
from datetime import datetime, timedelta
from typing import Literal

from local_ccm import names
from local_ccm.labels import LabelSelector, qualified_name
from local_ccm.lifecycle.core.model import AUTOSCALER_EFFECT, CONTROL_PLANE_LABELS, NodeView
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, split_list


# ------------------------------------------------------------------ protection
@dataclass(frozen=True)
class Protection:
    """One `--protected-labels` entry: a bare `key` (any value) or `key=value`."""

    key: str
    value: str | None = None

    def matches(self, node: NodeView) -> bool:
        # [fix] labels and annotations are checked independently: the original skipped the
        # annotations of a Node that had no labels at all.
        return any(
            self.key in source and self.value in (None, source[self.key])
            for source in (node.labels, node.annotations)
        )

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


def parse_protected(text: str) -> tuple[Protection, ...]:
    """`--protected-labels`: split on `,`, trimmed, empty entries dropped; `key=value` splits
    on the first `=`. Raises ValidationError naming the first invalid key."""
    entries = []
    for item in split_list(text):
        key, equals, value = item.partition("=")
        if equals and (key != key.strip() or value != value.strip()):
            # `tier = gold` would look for the value " gold", which no label has: a typo in a
            # safety list must not silently protect nothing.
            raise ValidationError(f"entry {item!r}: no spaces around '=' (write "
                                  f"{key.strip()}={value.strip()})")  # fmt: skip
        try:
            qualified_name(key.strip())
        except ValidationError as err:
            raise ValidationError(f"entry {item!r}: {err}") from None
        entries.append(Protection(key.strip(), value if equals else None))
    return tuple(entries)


# ------------------------------------------------------------------ scope
@dataclass(frozen=True)
class Scope:
    """Which Nodes are in scope, always excluded or protected. `selector` None means
    `--node-selector` was empty."""

    selector: LabelSelector | None = None
    watch_autoscaler_taint: bool = True
    protected: tuple[Protection, ...] = ()
    own_node: str | None = None


Exclusion = Literal["control_plane", "terminating", "own_node"]


def is_not_ready(node: NodeView) -> bool:
    """Ready is False or Unknown, or there is no Ready condition."""
    return node.ready != "True"


def is_control_plane(node: NodeView) -> bool:
    """The key is enough, whatever its value."""
    return any(label in node.labels for label in CONTROL_PLANE_LABELS)


def has_autoscaler_taint(node: NodeView, effect: str | None = AUTOSCALER_EFFECT) -> bool:
    """The cluster-autoscaler's taint; `effect=None` accepts any effect."""
    return any(
        t.key == names.AUTOSCALER_TAINT and (effect is None or t.effect == effect)
        for t in node.taints
    )


def in_scope(node: NodeView, scope: Scope) -> bool:
    """In priority order: selector, else autoscaler taint (NoSchedule only), else all."""
    if scope.selector is not None:
        return scope.selector.matches(node.labels)
    return not scope.watch_autoscaler_taint or has_autoscaler_taint(node)


def exclusion(node: NodeView, scope: Scope) -> Exclusion | None:
    """Why a Node is never managed, whatever the scope flags say."""
    if is_control_plane(node):
        return "control_plane"
    if node.deletion_timestamp is not None:
        return "terminating"
    if scope.own_node and node.name == scope.own_node:
        return "own_node"
    return None


def protection(node: NodeView, scope: Scope) -> Protection | None:
    """The first `--protected-labels` entry that protects the Node."""
    return next((entry for entry in scope.protected if entry.matches(node)), None)


def in_population(node: NodeView, scope: Scope) -> bool:
    """Not control-plane and matching the selector if any; the taint filter is NOT
    applied, because the autoscaler's own Nodes are expected to be NotReady."""
    if is_control_plane(node):
        return False
    return scope.selector is None or scope.selector.matches(node.labels)


def is_unhealthy(node: NodeView) -> bool:
    """A population Node counts as unhealthy when NotReady, not being removed by the
    autoscaler (taint with any effect) and not terminating."""
    return (
        is_not_ready(node)
        and not has_autoscaler_taint(node, effect=None)
        and node.deletion_timestamp is None
    )


# ------------------------------------------------------------------ episodes
@dataclass(frozen=True)
class Episode:
    """One uninterrupted NotReady period of one uid, as this process counts it. At its first
    sighting (`first_observed`, wall; `first_mono`, monotonic) the API's time of the
    transition gives a `credit`: how long the Node had already been NotReady, so the countdown
    survives restarts and failovers. From then on only the monotonic clock counts, so a step
    of the wall clock changes nothing; and a Node this process saw Ready `mono - ready` seconds
    before is credited no more than that, so a clock skew between the API's writers and this
    host cannot make a fresh transition look old. `status` and `stored` are the Ready status
    and transition time last seen: the same NotReady status with a newer transition means a
    Ready stretch this process missed, and a new episode (a False -> Unknown transition moves
    `lastTransitionTime` although the Node never became Ready, and keeps the episode)."""

    uid: str
    name: str
    first_observed: datetime
    first_mono: float | None = None
    credit: float = 0.0
    status: str | None = None
    stored: datetime | None = None

    def age(self, mono: float) -> float | None:
        """Seconds NotReady at monotonic time `mono` (None: first seen without that clock)."""
        if self.first_mono is None:
            return None
        return self.credit + max(0.0, mono - self.first_mono)


@dataclass(frozen=True)
class EpisodeUpdate:
    episodes: Mapping[str, Episode]
    started: tuple[str, ...]
    ended: tuple[str, ...]  # the loop drops every piece of state of these uids
    ready_seen: Mapping[str, float] = field(default_factory=dict)  # uid -> mono seen Ready


def _stored(node: NodeView) -> datetime | None:
    """The API's time of the Node's NotReady transition (creationTimestamp without a Ready
    condition)."""
    return node.ready_since if node.ready is not None else node.creation_timestamp


def track_episodes(
    previous: Mapping[str, Episode],
    nodes: Iterable[NodeView],
    now: datetime,
    mono: float | None = None,
    ready_seen: Mapping[str, float] | None = None,
) -> EpisodeUpdate:
    """Episodes of every NotReady Node in `nodes`. An episode ends when its Node is Ready,
    gone, or its name now carries another uid (a recycled name is a new episode), or when the
    Node shows the same NotReady status with a newer transition (a Ready stretch missed).
    `mono` (the monotonic clock) and `ready_seen` (when each uid was last seen Ready) make the
    countdown monotonic and bound its credit (see `Episode`)."""
    current: dict[str, Episode] = {}
    seen = dict(ready_seen or {})
    started = []
    nodes = tuple(nodes)
    for node in nodes:
        if not node.uid:
            continue
        if not is_not_ready(node):
            if mono is not None:
                seen[node.uid] = mono
            continue
        episode = previous.get(node.uid)
        stored = _stored(node)
        if episode is None or _missed_ready(episode, node):
            episode = _first_sighting(node, stored, now, mono, seen.get(node.uid))
            started.append(node.uid)
        elif (episode.status, episode.stored) != (node.ready, stored):
            episode = _restated(episode, node, stored, now, mono=mono, ready_at=seen.get(node.uid))
        current[node.uid] = episode
    alive = {n.uid for n in nodes}
    ended = tuple(sorted(uid for uid in previous if uid not in current))
    seen = {uid: at for uid, at in seen.items() if uid in alive}
    return EpisodeUpdate(current, tuple(started), ended, seen)


def _missed_ready(episode: Episode, node: NodeView) -> bool:
    """The same NotReady status with a newer transition: the Node was Ready in between."""
    stored, before = _stored(node), episode.stored
    if stored is None or before is None:
        return False
    return episode.status == node.ready and stored > before


def _restated(
    episode: Episode, node: NodeView, stored: datetime | None, now: datetime, *,
    mono: float | None, ready_at: float | None,
) -> Episode:  # fmt: skip
    """The same episode under a new status or transition time (False -> Unknown, or a Ready
    condition on a Node that had none): its age is the older of the two readings, as the
    earliest of the two times was before."""
    age = None if mono is None else episode.age(mono)
    if mono is None or age is None:
        return replace(episode, status=node.ready, stored=stored)
    age = max(age, _credit(stored, now, mono, ready_at))
    return replace(episode, first_mono=mono, credit=age, status=node.ready, stored=stored)


def _first_sighting(
    node: NodeView, stored: datetime | None, now: datetime, mono: float | None,
    ready_at: float | None,
) -> Episode:  # fmt: skip
    credit = _credit(stored, now, mono, ready_at)
    return Episode(node.uid, node.name, now, mono, credit, node.ready, stored)


def _credit(
    stored: datetime | None, now: datetime, mono: float | None, ready_at: float | None
) -> float:
    """How long the API says the Node has been NotReady, no longer than since this process
    last saw it Ready."""
    credit = max(0.0, (now - stored).total_seconds()) if stored is not None else 0.0
    if mono is not None and ready_at is not None:
        credit = min(credit, max(0.0, mono - ready_at))  # it was Ready then
    return credit


def not_ready_since(
    node: NodeView, episode: Episode | None, now: datetime, mono: float | None = None
) -> datetime:
    """When the Node became NotReady, on this host's wall clock: `now` minus the episode's
    monotonic age (`Episode`) when both clocks are known; else the earliest of the stored
    transition time and this process's first sighting, a future time counting as `now`."""
    if episode is not None and episode.uid == node.uid and mono is not None:
        age = episode.age(mono)
        if age is not None:
            return now - timedelta(seconds=age)
    stored = _stored(node)
    candidates = [min(t, now) for t in (stored,) if t is not None]
    if episode is not None and episode.uid == node.uid:
        candidates.append(min(episode.first_observed, now))
    return min(candidates, default=now)


# ------------------------------------------------------------------ classification
Status = Literal["out_of_scope", "excluded", "protected", "ready", "waiting", "eligible"]


@dataclass(frozen=True)
class Health:
    """One Node's classification. `reason` names the exclusion or the protecting entry;
    `t0`/`age` (seconds) are set for NotReady managed Nodes."""

    node: NodeView
    status: Status
    reason: str = ""
    t0: datetime | None = None
    age: float = 0.0

    @property
    def managed(self) -> bool:
        return self.status not in ("out_of_scope", "excluded")


def classify(
    node: NodeView,
    scope: Scope,
    episode: Episode | None,
    now: datetime,
    timeout: float,
    *,
    mono: float | None = None,
) -> Health:
    """Scope, exclusions, protection, readiness, then NotReady age ≥ timeout."""
    if not in_scope(node, scope):
        return Health(node, "out_of_scope")
    excluded = exclusion(node, scope)
    if excluded is not None:
        return Health(node, "excluded", excluded)
    protected = protection(node, scope)
    if protected is not None:
        return Health(node, "protected", str(protected))
    if not is_not_ready(node):
        return Health(node, "ready")
    t0 = not_ready_since(node, episode, now, mono)
    age = (now - t0).total_seconds()
    return Health(node, "eligible" if age >= timeout else "waiting", t0=t0, age=age)


def eligible_at(health: Health, timeout: float) -> datetime | None:
    """When a waiting or eligible Node's age reaches the timeout (for scheduling the next
    evaluation)."""
    return None if health.t0 is None else health.t0 + timedelta(seconds=timeout)


@dataclass(frozen=True)
class Assessment:
    """One evaluation's view of the cluster: the population gauges and the eligible Nodes,
    oldest `t0` first (ties: name), as `plan.plan_deletions` walks them."""

    population: int
    unhealthy: int
    # Every Node not terminating: (all, NotReady, unhealthy); None with --node-selector, whose
    # watch sees only the selected Nodes (the cluster beyond them is not known).
    cluster: tuple[int, int, int] | None
    managed: int
    managed_unhealthy: int
    protected: int
    eligible: tuple[Health, ...]
    managed_nodes: tuple[Health, ...]
    episodes: EpisodeUpdate


def assess(
    nodes: Iterable[NodeView],
    scope: Scope,
    episodes: Mapping[str, Episode],
    now: datetime,
    timeout: float,
    *,
    mono: float | None = None,
    ready_seen: Mapping[str, float] | None = None,
) -> Assessment:
    """Classify every Node and count the population for the circuit breaker."""
    nodes = tuple(nodes)
    update = track_episodes(episodes, nodes, now, mono, ready_seen)
    population = [n for n in nodes if in_population(n, scope)]
    managed = tuple(
        h
        for h in (
            classify(n, scope, update.episodes.get(n.uid), now, timeout, mono=mono) for n in nodes
        )
        if h.managed
    )
    eligible = sorted(
        (h for h in managed if h.status == "eligible"),
        key=lambda h: (h.t0, h.node.name),
    )
    alive = [n for n in nodes if n.deletion_timestamp is None]
    return Assessment(
        population=len(population),
        unhealthy=sum(1 for n in population if is_unhealthy(n)),
        cluster=None
        if scope.selector is not None
        else (
            len(alive),
            sum(1 for n in alive if is_not_ready(n)),
            sum(1 for n in alive if is_unhealthy(n)),
        ),
        managed=len(managed),
        managed_unhealthy=sum(1 for h in managed if is_not_ready(h.node)),
        protected=sum(1 for h in managed if h.status == "protected"),
        eligible=tuple(eligible),
        managed_nodes=managed,
        episodes=update,
    )


# ------------------------------------------------------------------ re-check
@dataclass(frozen=True)
class Abort:
    """Why the fresh re-read stopped a deletion: `gone` (NotFound) or `aborted`."""

    result: Literal["gone", "aborted"]
    check: str


def recheck(
    fresh: NodeView | None,
    uid: str,
    scope: Scope,
    *,
    episode: Episode | None,
    now: datetime,
    timeout: float,
    breaker_open: bool,
    mono: float | None = None,
) -> Abort | None:
    """The re-check on the quorum-read Node (the cache may be seconds old and probing takes
    seconds); None means: DELETE with this object's uid and
    resourceVersion as preconditions."""
    if fresh is None:
        return Abort("gone", "the Node no longer exists")
    if fresh.uid != uid:
        return Abort("aborted", f"uid changed from {uid} to {fresh.uid}")
    if episode is not None and _missed_ready(episode, fresh):
        return Abort("aborted", "it was Ready since: a newer NotReady transition")
    health = classify(fresh, scope, episode, now, timeout, mono=mono)
    problem = {
        "out_of_scope": "no longer in scope",
        "excluded": f"excluded ({health.reason})",
        "protected": f"protected by {health.reason}",
        "ready": "the Node is Ready",
        "waiting": f"NotReady for only {health.age:.0f}s (timeout {timeout:.0f}s)",
    }.get(health.status)
    if problem is not None:
        return Abort("aborted", problem)
    if breaker_open:
        return Abort("aborted", "circuit breaker open")
    return None
