"""kubelet-serving-approver as a controller of the kit (`runtime.controller`): what the leader
decides, one CSR at a time; `runtime.worker.Worker` runs it.

Watches map a CSR change, or a change of the requester's Node, to CSR names, and keep the
index of which Nodes show which addresses and names (`core.claims`) current; a sync reads the
caches, decides (`core.decide`) and writes the `approval` subresource only for a CSR that has
no Approved or Denied condition yet. A conflict goes to the worker, which syncs the CSR again at
once (its conflict policy), and that sync decides on a fresh read, not on the cached copy the
write was refused for; a CSR deleted meanwhile is done; other errors go to the worker's policy
(retried with capped backoff).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from local_ccm.clock import Clock
from local_ccm.csr.api import CSRS, CsrApi, Obj, with_condition
from local_ccm.csr.core.claims import Claims
from local_ccm.csr.core.decide import Decision, decide
from local_ccm.csr.core.model import NODE_USER_PREFIX, Csr, Node, project_csr, project_node
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.csr.options import NAME, Settings
from local_ccm.csr.parse import parse_request
from local_ccm.kube.errors import ApiError, Conflict, NotFound
from local_ccm.kube.informer import Change, Informer, ListWatch
from local_ccm.runtime import events as ev
from local_ccm.runtime.controller import DONE, Fence, Permission, Result, Watch, open_fence
from local_ccm.runtime.parts import Informers, event_outbox, stamp

log = logging.getLogger(__name__)
SIGNER_NAME = "kubernetes.io/kubelet-serving"


def permissions(settings: Settings) -> tuple[Permission, ...]:
    """The RBAC the approver needs (the chart's ClusterRole for it, the Node watch the
    lifecycle controller's, Events the `--event-namespace` Role), nothing more."""
    group = CSRS.group
    return (
        Permission(group, CSRS.plural, ("get", "list", "watch")),
        Permission(group, f"{CSRS.plural}/approval", ("update",)),
        Permission(group, "signers", ("approve",), names=(SIGNER_NAME,)),
        Permission("", "nodes", ("list", "watch")),
        Permission("", "events", ("create",), namespace=settings.event_namespace),
    )


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
    """The leader's state and decisions for one term (`runtime.controller.Controller`)."""

    name = NAME

    def __init__(
        self,
        api: CsrApi,
        nodes: ListWatch,
        settings: Settings = Settings(),  # noqa: B008 (frozen)
        *,
        metrics: CsrMetrics,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.permissions = permissions(settings)
        self.noted: set[tuple[str, str]] = set()  # (uid, reason) of waits already counted
        self.outbox = event_outbox(api, clock, NAME, instance=settings.instance,
                                   namespace=settings.event_namespace)  # fmt: skip
        informers = Informers(clock, rng, metrics.watch_ended)
        self.csrs: Informer[Obj] = informers.make(api.list_watch(), dict, "csrs")
        self.nodes: Informer[Node] = informers.make(nodes, project_node, "nodes")
        self._claims: Claims | None = None  # built from the Node cache when first needed
        self.refused: set[str] = set()  # CSRs whose last write conflicted: read them afresh
        self.fence: Fence = open_fence  # the worker's, once `beside` handed it over

    def watches(self) -> Sequence[Watch]:
        """Nodes first: a CSR is decided against a full Node cache."""
        return [Watch(self.nodes, self._on_node), Watch(self.csrs, self._on_csr)]

    def synced(self) -> Iterable[str]:
        return ()  # every listed CSR came as ADDED

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        self.fence = fence  # a write after a fresh read waits for it
        return [self.outbox.run()]

    def subject(self, key: str) -> ev.Subject | None:
        obj = self.csrs.cache.get(key)
        return None if obj is None else csr_subject(project_csr(obj))

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        self.outbox.once(spec, subject, spec.message)

    def ready(self) -> tuple[bool, str]:
        synced = self.csrs.has_synced() and self.nodes.has_synced()
        return (True, "ok") if synced else (False, "CSR and Node caches not synced")

    # ------------------------------------------------------------ watches: the keys

    def _on_csr(self, change: Change[Obj]) -> Iterable[str]:
        if change.type == "DELETED" and change.old is not None:
            uid = str((change.old.get("metadata") or {}).get("uid", ""))
            self.noted = {(u, reason) for u, reason in self.noted if u != uid}
        return [change.key] if change.type in ("ADDED", "MODIFIED", "DELETED") else []

    def _on_node(self, change: Change[Node]) -> Iterable[str]:
        if self._claims is not None and change.type == "DELETED":
            self._claims.drop(change.key)
        if change.type not in ("ADDED", "MODIFIED") or change.new is None:
            return []
        if self._claims is not None:
            self._claims.put(change.new)
        user = NODE_USER_PREFIX + change.key
        return [key for key, obj in self.csrs.cache.items()
                if (obj.get("spec") or {}).get("username") == user]  # fmt: skip

    # ------------------------------------------------------------ one CSR

    async def sync(self, name: str) -> Result:
        """Decide one CSR and write the decision; a CSR gone (404) is done; a conflict and
        other API errors are the worker's to retry (a conflict at once). Only a failed write
        counts in `write_failures`, not a failed read."""
        try:
            obj = await self._current(name)
            if obj is not None:
                await self._decide_and_write(obj)
        except NotFound:
            self.refused.discard(name)
            return DONE  # deleted meanwhile: nothing to decide
        except Conflict:
            self.refused.add(name)  # the next sync reads it afresh
            raise
        self.refused.discard(name)
        return DONE

    async def _current(self, name: str) -> Obj | None:
        """The cached CSR, or after a refused write a fresh read (the cache may still show
        the version the write was refused for), read before the fence is asked again."""
        if name not in self.refused:
            return self.csrs.cache.get(name)
        obj = await self.api.get_csr(name)
        await self.fence()
        return obj

    async def _decide_and_write(self, obj: Obj) -> None:
        """Decide this version of the CSR and write the decision (raises the write's error)."""
        csr = project_csr(obj)
        node = self.nodes.cache.get(csr.node_name) if csr.node_name else None
        decision = decide(csr, parse_request(csr.request), node, self.settings.policy,
                          self.claims())  # fmt: skip
        if decision.kind == "skip":
            return
        if decision.kind == "wait" or (decision.kind == "deny" and not self.settings.deny):
            self._note_pending(csr, decision)
            return
        try:
            await self.api.update_approval(with_condition(obj, decision, stamp(self.clock)))
        except (NotFound, Conflict):
            raise  # gone, or changed meanwhile: not a failure
        except ApiError as exc:
            self.metrics.write_failures.labels(str(exc.status)).inc()  # the write alone
            raise
        self._record(csr, decision)

    def claims(self) -> Claims:
        """Which Nodes show which addresses and names: built from the Node cache once (a
        primed cache tells no handler), then kept current by the Node handler."""
        if self._claims is None:
            self._claims = Claims(self.nodes.cache.values())
        return self._claims

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
