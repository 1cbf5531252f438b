"""Which metadata labels to write on a Node, and which are the agent's to change.

Pure, no I/O. The agent records the labels it wrote, with their values, in the annotation
`local-ccm.io/owned-labels` (as it records addresses in `owned-addresses`). A label is the
agent's only while the Node still carries the value it wrote: a label someone else set, or
changed after the agent set it, is never overwritten (the upstream cloud-node controller's rule
for instance type and topology labels, kept for every key here). A wanted value that differs
from a foreign label is a conflict to report, never a fight.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field

from local_ccm.agent.core.addresses import NodeAddress
from local_ccm.agent.core.config import IPAddress
from local_ccm.agent.core.events import METADATA_LABEL_CONFLICT
from local_ccm.agent.core.metadata import (
    BETA_TWINS,
    DEFAULT_LABEL_DOMAIN,
    NodeView,
    Rules,
    desired_labels,
    is_removable_key,
)
from local_ccm.agent.core.writes import Obj, Patch, test_rv
from local_ccm.kube.request import pointer
from local_ccm.names import OWNED_LABELS_ANNOTATION
from local_ccm.records import dataclass
from local_ccm.runtime.events import EventSpec


@dataclass(frozen=True)
class LabelSetup:
    """--metadata: the rules in force, the machine's facts, --metadata-beta-labels and
    --metadata-label-domains."""

    rules: Rules
    facts: Mapping[str, str] = field(default_factory=dict)
    beta: bool = False
    domains: tuple[str, ...] = (DEFAULT_LABEL_DOMAIN,)


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


def with_beta_twins(
    wanted: Mapping[str, str], others: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`wanted` plus the deprecated beta keys of zone, region and instance type. A key that
    someone else holds with another value in ``others`` (the Node's labels the agent did not
    write) keeps theirs, so its twin is left out too: a twin must never contradict the key it
    stands for (topology spreading on the old keys would see another zone)."""
    held = others or {}
    return {**wanted, **{
        BETA_TWINS[k]: v for k, v in wanted.items() if k in BETA_TWINS and held.get(k, v) == v
    }}  # fmt: skip


def mine_of(labels: Mapping[str, str], owned: Mapping[str, str]) -> dict[str, str]:
    """The owned labels the Node still carries with the value the agent wrote."""
    return {k: v for k, v in owned.items() if labels.get(k) == v}


