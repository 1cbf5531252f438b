"""``core.decide`` as a table: a Node, a detection and a memory -> the one write, the Events and
the memory. Then the feedback the loop relies on: the Node a write returns, fed back, leads to
the next write (addresses, then the taint) and finally to none."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from local_ccm import names
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.config import AgentConfig, TypeSettings
from local_ccm.agent.core.decide import (
    Decision,
    Memory,
    NodeMemory,
    Now,
    Refusal,
    Sent,
    Setup,
    Write,
    decide,
)
from local_ccm.agent.core.fight import FightState
from local_ccm.agent.core.labels import LabelSetup
from local_ccm.agent.core.metadata import parse_rules
from local_ccm.agent.core.timing import MAX_CONFLICTS
from tests.fakes.nodes import apply_json_patch
from tests.unit.agent.builders import EXT4, INT4, UNINITIALIZED, addrs, found, no_route, node

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
ESCAPED_LABELS = names.OWNED_LABELS_ANNOTATION.replace("/", "~1")
CONFIG = AgentConfig(
    internal=TypeSettings(targets=(found("192.0.2.1").address,)),
    external=TypeSettings(targets=(found("203.0.113.1").address,)),
)
SETUP = Setup(CONFIG, settle_time=1.0)
NOW = Now(1000.0, datetime(2026, 1, 1, tzinfo=UTC), draw=0.5)
BOTH: dict[DetectorKey, Detection] = {INT4: found("192.0.2.10"), EXT4: found("198.51.100.10")}
OWNED = "InternalIP=192.0.2.10,ExternalIP=198.51.100.10"
SYNCED = "Int 192.0.2.10, Ext 198.51.100.10"
TRUE = {"type": names.ADDRESSES_SYNCED_CONDITION, "status": "True", "reason": "AddressesSynced",
        "message": "every enabled detector found an address"}  # fmt: skip
KUBELET_FIELDS = [{"manager": "kubelet", "time": "2026-01-01T00:00:00Z",
                   "fieldsV1": {"f:status": {"f:addresses": {}}}}]  # fmt: skip


def initialised(**changes: Any) -> Obj:
    """A Node the agent already initialised: its addresses, record and condition."""
    return node(SYNCED, owned=OWNED, conditions=[TRUE], **changes)


def seen(uid: str = "u-1", **changes: Any) -> Memory:
    """The memory of a pass that already saw this Node and ``BOTH``."""
    return replace(Memory(detected=BOTH, node=NodeMemory(uid=uid)), **changes)


def rules(zone: str) -> LabelSetup:
    parsed = parse_rules({"rules": [{"name": "all", "zone": zone}]})
    assert not isinstance(parsed, list)
    return LabelSetup(parsed, {}, beta=False)


def answered(refusal: Refusal | None) -> Sent:
    """The status write of a tainted Node without addresses, answered."""
    first = decide(node("", taints=[UNINITIALIZED]), dict(BOTH), Memory(), SETUP, NOW)
    assert first.write is not None
    return Sent(first.write, answered=True, refusal=refusal)


def ops(write: Write | None) -> list[str]:
    """``"op path"`` of each operation but the tests."""
    if write is None:
        return []
    return [f"{o['op']} {o['path']}" for o in write.patch.operations if o["op"] != "test"]


STATUS_KEY = answered(None).write.key  # the first pass's status write


def kubelet_reverted() -> Obj:
    """The kubelet (no --cloud-provider=external) wrote its own list over ours."""
    reverted = node("Hostname n1", owned=OWNED, conditions=[TRUE], rv="130")
    reverted["metadata"]["managedFields"] = KUBELET_FIELDS
    return reverted


def with_foreign_zone() -> Obj:
    foreign = initialised()
    foreign["metadata"]["labels"] = {ZONE: "theirs"}
    return foreign


def reasons(decision: Decision) -> list[str]:
    return [e.reason for e in (*decision.events, *decision.reported)]


@dataclass(frozen=True)
class Case:
    name: str
    node: Obj | None
    detected: Mapping[DetectorKey, Detection] = field(default_factory=lambda: BOTH)
    memory: Memory = field(default_factory=Memory)
    setup: Setup = SETUP
    write: list[str] = field(default_factory=list)  # "op path" of the write; [] = none
    events: list[str] = field(default_factory=list)  # every reason, in order
    outcome: str | None = None
    then: Callable[[Decision], bool] = lambda _: True  # anything else about the decision


CASES = [
    Case(
        "first pass: the addresses, the record and the condition, and not the taint",
        node("", taints=[UNINITIALIZED]),
        write=["add /status/addresses", "add /metadata/annotations", "add /status/conditions"],
        then=lambda d: d.memory.sent is not None and not d.memory.sent.answered,
    ),
    Case(
        "the Node shows the addresses: the taint goes",
        node(SYNCED, owned=OWNED, conditions=[TRUE], taints=[UNINITIALIZED]),
        memory=seen(),
        write=["remove /spec/taints/0"],
        then=lambda d: d.write is not None and d.write.taint,
    ),
    Case(
        "a Node without the taint that matches: nothing to write",
        initialised(),
        memory=seen(),
        outcome="noop",
        then=lambda d: d.gauges.synced_at == NOW.wall.timestamp(),
    ),
    Case(
        "remove-taint off: a tainted Node gets its addresses and keeps its taint",
        node(SYNCED, owned=OWNED, conditions=[TRUE], taints=[UNINITIALIZED]),
        memory=seen(),
        setup=replace(SETUP, agent=replace(CONFIG, remove_taint=False)),
        outcome="noop",
    ),
    Case(
        "a failed detector keeps the last good address and reports the failure",
        initialised(),
        detected={INT4: found("192.0.2.10"), EXT4: no_route()},
        memory=seen(),
        write=["replace /status/conditions/0"],
        events=["AddressDetectionFailed"],
        then=lambda d: (
            d.gauges.kept == (("ExternalIP", 4, "198.51.100.10"),)
            and d.write is not None
            and d.write.addresses is None
        ),
    ),
    Case(
        "a detector that recovers is reported once",
        initialised(),
        memory=seen(detected={INT4: found("192.0.2.10"), EXT4: no_route()}),
        events=["AddressDetectionRecovered"],
        outcome="noop",
    ),
    Case(
        "a conflict: the fresh Node is decided again with its own resourceVersion",
        node("", taints=[UNINITIALIZED], rv="107"),
        memory=seen(sent=answered(Refusal("conflict", "the object has been modified"))),
        write=["add /status/addresses", "add /metadata/annotations", "add /status/conditions"],
        then=lambda d: (
            d.write is not None
            and d.write.patch.operations[0]["value"] == "107"
            and d.memory.conflicts == 1
        ),
    ),
    Case(
        f"{MAX_CONFLICTS} conflicts in a row back off",
        node("", taints=[UNINITIALIZED], rv="107"),
        memory=seen(sent=answered(Refusal("conflict", "modified")), conflicts=MAX_CONFLICTS - 1),
        outcome="failed",
        then=lambda d: (
            d.retry_in is not None
            and d.memory.failures == 1
            and d.memory.retry_at == NOW.monotonic + d.retry_in
        ),
    ),
    Case(
        "an invalid write is not sent again until its inputs change",
        node("", taints=[UNINITIALIZED]),
        memory=seen(sent=answered(Refusal("invalid", "Node is invalid"))),
        events=["NodeUpdateRejected"],
        outcome="failed",
        then=lambda d: d.memory.node.rejected == STATUS_KEY and d.memory.failures == 0,
    ),
    Case(
        "...and the next pass sends nothing while they stay the same",
        node("", taints=[UNINITIALIZED]),
        memory=seen(node=NodeMemory(uid="u-1", rejected=STATUS_KEY)),
        outcome="noop",
        then=lambda d: d.gauges.blocked is not None,
    ),
    Case(
        "a forbidden write backs off and is reported",
        node("", taints=[UNINITIALIZED]),
        memory=seen(sent=answered(Refusal("forbidden", "no", retry_after=7.0))),
        events=["NodeUpdateRejected"],
        outcome="failed",
        then=lambda d: d.memory.forbidden == "no" and d.retry_in == 7.0,
    ),
    Case(
        "backing off: no write before the retry time",
        node("", taints=[UNINITIALIZED]),
        memory=seen(retry_at=NOW.monotonic + 5, failures=1),
        outcome="deferred",
    ),
    Case(
        "another writer undoes the addresses a third time: writes pause, the condition says why",
        kubelet_reverted(),
        memory=seen(
            node=NodeMemory(
                uid="u-1",
                fight=FightState(
                    written=addrs(SYNCED),
                    written_rv="120",
                    written_at=990.0,
                    reverts=(900.0, 950.0),
                ),
            )
        ),
        write=["replace /status/conditions/0"],
        events=["KubeletAddressConflict"],
        then=lambda d: (
            d.memory.node.fight.conflict
            and d.gauges.conflict == 1
            and d.memory.node.conflict_manager == "kubelet"
            and "KubeletOwnsAddresses" in str(d.write and d.write.patch.body())
        ),
    ),
    Case(
        "a provider ID set to another value is left alone and reported",
        initialised(provider_id="other://n1"),
        memory=seen(),
        setup=replace(SETUP, provider_id="local://{node_name}"),
        events=["ProviderIDMismatch"],
        outcome="noop",
    ),
    Case(
        "an empty provider ID is set with the taint removal",
        node(SYNCED, owned=OWNED, conditions=[TRUE], taints=[UNINITIALIZED]),
        memory=seen(),
        setup=replace(SETUP, provider_id="local://{node_name}"),
        write=["add /spec/providerID", "remove /spec/taints/0"],
    ),
    Case(
        "metadata labels: set on an initialised Node, with their record",
        initialised(),
        memory=seen(),
        setup=replace(SETUP, labels=rules("z1")),
        write=["add /metadata/labels", f"add /metadata/annotations/{ESCAPED_LABELS}"],
    ),
    Case(
        "metadata labels: a foreign label is reported, never overwritten",
        with_foreign_zone(),
        memory=seen(),
        setup=replace(SETUP, labels=rules("z1")),
        events=["MetadataLabelConflict"],
        outcome="noop",
    ),
    Case(
        "metadata labels refused by the API: paused while the rules stay the same",
        initialised(),
        memory=seen(node=NodeMemory(uid="u-1", labels_refused=rules("z1"))),
        setup=replace(SETUP, labels=rules("z1")),
        outcome="noop",
    ),
    Case(
        "a vanished Node: nothing to write, its memory starts over",
        None,
        memory=seen(node=NodeMemory(uid="u-1", rejected=STATUS_KEY)),
        outcome="noop",
        then=lambda d: d.memory.node == NodeMemory() and d.gauges.conflict == 0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(case.node, dict(case.detected), case.memory, case.setup, NOW)
    assert ops(decision.write) == case.write
    assert reasons(decision) == case.events
    assert decision.outcome == (None if case.write else case.outcome)
    assert case.then(decision)


# ------------------------------------------------------------------ feeding the Node back
def written(current: Obj, write: Write) -> Obj:
    """The Node the API returns for ``write``: the patch applied, a newer resourceVersion."""
    new = apply_json_patch(current, write.patch.body())
    new["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
    return new


def run_pass(
    current: Obj, memory: Memory, setup: Setup = SETUP
) -> tuple[Obj, Memory, list[Decision]]:
    """What the loop does: decide, apply the write, feed the Node back, until no write."""
    decisions = []
    for _ in range(10):
        decision = decide(current, dict(BOTH), memory, setup, NOW)
        decisions.append(decision)
        memory = decision.memory
        if decision.write is None:
            return current, memory, decisions
        current, memory = written(current, decision.write), memory.answered(None)
    raise AssertionError("no end")


def test_addresses_first_then_the_taint_then_nothing() -> None:
    final, memory, decisions = run_pass(node("", taints=[UNINITIALIZED]), Memory())
    writes = [d.write for d in decisions if d.write is not None]
    assert [w.patch.subresource for w in writes] == ["status", None]
    assert ops(writes[1]) == ["remove /spec/taints/0"]
    assert [r for d in decisions for r in reasons(d)] == ["AddressesUpdated", "NodeInitialized"]
    assert decisions[-1].outcome == "written"
    assert not final["spec"].get("taints")
    assert (memory.wrote, memory.sent, memory.failures) == (False, None, 0)
    assert memory.node.fight.written == addrs(SYNCED)
    again = decide(final, dict(BOTH), memory, SETUP, NOW)
    assert (again.write, again.outcome, reasons(again)) == (None, "noop", [])


def test_the_taint_is_decided_only_once_the_node_shows_the_addresses() -> None:
    """Gate 2 reads the Node: the same memory with a Node that lacks the addresses (a write
    that did not land) decides the addresses again, never the taint."""
    tainted = node("", taints=[UNINITIALIZED])
    first = decide(tainted, dict(BOTH), Memory(), SETUP, NOW)
    assert first.write is not None
    unchanged = decide(tainted, dict(BOTH), first.memory.answered(None), SETUP, NOW)
    assert unchanged.write is not None
    assert "remove /spec/taints/0" not in ops(unchanged.write)
    interrupted = decide(tainted, dict(BOTH), first.memory, SETUP, NOW)  # never answered
    assert interrupted.write is not None
    assert ops(interrupted.write) == ops(first.write)


def test_a_status_write_that_drops_the_annotation_moves_it_to_the_node_itself() -> None:
    tainted = node("", taints=[UNINITIALIZED])
    first = decide(tainted, dict(BOTH), Memory(), SETUP, NOW)
    assert first.write is not None
    dropped = [o for o in first.write.patch.body() if not o["path"].startswith("/metadata/")]
    stored = apply_json_patch(tainted, dropped)
    stored["metadata"]["resourceVersion"] = "101"
    second = decide(stored, dict(BOTH), first.memory.answered(None), SETUP, NOW)
    assert [level for level, _ in second.logs] == ["info", "error"]
    assert second.memory.annotation_on_main
    assert second.write is not None
    assert ops(second.write) == ["add /metadata/annotations"]


def test_a_label_write_that_is_refused_never_holds_the_taint() -> None:
    setup = replace(SETUP, labels=rules("z1"))
    current = node(SYNCED, owned=OWNED, conditions=[TRUE], taints=[UNINITIALIZED])
    first = decide(current, dict(BOTH), seen(), setup, NOW)
    assert first.write is not None
    assert first.write.labels is not None
    assert first.write.taint
    refused = first.memory.answered(Refusal("forbidden", "label not allowed"))
    second = decide(current, dict(BOTH), refused, setup, NOW)
    assert second.outcome == "failed"
    assert second.memory.node.labels_refused == rules("z1")
    later = replace(second.memory, retry_at=0.0)
    third = decide(current, dict(BOTH), later, setup, NOW)
    assert ops(third.write) == ["remove /spec/taints/0"]
    fresh = decide(current, dict(BOTH), later, replace(setup, labels=rules("z2")), NOW)
    assert "add /metadata/labels" in ops(fresh.write)  # new rules: the labels are tried again
    recreated = node(SYNCED, owned=OWNED, conditions=[TRUE], taints=[UNINITIALIZED])
    recreated["metadata"]["uid"] = "u-2"
    anew = decide(recreated, dict(BOTH), later, setup, NOW)
    assert "add /metadata/labels" in ops(anew.write)  # a new Node object: tried once again


def test_a_label_conflict_is_reported_again_on_a_recreated_node() -> None:
    """The Event belongs to the Node object: `kubectl describe` of a new one must show it."""
    setup = replace(SETUP, labels=rules("z1"))
    current = initialised()
    current["metadata"]["labels"] = {ZONE: "theirs"}
    first = decide(current, dict(BOTH), seen(), setup, NOW)
    assert [e.reason for e in first.events] == ["MetadataLabelConflict"]
    again = decide(current, dict(BOTH), first.memory, setup, NOW)
    assert again.events == ()
    recreated = initialised()
    recreated["metadata"] |= {"uid": "u-2", "labels": {ZONE: "theirs"}}
    anew = decide(recreated, dict(BOTH), first.memory, setup, NOW)
    assert [e.reason for e in anew.events] == ["MetadataLabelConflict"]
