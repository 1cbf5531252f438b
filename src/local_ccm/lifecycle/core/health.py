"""Which Nodes the controller manages, how healthy the cluster is, and how long each Node has
been NotReady.

Pure, no I/O, no clock: `now` is a parameter. State that outlives one evaluation (the first
sighting of each NotReady episode) is passed in and returned, keyed by Node uid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    """One uninterrupted NotReady period of one uid. `first_observed` is when this process
    first saw it: a False -> Unknown transition moves `lastTransitionTime` although the Node
    never became Ready, so NotReady-since is the earliest of the two."""

    uid: str
    name: str
    first_observed: datetime


@dataclass(frozen=True)
class EpisodeUpdate:
    episodes: Mapping[str, Episode]
    started: tuple[str, ...]
    ended: tuple[str, ...]  # the loop drops every piece of state of these uids


def track_episodes(
    previous: Mapping[str, Episode], nodes: Iterable[NodeView], now: datetime
) -> EpisodeUpdate:
    """Episodes of every NotReady Node in `nodes`. An episode ends when its Node is Ready,
    gone, or its name now carries another uid (a recycled name is a new episode)."""
    current: dict[str, Episode] = {}
    started = []
    for node in nodes:
        if not is_not_ready(node) or not node.uid:
            continue
        episode = previous.get(node.uid)
        if episode is None:
            episode = Episode(node.uid, node.name, now)
            started.append(node.uid)
        current[node.uid] = episode
    ended = tuple(sorted(uid for uid in previous if uid not in current))
    return EpisodeUpdate(current, tuple(started), ended)


def not_ready_since(node: NodeView, episode: Episode | None, now: datetime) -> datetime:
    """The earliest of lastTransitionTime (or creationTimestamp without a Ready
    condition) and this process's first sighting; a future time counts as `now`."""
    stored = node.ready_since if node.ready is not None else node.creation_timestamp
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
    node: NodeView, scope: Scope, episode: Episode | None, now: datetime, timeout: float
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
    t0 = not_ready_since(node, episode, now)
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
) -> Assessment:
    """Classify every Node and count the population for the circuit breaker."""
    nodes = tuple(nodes)
    update = track_episodes(episodes, nodes, now)
    population = [n for n in nodes if in_population(n, scope)]
    managed = tuple(
        h
        for h in (classify(n, scope, update.episodes.get(n.uid), now, timeout) for n in nodes)
        if h.managed
    )
    eligible = sorted(
        (h for h in managed if h.status == "eligible"),
        key=lambda h: (h.t0, h.node.name),
    )
    return Assessment(
        population=len(population),
        unhealthy=sum(1 for n in population if is_unhealthy(n)),
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
) -> Abort | None:
    """The re-check on the quorum-read Node (the cache may be seconds old and probing takes
    seconds); None means: DELETE with this object's uid and
    resourceVersion as preconditions."""
    if fresh is None:
        return Abort("gone", "the Node no longer exists")
    if fresh.uid != uid:
        return Abort("aborted", f"uid changed from {uid} to {fresh.uid}")
    health = classify(fresh, scope, episode, now, timeout)
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
