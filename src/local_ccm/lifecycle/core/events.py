"""Kubernetes Events about Nodes: the reasons, bodies and the repeat
limit of `DeletingNodeFailed`.

Pure, no I/O, no clock: times are parameters. The loop sends what these functions return,
asynchronously, so an Event never delays a decision.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from local_ccm import names
from local_ccm.lifecycle.core.model import format_time

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
WARNING_REASONS: Final = frozenset(
    {PROBE_FAILED, NO_PROBE_ADDRESS, BLOCKED_BY_CIRCUIT_BREAKER, BLOCKED_BY_SELF_CHECK,
     DELETING_NODE_FAILED}
)  # fmt: skip

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE: Final = 1024
FAILED_REPEAT: Final = 600.0  # DeletingNodeFailed at most once per 10 min per Node


def event_type(reason: str) -> EventType:
    return "Warning" if reason in WARNING_REASONS else "Normal"


def clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def event_body(
    *,
    reason: str,
    message: str,
    node_name: str,
    node_uid: str,
    namespace: str,
    identity: str,
    now: datetime,
) -> dict[str, Any]:
    """A core/v1 Event on the Node; `identity` (the leader's) is the reporting instance."""
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node_name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name,
                           "uid": node_uid},
        "type": event_type(reason),
        "reason": reason,
        "message": clip(message),
        "source": {"component": names.LIFECYCLE},
        "reportingComponent": names.LIFECYCLE,
        "reportingInstance": identity,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }  # fmt: skip


def may_repeat_failure(last_sent: float | None, now: float) -> bool:
    """`DeletingNodeFailed` is the one reason that may repeat, once per 10 minutes."""
    return last_sent is None or now - last_sent >= FAILED_REPEAT
