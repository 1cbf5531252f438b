"""When the agent's loop acts: debounce, settle, backoff, provider-ID retries, warning cadence.

Pure, no I/O, no clock: times are monotonic seconds passed in by the loop.
"""

from __future__ import annotations

from dataclasses import replace

from local_ccm.agent.core.addresses import NodeAddress
from local_ccm.kube.backoff import Backoff
from local_ccm.records import dataclass

# Transient API errors; full jitter keeps a fleet of agents from retrying in step.
API_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=300.0, full_jitter=True)
MONITOR_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=60.0, jitter=0.2)
PROVIDER_ID_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=10.0, jitter=0.2)
MAX_CONFLICTS = 5  # consecutive conflict re-reads before backing off
MAX_PROVIDER_ID_FAILURES = 3  # Azure IMDS attempts; a transport error means "not Azure"
NO_INTERNAL_IP_WARNING_EVERY = 600.0  # initialised without an InternalIP: warn per 10 min


# ------------------------------------------------------------------ debounce
# A burst of netlink events (CNIs add and remove routes per pod) costs one pass.
def debounce_wait(first: float, last: float, now: float, *, quiet: float, longest: float) -> float:
    """Seconds until a burst of triggers ends: ``quiet`` seconds after its ``last`` trigger,
    at most ``longest`` seconds after its ``first``; ``<= 0`` means now."""
    return min(last + quiet, first + longest) - now


# ------------------------------------------------------------------ settle
@dataclass(frozen=True)
class Settle:
    """The owned entries a pending replacement would write, first seen at ``since``."""

    owned: tuple[NodeAddress, ...]
    since: float


def settle_step(
    settle: Settle | None, owned: tuple[NodeAddress, ...], now: float, settle_time: float
) -> tuple[Settle | None, float]:
    """Two detections ``settle_time`` apart must agree before a replacement is written.

    Returns the new state and the seconds still to wait (0: write now). A different
    replacement restarts the wait: DHCP renewals that drop and re-add an address never write.
    """
    if settle is None or settle.owned != owned:
        settle = Settle(owned, now)
    elapsed = now - settle.since
    if elapsed >= settle_time:
        return None, 0.0
    return settle, settle_time - elapsed


# ------------------------------------------------------------------ warning cadence
def is_due(last: float | None, now: float, every: float) -> bool:
    """A rate-limited warning may be logged again (never logged, or ``every`` s ago)."""
    return last is None or now - last >= every


# ------------------------------------------------------------------ provider ID
@dataclass(frozen=True)
class ProviderIdAttempts:
    """Fetching a provider ID from instance metadata (Azure IMDS).

    ``done`` once a value came back, nothing answered (``absent``: a transport error means
    "not Azure"), or ``MAX_PROVIDER_ID_FAILURES`` answers were errors. Only a value is ever
    used; the outcome is kept for the life of the process.
    """

    value: str | None = None
    failures: int = 0
    done: bool = False
    absent: bool = False
    last_error: str = ""


def provider_id_succeeded(state: ProviderIdAttempts, value: str) -> ProviderIdAttempts:
    return replace(state, value=value, done=True)


def provider_id_failed(
    state: ProviderIdAttempts, error: str, *, transport: bool
) -> ProviderIdAttempts:
    failures = state.failures + 1
    done = transport or failures >= MAX_PROVIDER_ID_FAILURES
    return replace(state, failures=failures, done=done, absent=transport, last_error=error)
