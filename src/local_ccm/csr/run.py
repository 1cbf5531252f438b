"""The loop of kubelet-serving-approver: what the leader does.

Handlers only enqueue CSR names (a CSR change, or a change of the requester's Node) and keep
the index of which Nodes show which addresses and names (`core.claims`) current; one worker
reads the caches, decides (`core.decide`) and writes the `approval` subresource only for a CSR
that has no Approved or Denied condition yet. A conflict re-reads and decides again; a CSR
deleted meanwhile is done; other errors retry with capped backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from local_ccm.clock import Clock
from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.decide import Decision, decide
from local_ccm.csr.core.model import NODE_USER_PREFIX, Csr, Node, project_csr, project_node
from local_ccm.csr.csrapi import CsrApi, Obj, with_condition
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.csr.options import NAME, Settings
from local_ccm.csr.parse import parse_request
from local_ccm.kube.errors import ApiError, Conflict, NotFound
from local_ccm.kube.informer import Change, Informer, ListWatch
from local_ccm.runtime import events as ev
from local_ccm.runtime.outbox import EventOutbox
from local_ccm.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)
MAX_CONFLICTS = 5


def csr_subject(csr: Csr) -> ev.Subject:
    return ev.Subject("CertificateSigningRequest", csr.name, csr.uid, "certificates.k8s.io/v1")


def event_of(decision: Decision, *, deny: bool) -> ev.EventSpec:
    """The Event an operator sees on the CSR for a decision."""
    if decision.kind == "approve":
        return ev.EventSpec("Normal", "KubeletServingApproved", decision.message)
    if decision.kind == "deny" and deny:
        return ev.EventSpec("Warning", "KubeletServingDenied", decision.message)
    if decision.kind == "deny":
        return ev.EventSpec("Warning", "KubeletServingNotApproved",
                            f"left pending (--csr-deny=false): {decision.message}")  # fmt: skip
    return ev.EventSpec("Normal", "KubeletServingWaiting", decision.message)


class Controller:
    """The leader's state and work; `run()` until cancelled."""

    def __init__(
        self,
        api: CsrApi,
        nodes: ListWatch,
        settings: Settings = Settings(),  # noqa: B008 (frozen)
        *,
        metrics: CsrMetrics,
        clock: Clock,
        may_write: Callable[[], bool] = lambda: True,
        rng: random.Random | None = None,
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.may_write = may_write
        self.queue = WorkQueue(clock, settings.backoff, metrics.queue)
        self.noted: set[tuple[str, str]] = set()  # (uid, reason) of waits already counted
        self.outbox = EventOutbox(api, clock, ev.Reporter(NAME, settings.instance),
                                  namespace=settings.event_namespace, capacity=1000)  # fmt: skip
        rng = rng or random.Random()
        ended = metrics.watch_ended
        self.csrs: Informer[Obj] = Informer(api.list_watch(), dict, clock=clock, rng=rng,
                                            name="csrs", on_end=ended("csrs"))  # fmt: skip
        self.nodes: Informer[Node] = Informer(nodes, project_node, clock=clock, rng=rng,
                                              name="nodes", on_end=ended("nodes"))  # fmt: skip
        self._claims: Claims | None = None  # built from the Node cache when first needed
        self.csrs.add_handler(self._on_csr)
        self.nodes.add_handler(self._on_node)

    def ready(self) -> tuple[bool, str]:
        synced = self.csrs.has_synced() and self.nodes.has_synced()
        return (True, "ok") if synced else (False, "CSR and Node caches not synced")

    # ------------------------------------------------------------ handlers: enqueue only

    def _on_csr(self, change: Change[Obj]) -> None:
        if change.type in ("ADDED", "MODIFIED"):
            self.queue.add(change.key)
        elif change.type == "DELETED" and change.old is not None:
            uid = str((change.old.get("metadata") or {}).get("uid", ""))
            self.noted = {(u, reason) for u, reason in self.noted if u != uid}
            self.queue.done(change.key)

    def _on_node(self, change: Change[Node]) -> None:
        if self._claims is not None and change.type == "DELETED":
            self._claims.drop(change.key)
        if change.type not in ("ADDED", "MODIFIED") or change.new is None:
            return
        if self._claims is not None:
            self._claims.put(change.new)
        user = NODE_USER_PREFIX + change.key
        for key, obj in self.csrs.cache.items():
            if (obj.get("spec") or {}).get("username") == user:
                self.queue.add(key)

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        """Watch Nodes and CSRs, then decide queued CSRs until cancelled."""
        tasks = [asyncio.create_task(t) for t in (self.nodes.run(), self.outbox.run())]
        try:
            await self.nodes.wait_synced()  # a CSR is decided against a full Node cache
            tasks.append(asyncio.create_task(self.csrs.run()))
            await self.csrs.wait_synced()
            while True:
                await self.queue.process(self.sync)
        finally:
            await self.queue.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def sync(self, name: str) -> None:
        """Decide one CSR and write the decision; errors other than 404/409 retry later."""
        obj = self.csrs.cache.get(name)
        try:
            for _ in range(MAX_CONFLICTS):
                if obj is None or await self._decide_and_write(obj):
                    self.queue.done(name)
                    return
                obj = await self.api.get_csr(name)  # a conflict: re-read, decide again
            log.warning("csr=%s: %d write conflicts in a row, retrying", name, MAX_CONFLICTS)
        except NotFound:
            self.queue.done(name)
            return  # deleted meanwhile: nothing to decide
        except ApiError as exc:
            self.metrics.write_failures.labels(str(exc.status)).inc()
            log.warning("csr=%s: approval write failed, retrying: %s", name, exc)
        self.queue.retry(name)

    async def _decide_and_write(self, obj: Obj) -> bool:
        """True when done with this version of the CSR; False after a write conflict."""
        csr = project_csr(obj)
        node = self.nodes.cache.get(csr.node_name) if csr.node_name else None
        decision = decide(csr, parse_request(csr.request), node, self.settings.policy,
                          self.claims())  # fmt: skip
        if decision.kind == "skip":
            return True
        if decision.kind == "wait" or (decision.kind == "deny" and not self.settings.deny):
            self._note_pending(csr, decision)
            return True
        if not self.may_write():
            self.queue.retry(csr.name)
            return True
        try:
            await self.api.update_approval(with_condition(obj, decision, self._now()))
        except Conflict:
            return False
        self._record(csr, decision)
        return True

    def claims(self) -> Claims:
        """Which Nodes show which addresses and names: built from the Node cache once (a
        primed cache tells no handler), then kept current by the Node handler."""
        if self._claims is None:
            self._claims = Claims(self.nodes.cache.values())
        return self._claims

    def _now(self) -> str:
        return ev.rfc3339(self.clock.now())

    def _note_pending(self, csr: Csr, decision: Decision) -> None:
        """Once per CSR and reason: a log line, the metric and an Event."""
        if (csr.uid, decision.reason) in self.noted:
            return
        self.noted.add((csr.uid, decision.reason))
        self.metrics.decisions.labels("wait", decision.reason).inc()
        log.info("csr=%s node=%s: left pending: %s", csr.name, csr.node_name, decision.message)
        self.outbox.emit(event_of(decision, deny=self.settings.deny), csr_subject(csr))

    def _record(self, csr: Csr, decision: Decision) -> None:
        self.metrics.decisions.labels(decision.kind, decision.reason).inc()
        verb = "approved" if decision.kind == "approve" else "denied"
        log.info("csr=%s node=%s: %s: %s", csr.name, csr.node_name, verb, decision.message)
        self.outbox.emit(event_of(decision, deny=True), csr_subject(csr))
