"""One deletion attempt: a fresh quorum GET and the re-check on it, the optional
out-of-service taint and wait, then the DELETE with uid + resourceVersion preconditions, or
its dry-run. Kube errors no step handles end the attempt as `aborted` in the loop.

A Node planned with a NodeBMC has it read afresh too (`fresh_reading`): a deletion for its
System absent needs it still absent, and the out-of-service taint goes on only while it reads
Off (or absent); during the wait, the BMC reading On again is a recovery like a probe's reply.

Every write waits for the leader's write fence (`runtime.controller.Fence`) first; the fresh
GET that a DELETE's preconditions and re-check come from is read after it, so a wait for the
fence is followed by a fresh look, never by a decision taken before it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from local_ccm.clock import Clock
from local_ccm.kube import errors as ke
from local_ccm.lifecycle.api import BmcApi, NodeApi, Obj
from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core.bmc import BmcReading, BmcState, project_bmc, read_bmc
from local_ccm.lifecycle.core.health import Episode, recheck
from local_ccm.lifecycle.core.model import IPAddress, NodeView, ProbeKind, ProbeOutcome, combine
from local_ccm.lifecycle.core.outofservice import plan_out_of_service
from local_ccm.lifecycle.core.state import AttemptResult, DeleteAction, LoopConfig, dry_run_message
from local_ccm.logs import kv
from local_ccm.runtime.controller import Fence
from local_ccm.runtime.events import rfc3339

log = logging.getLogger(__name__)


class AttemptHost(Protocol):
    """The loop, as an attempt sees it."""

    config: LoopConfig
    api: NodeApi
    bmcs: BmcApi | None  # None: NodeBMCs are not read
    clock: Clock
    fence: Fence  # returns once this process may write

    @property
    def breaker_open(self) -> bool: ...

    def episode(self, uid: str) -> Episode | None: ...

    def project(self, obj: Obj) -> NodeView: ...

    def announce(self, uid: str, name: str, reason: str, message: str) -> None:
        """An Event at most once per (uid, reason) per episode."""
        ...

    def report_failure(self, action: DeleteAction, error: str) -> None:
        """`DeletingNodeFailed`, at most once per 10 minutes per Node."""
        ...

    async def run_probe(
        self, addresses: Sequence[IPAddress], kinds: Sequence[ProbeKind]
    ) -> tuple[ProbeOutcome, ...]: ...


async def fresh_reading(host: AttemptHost, name: str) -> BmcReading | None:
    """The Node's NodeBMC read afresh (a quorum GET) and judged; None when it has none."""
    if host.bmcs is None:
        return None
    try:
        obj = await host.bmcs.get_nodebmc(name)
    except ke.NotFound:
        return None
    return read_bmc(project_bmc(obj), host.clock.now(), host.config.settings.bmc_max_age)


