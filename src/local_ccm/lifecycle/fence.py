"""One power-off request (fencing, `--bmc-fencing`): the lifecycle controller asks, node-bmc
executes (docs/bmc.md, "Fencing").

After the write fence: a quorum GET of the Node and the deletion's re-check on it (scope,
exclusions, protection, readiness, age, the breaker), a quorum GET of its NodeBMC, which must
still read the System On with no request of this episode standing, then the annotation
`bmc.local-ccm.io/power-off: "<uid>@<time>"` in a JSON Patch guarded by the NodeBMC's
resourceVersion. A leader that fails over after the write leaves the request in the API: the
next leader sees it there (`core.bmc.fence_status`) and asks nothing more.
"""

from __future__ import annotations

import logging

from local_ccm.kube import errors as ke
from local_ccm.lifecycle.attempt import AttemptHost
from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core.bmc import (
    fence_status,
    power_off_patch,
    project_bmc,
    read_bmc,
    request_value,
)
from local_ccm.lifecycle.core.health import recheck
from local_ccm.lifecycle.core.state import FenceAction, FenceResult
from local_ccm.logs import kv
from local_ccm.runtime.events import rfc3339

log = logging.getLogger(__name__)


class FenceRequest:
    def __init__(self, host: AttemptHost, action: FenceAction) -> None:
        self.host, self.action = host, action
        self.fields = kv(node=action.name, uid=action.uid)

    async def run(self) -> FenceResult:
        host, action = self.host, self.action
        await host.fence()  # what is read next is what the write relies on
        try:
            node = await host.api.get_node(action.name)
        except ke.NotFound:
            return "gone"
        abort = recheck(
            host.project(node), action.uid, host.config.scope, episode=host.episode(action.uid),
            now=host.clock.now(), timeout=host.config.timeout, breaker_open=host.breaker_open,
            mono=host.clock.monotonic(),
        )  # fmt: skip
        if abort is not None:
            return self.abort(abort.check)
        return await self.request()

    async def request(self) -> FenceResult:
        host, action = self.host, self.action
        assert host.bmcs is not None  # a power-off is planned only when NodeBMCs are read
        try:
            obj = await host.bmcs.get_nodebmc(action.name)
        except ke.NotFound:
            return self.abort("the Node's NodeBMC no longer exists")
        view, now = project_bmc(obj), host.clock.now()
        reading = read_bmc(view, now, host.config.settings.bmc_max_age)
        if reading.state != "on":
            return self.abort(f"the BMC no longer reads the System On: {reading.detail}")
        if fence_status(view, action.uid, action.t0) != "none":
            return "requested"  # this episode's request stands (another leader's)
        annotations = (obj.get("metadata") or {}).get("annotations")
        patch = power_off_patch(view, request_value(action.uid, now),
                                has_annotations=isinstance(annotations, dict))  # fmt: skip
        try:
            await host.bmcs.patch_nodebmc(action.name, patch)
        except ke.Conflict:
            return "precondition_failed"
        except ke.NotFound:
            return self.abort("the Node's NodeBMC no longer exists")
        message = (
            f"requested a power-off (ForceOff) of Node {action.name} (uid {action.uid}) through "
            f"its NodeBMC: NotReady since {rfc3339(action.t0)} ({action.age:.0f}s); probes: "
            f"{action.summary}; {action.bmc}"
        )
        log.warning("%s", message, extra=self.fields)
        host.announce(action.uid, action.name, ev.FENCING_NODE, message)
        return "requested"

    def abort(self, check: str) -> FenceResult:
        log.info("power-off not requested: %s", check, extra=self.fields)
        self.host.announce(self.action.uid, self.action.name, ev.DELETION_ABORTED, check)
        return "aborted"
