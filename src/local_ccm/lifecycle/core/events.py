"""The reasons of node-lifecycle-controller's Events about Nodes and their types.

Pure, no I/O. Bodies, the repeat limit of `DeletingNodeFailed` and the sending are
``local_ccm.runtime``'s, so an Event never delays a decision.
"""

from __future__ import annotations

from typing import Final

from local_ccm.runtime.events import EventSpec, EventType

# Reasons: constants, so alerts can match them.
CHECKING_REACHABILITY: Final = "CheckingReachability"
NODE_REACHABLE: Final = "NodeReachable"
PROBE_FAILED: Final = "ProbeFailed"
NO_PROBE_ADDRESS: Final = "NoProbeAddress"
BLOCKED_BY_CIRCUIT_BREAKER: Final = "DeletionBlockedByCircuitBreaker"
BLOCKED_BY_SELF_CHECK: Final = "DeletionBlockedBySelfCheck"
RATE_LIMITED: Final = "DeletionRateLimited"
DELETION_ABORTED: Final = "DeletionAborted"
OUT_OF_SERVICE_ADDED: Final = "OutOfServiceTaintAdded"
OUT_OF_SERVICE_REMOVED: Final = "OutOfServiceTaintRemoved"
DELETING_NODE: Final = "DeletingNode"
DELETING_NODE_FAILED: Final = "DeletingNodeFailed"
DRY_RUN_EVENT: Final = "NodeDeletionDryRun"
# With NodeBMCs (docs/bmc.md).
WAITING_FOR_BMC_OFF: Final = "WaitingForBMCOff"
FENCING_NODE: Final = "FencingNode"
FENCE_FAILED: Final = "FencingFailed"
FENCE_DRY_RUN: Final = "FencingDryRun"
BMC_ABSENT_NODE_READY: Final = "BMCSystemAbsentNodeReady"
BMC_REASONS: Final = frozenset(
    {WAITING_FOR_BMC_OFF, FENCING_NODE, FENCE_FAILED, FENCE_DRY_RUN, BMC_ABSENT_NODE_READY}
)
WARNING_REASONS: Final = frozenset(
    {PROBE_FAILED, NO_PROBE_ADDRESS, BLOCKED_BY_CIRCUIT_BREAKER, BLOCKED_BY_SELF_CHECK,
     DELETING_NODE_FAILED, FENCE_FAILED, BMC_ABSENT_NODE_READY}
)  # fmt: skip


def event_type(reason: str) -> EventType:
    return "Warning" if reason in WARNING_REASONS else "Normal"


def spec(reason: str, message: str) -> EventSpec:
    return EventSpec(event_type(reason), reason, message)