def input_labels(node: Obj) -> dict[str, str]:
    """The labels the rules may look at: the Node's labels but the agent's own. A rule that
    saw its own output (``match.labels`` or ``{label.<key>}`` on a key the rules set) could
    match on one pass and not on the next, and the agent would rewrite the label on every
    pass, without end."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return others_of(labels, read_owned(metadata.get("annotations") or {}))


def others_of(labels: Mapping[str, str], owned: Mapping[str, str]) -> dict[str, str]:
    """`labels` without those the agent wrote and still carry its value (`mine_of`)."""
    mine = mine_of(labels, owned)
    return {k: v for k, v in labels.items() if k not in mine}


def plan_labels(
    labels: Mapping[str, str],
    owned: Mapping[str, str],
    wanted: Mapping[str, str],
    domains: Sequence[str] = (DEFAULT_LABEL_DOMAIN,),
) -> LabelPlan:
    """Set what is wanted and free; update or remove what is still ours; keep the rest.

    An owned key no longer wanted is removed only when the agent may still remove it (see
    ``is_removable_key``); one under a domain since dropped from ``domains`` is left on the
    Node and leaves the record: removing it would be refused by the admission policy, and
    the refusal would hold every other label change."""
    mine = mine_of(labels, owned)
    to_set: dict[str, str] = {}
    conflicts = []
    for key, value in wanted.items():
        if key in labels and key not in mine:
            if labels[key] != value:
                conflicts.append(Conflict(key, labels[key], value))
        elif labels.get(key) != value:
            to_set[key] = value
    remove = tuple(sorted(k for k in mine if k not in wanted and is_removable_key(k, domains)))
    new_owned = {k: v for k, v in mine.items() if k in wanted} | to_set
    return LabelPlan(to_set, remove, dict(sorted(new_owned.items())), tuple(conflicts))


def owned_annotation(plan: LabelPlan) -> str:
    return json.dumps(dict(plan.owned), separators=(",", ":"), sort_keys=True)


def plan_label_patch(node: Obj, plan: LabelPlan) -> Patch | None:
    """The metadata JSON Patch for ``plan``: labels set and removed and the ownership record,
    guarded by the resourceVersion (a concurrent label change makes it fail, and the caller
    re-reads and re-plans); None when nothing changes."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations")
    record = owned_annotation(plan)
    stored = (annotations or {}).get(OWNED_LABELS_ANNOTATION, "{}")  # absent: owns nothing
    if not plan.changes and stored == record:
        return None
    ops = [test_rv(node)]
    if metadata.get("labels") is None and plan.set:
        ops.append({"op": "add", "path": "/metadata/labels", "value": dict(plan.set)})
    else:
        for key, value in plan.set.items():
            ops.append({"op": "add", "path": pointer("metadata", "labels", key), "value": value})
    ops += [{"op": "remove", "path": pointer("metadata", "labels", k)} for k in plan.remove]
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {OWNED_LABELS_ANNOTATION: record}})  # fmt: skip
    else:
        path = pointer("metadata", "annotations", OWNED_LABELS_ANNOTATION)
        ops.append({"op": "add", "path": path, "value": record})
    return Patch(None, tuple(ops))


def address_ips(entries: Sequence[NodeAddress]) -> list[IPAddress]:
    """The IP addresses among ``status.addresses`` entries (hostname entries are skipped)."""
    ips = []
    for entry in entries:
        try:
            ips.append(ipaddress.ip_address(entry.address))
        except ValueError:
            continue
    return ips


def plan_node_labels(
    node: Obj,
    addresses: Sequence[IPAddress],
    rules: Rules,
    facts: Mapping[str, str],
    *,
    beta: bool,
    domains: Sequence[str] = (DEFAULT_LABEL_DOMAIN,),
) -> LabelPlan:
    """The label plan for ``node``: the rules evaluated against its name, the addresses the
    agent is about to write and the labels it did not write (``input_labels``), then
    ``plan_labels`` against the record."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owned = read_owned(metadata.get("annotations") or {})
    view = NodeView(str(metadata.get("name", "")), tuple(addresses), others_of(labels, owned))
    wanted = {k: d.value for k, d in desired_labels(rules, facts, view).items()}
    wanted = with_beta_twins(wanted, view.labels) if beta else wanted
    return plan_labels(labels, owned, wanted, domains)


def with_labels(main: Patch | None, labels: Patch | None) -> Patch | None:
    """One main-resource write: the labels and their record first (RV-guarded), then the
    provider ID and the taint removal, so the labels are on the Node when the taint goes."""
    if labels is None or main is None:
        return labels or main
    rest = tuple(op for op in main.operations if op["path"] != "/metadata/resourceVersion")
    return Patch(None, labels.operations + rest)


def label_conflicts(
    conflicts: Iterable[Conflict], reported: frozenset[Conflict]
) -> tuple[list[EventSpec], frozenset[Conflict]]:
    """One Warning per conflicting key and value, the first time it is seen; the conflicts
    still present are what is remembered (one that goes and comes back is reported again)."""
    current = frozenset(conflicts)
    events = [
        EventSpec("Warning", METADATA_LABEL_CONFLICT, f"label {c.key}={c.theirs} was not set by "
                  f"local-ccm; the metadata rules want {c.ours!r}, left unchanged")
        for c in sorted(current - reported, key=lambda c: (c.key, c.ours))
    ]  # fmt: skip
    return events, current
