"""What the deletion pipeline decides: the circuit breaker, probe freshness, the rate limit,
the self-check peers, and the walk over the eligible Nodes.

Pure, no I/O, no clock: `now` is monotonic seconds and `wall` the wall time (for the NodeBMCs'
`lastContact`), always passed in. `plan_deletions` returns what to do as data
(`lifecycle.core.state`); the loop performs it and reports back.

With NodeBMCs (`--bmc-power-state`, docs/bmc.md), for a Node that has one:

- its System absent (fresh) is the verdict "gone", in place of the probes and the self-check
  (a 404 from the BMC is an answer, which a partitioned controller cannot get); every other
  step stays. A Ready Node is never deleted for it: a Warning Event instead.
- with `--out-of-service-taint`, an unreachable Node is deleted (tainted first) only once the
  BMC reads its System Off; while it does not, the Node waits. With `--bmc-fencing`, a Node
  the BMC still reads On is powered off first: a `FenceAction`, rate-limited like a deletion.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core.bmc import BmcReading, BmcView, fence_status, read_bmc
from local_ccm.lifecycle.core.health import Assessment, Health, Scope
from local_ccm.lifecycle.core.model import IPAddress, NodeView, summarize
from local_ccm.lifecycle.core.state import (
    Attempt,
    Breaker,
    Decision,
    DeleteAction,
    EventAction,
    FenceAction,
    PipelineSettings,
    PipelineState,
    Plan,
    ProbeRecord,
    ProbeRequest,
    SelfCheck,
    SkipReason,
    Step,
    VerdictSource,
)
from local_ccm.runtime.events import rfc3339
from local_ccm.validate import CountOrPercent


# ------------------------------------------------------------------ gates
def breaker_threshold(limit: CountOrPercent, population: int) -> int:
    """The breaker's threshold T: K, or max(1, ⌊P × N / 100⌋), except that 0% gives 0."""
    if not limit.percent:
        return limit.value
    if limit.value == 0:
        return 0
    return max(1, limit.value * population // 100)


def breaker(
    limit: CountOrPercent,
    population: int,
    unhealthy: int,
    cluster: tuple[int, int, int] | None = None,
) -> Breaker:
    """Open while the population's unhealthy count is above the threshold. `cluster` (every
    Node, NotReady ones, unhealthy ones) opens it too: its unhealthy count above the same limit
    of all Nodes (a shared fault outside the population: other Node pools, the control plane),
    or every Node NotReady, as kube-controller-manager stops evicting when every zone is fully
    disrupted (a one-Node population could never open it on its own counts) — unless the limit
    allows every Node to be unhealthy (100 %, or a count of at least every Node): the
    operator's way to turn the breaker off."""
    threshold = breaker_threshold(limit, population)
    why = ""
    if cluster is not None and unhealthy <= threshold:  # else its own counts say why
        total, not_ready, sick = cluster
        over = breaker_threshold(limit, total)
        allows_all = limit.value >= (100 if limit.percent else total)
        if total and not_ready == total and not allows_all:
            why = f"every Node NotReady ({total})"
        elif sick > over:
            why = f"cluster U={sick} T={over} N={total}"
    return Breaker(unhealthy > threshold or bool(why), unhealthy, threshold, population, why)


def is_fresh(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """A verdict is valid for one interval after it completed."""
    return record is not None and record.finished is not None and now - record.finished < interval


def may_start_probe(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """At most one probe per interval (start to start), never two at once."""
    return record is None or (not record.running and now - record.started >= interval)


def rate_tokens(starts: Iterable[float], now: float, interval: float, limit: int) -> int:
    """Deletions that may still start in the sliding window (now − interval, now]."""
    return max(0, limit - sum(1 for t in starts if now - t < interval))


def self_check_peers(
    nodes: Iterable[NodeView], scope: Scope, settings: PipelineSettings, rng: random.Random
) -> tuple[NodeView, ...]:
    """Up to `self_check_sample` random Ready peers, not the own node, not terminating, with a
    probeable address; control-plane Nodes may be peers."""
    peers = sorted(
        (
            n
            for n in nodes
            if n.ready == "True"
            and n.deletion_timestamp is None
            and n.name != scope.own_node
            and settings.addresses(n)
        ),
        key=lambda n: n.name,
    )
    return tuple(rng.sample(peers, min(settings.self_check_sample, len(peers))))


# ------------------------------------------------------------------ the walk
def plan_deletions(
    assessment: Assessment,
    *,
    nodes: Sequence[NodeView],
    scope: Scope,
    state: PipelineState,
    settings: PipelineSettings,
    now: float,
    rng: random.Random,
    bmcs: Mapping[str, BmcView] | None = None,
    wall: datetime | None = None,
) -> Plan:
    """Breaker, verdict, self-check and rate limit for every eligible Node, oldest `t0` first.
    `nodes` is the whole cache (self-check peers may be outside the scope); `bmcs` the
    NodeBMCs by name (None: they are not read), judged fresh or not at `wall`."""
    readings = {
        name: read_bmc(view, wall, settings.bmc_max_age)
        for name, view in (bmcs or {}).items()
        if wall is not None
    }
    walk = _Walk(assessment, nodes, scope, state, settings, now=now, rng=rng,
                 bmcs=bmcs or {}, readings=readings)  # fmt: skip
    for health in assessment.eligible:
        walk.step(health)
    walk.warn_absent_but_ready(assessment.managed_nodes)
    return walk.plan()


class _Walk:
    """Mutable scratch state of one `plan_deletions` call; never escapes it."""

    def __init__(self, assessment: Assessment, nodes: Sequence[NodeView], scope: Scope,
                 state: PipelineState, settings: PipelineSettings, *, now: float,
                 rng: random.Random, bmcs: Mapping[str, BmcView],
                 readings: Mapping[str, BmcReading]) -> None:  # fmt: skip
        self.nodes, self.scope, self.settings, self.now, self.rng = nodes, scope, settings, now, rng
        self.bmcs, self.readings = bmcs, readings
        self.breaker = breaker(settings.max_unhealthy, assessment.population, assessment.unhealthy,
                               assessment.cluster)  # fmt: skip
        closed_at = now if state.breaker_open and not self.breaker.open else state.breaker_closed_at
        eligible = {h.node.uid for h in assessment.eligible}
        # A verdict counts only if its probe started after the Node became eligible:
        # records of Nodes that stopped being eligible are dropped, late results ignored.
        self.state = replace(
            state,
            probes={uid: r for uid, r in state.probes.items() if uid in eligible},
            starts=tuple(s for s in state.starts if now - s[0] < settings.interval),
            breaker_open=self.breaker.open,
            breaker_closed_at=closed_at,
        )
        self.announced, self.skipped = set(state.announced), set(state.skipped)
        self.probes = dict(self.state.probes)
        self.decisions: list[Decision] = []
        self.requests: list[ProbeRequest] = []
        self.peer_requests: list[ProbeRequest] = []
        self.events: list[EventAction] = []
        self.skips: list[tuple[str, SkipReason]] = []
        self.deletions: list[DeleteAction] = []
        self.fences: list[FenceAction] = []
        self.absent_ready = frozenset[str]()

    def plan(self) -> Plan:
        started = [d.uid for d in self.deletions] + [f.uid for f in self.fences]
        starts = self.state.starts + tuple((self.now, uid) for uid in started)
        attempts: dict[str, Attempt] = dict(self.state.attempts)
        attempts.update((d.uid, "running") for d in self.deletions)
        attempts.update((f.uid, "fencing") for f in self.fences)
        state = replace(
            self.state,
            probes=self.probes,
            starts=starts,
            attempts=attempts,
            self_check_pending=self.state.self_check_pending or bool(self.peer_requests),
            announced=frozenset(self.announced),
            skipped=frozenset(self.skipped),
            absent_ready=self.absent_ready,
        )
        return Plan(
            state, self.breaker, tuple(self.decisions), tuple(self.requests),
            tuple(self.peer_requests), tuple(self.events), tuple(self.skips),
            tuple(self.deletions), tuple(self.fences),
        )  # fmt: skip

    def step(self, health: Health) -> None:
        attempt = self.state.attempts.get(health.node.uid)
        reading = self.readings.get(health.node.name)
        if attempt is not None:
            self.decide(health, "dry_run_done" if attempt == "dry_run_done" else "in_progress")
        elif self.breaker.open:  # checked before probing
            self.skip(health, "breaker_open", ev.BLOCKED_BY_CIRCUIT_BREAKER, str(self.breaker))
        elif reading is not None and reading.state == "absent":
            self.gate(health, "bmc", reading)
        elif self.verdict(health) and self.self_check_passed(health):
            self.unreachable(health, reading)

    def unreachable(self, health: Health, reading: BmcReading | None) -> None:
        """A fresh `unreachable` (or unprobed mode): without a NodeBMC or the out-of-service
        step, delete as before; with both, only once the BMC reads Off (fenced if asked)."""
        source: VerdictSource = "unprobed" if self.settings.unprobed else "probe"
        if reading is None or not self.settings.out_of_service_taint or reading.state == "off":
            self.gate(health, source, reading)
        elif reading.state == "on" and self.settings.bmc_fencing:
            self.fence(health, reading)
        else:
            message = f"waiting for the BMC to confirm Off before the out-of-service taint: " \
                      f"{reading.detail}"  # fmt: skip
            self.announce(health, ev.WAITING_FOR_BMC_OFF, message)
            self.decide(health, "bmc_wait")

    def fence(self, health: Health, reading: BmcReading) -> None:
        """The BMC still reads On: request a power-off, unless this episode's request stands."""
        node, t0 = health.node, health.t0
        assert t0 is not None  # eligible Nodes always have one
        status = fence_status(self.bmcs[node.name], node.uid, t0)
        if self.settings.dry_run:
            self.announce(health, ev.FENCE_DRY_RUN, f"[DRY-RUN] Would power off node "
                          f"{node.name} uid={node.uid} (ForceOff): {reading.detail}")  # fmt: skip
            self.decide(health, "fence_dry_run")
        elif status == "failed":
            record = self.bmcs[node.name].record
            detail = record.message if record is not None else ""
            self.announce(health, ev.FENCE_FAILED, f"the power-off was not confirmed: {detail}")
            self.decide(health, "fence_failed")
        elif status != "none":
            # Requested or sent (node-bmc executes it), or confirmed and the System On again
            # (someone powered it on): one power-off per episode, never a second.
            message = f"power-off {status}; waiting for the BMC to confirm Off: {reading.detail}"
            self.announce(health, ev.WAITING_FOR_BMC_OFF, message)
            self.decide(health, "fencing")
        elif node.name == self.scope.own_node:  # never eligible (excluded): never fenced
            self.decide(health, "bmc_wait")
        elif self.take_token(health):
            self.decide(health, "fence")
            self.fences.append(FenceAction(node.uid, node.name, t0, health.age,
                                           self.summary(health), reading.detail))  # fmt: skip

    def take_token(self, health: Health) -> bool:
        """The breaker's hold and the rate limit, shared by deletions and power-offs."""
        closed_at = self.state.breaker_closed_at
        if closed_at is not None and self.now - closed_at < self.settings.interval:
            self.decide(health, "breaker_hold")  # deletions resume one interval after it closed
            return False
        tokens = rate_tokens((s[0] for s in self.state.starts), self.now, self.settings.interval,
                             self.settings.max_deletions) - len(self.deletions) - len(
            self.fences)  # fmt: skip
        if tokens <= 0:
            message = f"at most {self.settings.max_deletions} deletion(s) per interval"
            self.skip(health, "rate_limited", ev.RATE_LIMITED, message)
            return False
        return True

    def gate(self, health: Health, source: VerdictSource, reading: BmcReading | None) -> None:
        if self.take_token(health):
            self.decide(health, "delete")
            self.deletions.append(self.delete_action(health, source, reading))

    def summary(self, health: Health) -> str:
        record = self.probes.get(health.node.uid)
        return (
            "unprobed mode"
            if self.settings.unprobed
            else summarize(record.outcomes if record else ())
        )

    def delete_action(
        self, health: Health, source: VerdictSource, reading: BmcReading | None
    ) -> DeleteAction:
        summary = self.summary(health) if source != "bmc" or reading is None else reading.detail
        assert health.t0 is not None  # eligible Nodes always have one
        return DeleteAction(
            health.node.uid, health.node.name, health.t0, health.age, summary,
            self.settings.dry_run, self.settings.out_of_service_taint, source,
            bmc=reading is not None,
        )  # fmt: skip

    def warn_absent_but_ready(self, managed: Sequence[Health]) -> None:
        """A Ready Node whose BMC reports the System absent is never deleted for it: one
        Warning while that lasts (a NodeBMC naming the wrong System, or a BMC that is wrong)."""
        found = []
        for health in managed:
            reading = self.readings.get(health.node.name)
            if health.status != "ready" or reading is None or reading.state != "absent":
                continue
            found.append(health.node.uid)
            if health.node.uid not in self.state.absent_ready:
                message = f"not deleted: the Node is Ready although {reading.detail}"
                self.events.append(EventAction(health.node.uid, health.node.name,
                                               ev.BMC_ABSENT_NODE_READY, message))  # fmt: skip
        self.absent_ready = frozenset(found)

    def verdict(self, health: Health) -> bool:
        """True when the verdict is a fresh `unreachable`."""
        if self.settings.unprobed:
            return True  # unprobed mode: taken as unreachable without sending anything
        node = health.node
        addresses = self.settings.addresses(node)
        if not addresses:
            message = _no_address_message(node, self.settings)
            self.skip(health, "unknown", ev.NO_PROBE_ADDRESS, message, "no_address")
            return False
        record = self.probes.get(node.uid)
        if may_start_probe(record, self.now, self.settings.interval):
            self.start_probe(health, addresses, record)
        if record is None or not is_fresh(record, self.now, self.settings.interval):
            self.decide(health, "probing")
            return False
        return self.judge(health, record)

    def judge(self, health: Health, record: ProbeRecord) -> bool:
        """A fresh verdict: `reachable` and `unknown` stop the Node with their Event."""
        verdict = record.verdict
        if verdict == "reachable":
            replied = [o for o in record.outcomes if o.outcome == "reply"]
            self.skip(health, "reachable", ev.NODE_REACHABLE, summarize(replied[:1]))
        elif verdict == "unknown":
            self.skip(health, "unknown", ev.PROBE_FAILED, summarize(record.outcomes))
        return verdict == "unreachable"

    def start_probe(
        self, health: Health, addresses: tuple[IPAddress, ...], record: ProbeRecord | None
    ) -> None:
        node, kinds = health.node, self.settings.kinds
        self.requests.append(ProbeRequest(node.uid, node.name, addresses, kinds))
        # The previous verdict stays readable until this probe completes.
        fresh = ProbeRecord(self.now)
        self.probes[node.uid] = replace(record, started=self.now, running=True) if record else fresh
        message = (
            f"NotReady since {rfc3339(health.t0 or datetime.min)} ({health.age:.0f}s); "
            f"probing {', '.join(map(str, addresses))} with {', '.join(map(str, kinds))}"
        )
        self.announce(health, ev.CHECKING_REACHABILITY, message)

    def self_check_passed(self, health: Health) -> bool:
        """A fresh passed or skipped self-check; otherwise request one or block."""
        if not self.settings.self_check or self.settings.unprobed:
            return True
        check = self.state.self_check
        if check is not None and self.now - check.at < self.settings.interval:
            if check.result != "failed":
                return True
            message = f"no reachable peer among {', '.join(check.peers)}"
            self.skip(health, "self_check_failed", ev.BLOCKED_BY_SELF_CHECK, message)
            return False
        requested = self.state.self_check_pending or self.peer_requests
        if not requested and not self.request_self_check():
            return True
        self.decide(health, "self_check_pending")
        return False

    def request_self_check(self) -> bool:
        """Choose peers and ask for their probes; False when there is no peer (skipped)."""
        peers = self_check_peers(self.nodes, self.scope, self.settings, self.rng)
        if not peers:
            self.state = replace(self.state, self_check=SelfCheck(self.now, "skipped"))
            return False
        self.peer_requests.extend(
            ProbeRequest(p.uid, p.name, self.settings.addresses(p), self.settings.kinds)
            for p in peers
        )
        return True

    def decide(self, health: Health, step: Step) -> None:
        self.decisions.append(Decision(health.node.uid, health.node.name, step))

    def skip(
        self, health: Health, reason: SkipReason, event: str, message: str, step: Step | None = None
    ) -> None:
        """Count the skip once per episode, announce it and stop the walk at `step`."""
        if (health.node.uid, reason) not in self.skipped:
            self.skipped.add((health.node.uid, reason))
            self.skips.append((health.node.uid, reason))
        self.announce(health, event, message)
        self.decide(health, step or reason)

    def announce(self, health: Health, reason: str, message: str) -> None:
        """At most one Event per (uid, reason) per episode."""
        key = (health.node.uid, reason)
        if key not in self.announced:
            self.announced.add(key)
            self.events.append(EventAction(health.node.uid, health.node.name, reason, message))


def _no_address_message(node: NodeView, settings: PipelineSettings) -> str:
    listed = ", ".join(f"{a.type}={a.address}" for a in node.addresses) or "none"
    return f"no probeable address in families {', '.join(settings.families)} (addresses: {listed})"