class Attempt:
    def __init__(self, host: AttemptHost, action: DeleteAction) -> None:
        self.host, self.action = host, action
        self.fields = kv(node=action.name, uid=action.uid)
        self.bmc: BmcState | None = None  # what the NodeBMC read at the fresh look

    async def run(self) -> AttemptResult:
        """The result for `record_attempt` and the metric."""
        fresh = await self.fresh()
        if isinstance(fresh, str):
            return fresh
        if self.action.out_of_service:
            fresh = await self.out_of_service(fresh)
            if isinstance(fresh, str):
                return fresh
        if self.action.dry_run:
            return await self.dry_run(fresh)
        return await self.delete(fresh)

    async def fresh(self) -> Obj | AttemptResult:
        """A quorum GET and, on it, the re-check of scope, readiness, age and the breaker."""
        host, action = self.host, self.action
        await host.fence()  # what is read next is what the write relies on
        try:
            obj: Obj | None = await host.api.get_node(action.name)
        except ke.NotFound:
            obj = None
        abort = recheck(
            None if obj is None else host.project(obj), action.uid, host.config.scope,
            episode=host.episode(action.uid), now=host.clock.now(),
            timeout=host.config.timeout, breaker_open=host.breaker_open,
            mono=host.clock.monotonic(),
        )  # fmt: skip
        if abort is None and obj is not None:
            return await self.recheck_bmc(obj)
        check = abort.check if abort else "the Node no longer exists"
        log.info("deletion aborted: %s", check, extra=self.fields)
        if abort is not None and abort.result == "aborted":
            host.announce(action.uid, action.name, ev.DELETION_ABORTED, check)
            return "aborted"
        return "gone"

    async def recheck_bmc(self, obj: Obj) -> Obj | AttemptResult:
        """The NodeBMC the plan relied on, read again: still there, and still reporting the
        System absent when that was the verdict."""
        if not self.action.bmc:
            return obj
        reading = await fresh_reading(self.host, self.action.name)
        self.bmc = None if reading is None else reading.state
        if reading is None:
            return self.abort("the Node's NodeBMC no longer exists")
        if self.action.source == "bmc" and reading.state != "absent":
            return self.abort(f"the BMC no longer reports the System absent: {reading.detail}")
        return obj

    def abort(self, check: str) -> AttemptResult:
        log.info("deletion aborted: %s", check, extra=self.fields)
        self.host.announce(self.action.uid, self.action.name, ev.DELETION_ABORTED, check)
        return "aborted"

    async def delete(self, fresh: Obj) -> AttemptResult:
        host, action = self.host, self.action
        verdict = action.summary if action.source == "bmc" else f"probes: {action.summary}"
        message = (
            f"deleting Node {action.name} (uid {action.uid}): NotReady since "
            f"{rfc3339(action.t0)} ({action.age:.0f}s); {verdict}"
        )
        host.announce(action.uid, action.name, ev.DELETING_NODE, message)
        failed = await self.send_delete(fresh, dry_run=False)
        if failed is None:
            log.info("deleted Node: %s", message, extra=self.fields)
        return failed or "deleted"

    async def dry_run(self, fresh: Obj) -> AttemptResult:
        """The same DELETE with dryRun=All exercises RBAC and preconditions."""
        failed = await self.send_delete(fresh, dry_run=True)
        if failed is not None:
            return failed
        message = dry_run_message(self.action)
        log.info("%s", message, extra=self.fields)
        self.host.announce(self.action.uid, self.action.name, ev.DRY_RUN_EVENT, message)
        return "dry_run"

    async def send_delete(self, fresh: Obj, *, dry_run: bool) -> AttemptResult | None:
        """Preconditions from the fresh object, so a changed Node answers 409; the result
        when the DELETE did not go through, else None."""
        meta, action = fresh["metadata"], self.action
        try:
            await self.host.api.delete_node(
                action.name, uid=meta["uid"], resource_version=meta["resourceVersion"],
                dry_run=dry_run,
            )  # fmt: skip
        except ke.Conflict as exc:
            log.info("delete precondition failed: %s", exc.message, extra=self.fields)
            return "precondition_failed"
        except ke.NotFound:
            return "gone"
        except ke.ApiError as exc:
            what = "dry-run DELETE" if dry_run else "DELETE"
            log.warning("%s failed: %s", what, exc, extra=self.fields)
            if not dry_run:
                self.host.report_failure(action, str(exc))
            return "failed"
        return None

    # ------------------------------------------------------------------ out-of-service
    async def out_of_service(self, fresh: Obj) -> Obj | AttemptResult:
        """Taint, wait for VolumeAttachments (or the timeout), re-read, then delete; untaint
        and end the attempt when the Node recovers meanwhile."""
        host, action = self.host, self.action
        obj, recovered, changed = fresh, False, False
        while True:
            attachments = (
                0 if action.dry_run else await host.api.count_volume_attachments(action.name)
            )
            step = plan_out_of_service(
                obj, now=host.clock.now(), attachments=attachments, recovered=recovered,
                timeout=host.config.out_of_service_timeout, dry_run=action.dry_run,
                bmc=self.bmc if action.bmc else None,
            )  # fmt: skip
            if step.step == "delete":
                if step.would_taint:
                    log.info("[DRY-RUN] would add the out-of-service taint", extra=self.fields)
                return await self.fresh() if changed else obj
            if step.step == "end":
                return "aborted"
            if step.step == "bmc_not_off":
                return self.abort(f"the BMC does not confirm Off ({self.bmc}): no "
                                  "out-of-service taint on the probes alone")  # fmt: skip
            if step.step in ("taint", "remove"):
                patched = await self.patch_taint(step.step, step.patch, attachments)
                if isinstance(patched, str):
                    return patched
                obj, changed = patched, True
                continue
            waited = await self.wait_out_of_service()
            if isinstance(waited, str):
                return waited
            obj, recovered, changed = waited[0], waited[1], True

    async def patch_taint(
        self, step: str, patch: Sequence[Obj], attachments: int
    ) -> Obj | AttemptResult:
        """Add (or, after a recovery, remove) the taint; a removal ends the attempt."""
        host, action = self.host, self.action
        await host.fence()
        try:
            obj = await host.api.patch_node(action.name, patch)
        except ke.Conflict:
            return "precondition_failed"
        reason = ev.OUT_OF_SERVICE_ADDED if step == "taint" else ev.OUT_OF_SERVICE_REMOVED
        log.info("%s", reason, extra=self.fields)
        host.announce(action.uid, action.name, reason, f"{attachments} VolumeAttachment(s)")
        return "aborted" if step == "remove" else obj

    async def wait_out_of_service(self) -> tuple[Obj, bool] | AttemptResult:
        """One interval of the wait: re-read, and probe again (a reply means recovered)."""
        host, action = self.host, self.action
        await host.clock.sleep(host.config.interval)
        try:
            obj = await host.api.get_node(action.name)
        except ke.NotFound:
            return "gone"
        view = host.project(obj)
        if view.uid != action.uid:
            return "aborted"
        if view.ready == "True" or await self.powered_on():
            return obj, True
        if await host.api.count_volume_attachments(action.name) == 0:
            return obj, False  # about to delete: no need to wait for a probe
        settings = host.config.settings
        addresses = settings.addresses(view)
        if settings.unprobed or not addresses:
            return obj, False
        outcomes = await host.run_probe(addresses, settings.kinds)
        return obj, combine(outcomes) == "reachable"

    async def powered_on(self) -> bool:
        """The BMC reads the System On again (someone powered it on): it may come back, so its
        Pods' volumes must not move."""
        if not self.action.bmc:
            return False
        reading = await fresh_reading(self.host, self.action.name)
        if reading is None or reading.state != "on":
            return False
        log.info("recovered: %s", reading.detail, extra=self.fields)
        return True
