"""Which metadata labels to write on a Node, and which are the agent's to change.

Pure, no I/O. The agent records the labels it wrote, with their values, in the annotation
`local-ccm.io/owned-labels` (as it records addresses in `owned-addresses`). A label is the
agent's only while the Node still carries the value it wrote: a label someone else set, or
changed after the agent set it, is never overwritten (the upstream cloud-node controller's rule
for instance type and topology labels, kept for every key here). A wanted value that differs
from a foreign label is a conflict to report, never a fight.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from local_ccm.agent.core.metadata import BETA_TWINS

OWNED_LABELS_ANNOTATION = "local-ccm.io/owned-labels"


@dataclass(frozen=True)
class Conflict:
    key: str
    theirs: str
    ours: str


@dataclass(frozen=True)
class LabelPlan:
    """Labels to set and remove, and the ownership record to write with them."""

    set: Mapping[str, str]
    remove: tuple[str, ...]
    owned: Mapping[str, str]
    conflicts: tuple[Conflict, ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.set or self.remove)


def read_owned(annotations: Mapping[str, str]) -> dict[str, str]:
    """The ownership record; a damaged one owns nothing (so nothing foreign is ever changed)."""
    try:
        value = json.loads(annotations.get(OWNED_LABELS_ANNOTATION, "{}"))
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def with_beta_twins(wanted: Mapping[str, str]) -> dict[str, str]:
    """`wanted` plus the deprecated beta keys of zone, region and instance type."""
    return {**wanted, **{BETA_TWINS[k]: v for k, v in wanted.items() if k in BETA_TWINS}}


def plan_labels(
    labels: Mapping[str, str], owned: Mapping[str, str], wanted: Mapping[str, str]
) -> LabelPlan:
    """Set what is wanted and free; update or remove what is still ours; keep the rest."""
    mine = {k: v for k, v in owned.items() if labels.get(k) == v}
    to_set: dict[str, str] = {}
    conflicts = []
    for key, value in wanted.items():
        if key in labels and key not in mine:
            if labels[key] != value:
                conflicts.append(Conflict(key, labels[key], value))
        elif labels.get(key) != value:
            to_set[key] = value
    remove = tuple(sorted(k for k in mine if k not in wanted))
    new_owned = {k: v for k, v in mine.items() if k in wanted} | to_set
    return LabelPlan(to_set, remove, dict(sorted(new_owned.items())), tuple(conflicts))


def owned_annotation(plan: LabelPlan) -> str:
    return json.dumps(dict(plan.owned), separators=(",", ":"), sort_keys=True)
