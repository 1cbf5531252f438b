"""Address fights: a state machine of what the agent last wrote and how
often another writer (usually a kubelet without ``--cloud-provider=external``) undid it.

Pure, no I/O, no clock: times are monotonic seconds passed in by the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from local_ccm import names
from local_ccm.agent.core.addresses import NodeAddress
from local_ccm.records import dataclass

Obj = Mapping[str, Any]
REVERT_WINDOW = 600.0
REVERTS_FOR_CONFLICT = 3
FIRST_PAUSE, MAX_PAUSE = 60.0, 1800.0
RESOLVE_AFTER = 600.0
FightEvent = Literal["revert", "conflict_entered", "conflict_resolved"]


@dataclass(frozen=True)
class FightState:
    """What the agent last wrote and how often someone undid it (monotonic seconds)."""

    written: tuple[NodeAddress, ...] | None = None  # None: nothing written, or already reverted
    written_rv: str | None = None
    written_at: float | None = None
    reverts: tuple[float, ...] = ()
    conflict: bool = False
    pause: float = 0.0
    retry_at: float = 0.0


def fight_record_write(
    state: FightState, written: Sequence[NodeAddress], rv: str, now: float
) -> FightState:
    return replace(state, written=tuple(written), written_rv=rv, written_at=now)


def fight_observe(
    state: FightState,
    *,
    addresses: Sequence[NodeAddress],
    rv: str,
    would_write: bool,
    now: float,
) -> tuple[FightState, FightEvent | None]:
    """A watch event not caused by the agent. A revert needs a newer RV, a list that differs
    from what we wrote, and a desired list that differs from it (we would write again)."""
    if state.written is None or not _newer(rv, state.written_rv):
        return state, None
    if tuple(addresses) == state.written or not would_write:
        return state, None
    reverts = (*(t for t in state.reverts if now - t < REVERT_WINDOW), now)
    state = replace(state, written=None, reverts=reverts)  # one revert per write
    if state.conflict:  # the retry write was undone again: back off further
        pause = min(state.pause * 2, MAX_PAUSE)
        return replace(state, pause=pause, retry_at=now + pause), "revert"
    if len(reverts) >= REVERTS_FOR_CONFLICT:
        entered = replace(state, conflict=True, pause=FIRST_PAUSE, retry_at=now + FIRST_PAUSE)
        return entered, "conflict_entered"
    return state, "revert"


def fight_may_write(state: FightState, now: float) -> bool:
    """Address writes pause in the conflict state until the retry time."""
    return not state.conflict or now >= state.retry_at


def fight_tick(state: FightState, now: float) -> tuple[FightState, FightEvent | None]:
    """Leave the conflict state once a write has survived RESOLVE_AFTER seconds."""
    if not state.conflict or state.written is None or state.written_at is None:
        return state, None
    if now - state.written_at < RESOLVE_AFTER:
        return state, None
    return replace(state, conflict=False, pause=0.0, retry_at=0.0, reverts=()), "conflict_resolved"


def _newer(rv: str, than: str | None) -> bool:
    if than is None:
        return True
    try:
        return int(rv) > int(than)
    except ValueError:  # resourceVersions are opaque; etcd's are integers
        return rv != than


def last_address_writer(node: Obj, *, ignore: str = names.AGENT) -> str | None:
    """The field manager that most recently touched ``status.addresses`` (other than us)."""
    best: tuple[str, str] | None = None
    for entry in node.get("metadata", {}).get("managedFields") or ():
        fields = entry.get("fieldsV1") or {}
        manager = entry.get("manager")
        if manager == ignore or "f:addresses" not in (fields.get("f:status") or {}):
            continue
        stamp = str(entry.get("time") or "")
        if best is None or stamp >= best[0]:
            best = (stamp, str(manager))
    return None if best is None else best[1]
