"""node-bmc's own flags and settings. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from local_ccm.flags import Flag, Loader, Parsed, Problem
from local_ccm.flags.values import at_least, duration
from local_ccm.gosyntax import format_go_duration
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, dns1123_label

NAME: Final = "node-bmc"
POLL_FLAG: Final = "bmc-poll-interval"
CONCURRENCY_FLAG: Final = "bmc-concurrent-polls"
NAMESPACE_FLAG: Final = "bmc-credentials-namespace"
POWER_OFF_FLAG: Final = "bmc-power-off-timeout"
MIN_POLL: Final = 1.0
MAX_CONCURRENCY: Final = 200  # threads: each poll in flight holds one


def _between(low: int, high: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value > high:
            raise ValidationError(f"must be at most {high}, got {value}")
        return at_least(low)(value)

    return check


FLAGS: Final = (
    Flag(POLL_FLAG, "duration", 30.0, "node-bmc: how often each BMC's power state is read "
         "(each poll 10 % early or late at random, so BMCs are not polled in step); after a "
         "failed read the BMC is asked again after 5s, doubling up to 5m.",
         env=("BMC_POLL_INTERVAL",), value=duration(MIN_POLL)),
    Flag(CONCURRENCY_FLAG, "int", 10, "node-bmc: the most BMCs polled at "
         "once (each BMC has at most one request in flight whatever this is).",
         env=("BMC_CONCURRENT_POLLS",), value=_between(1, MAX_CONCURRENCY)),
    Flag(NAMESPACE_FLAG, "string", "kube-system", "node-bmc: the namespace of the Secrets "
         "NodeBMCs name in spec.credentialsName; the controller may only get Secrets there.",
         metavar="namespace", env=("BMC_CREDENTIALS_NAMESPACE",), value=dns1123_label),
    Flag(POWER_OFF_FLAG, "duration", 120.0, "node-bmc: how long after a ForceOff (a power-off "
         "request on a NodeBMC) a poll must read the System Off before the request is "
         "reported failed; it is never sent again.", env=("BMC_POWER_OFF_TIMEOUT",),
         value=duration(MIN_POLL)),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """What node-bmc runs with: its flags, the event namespace and identity the manager gives
    it, and the bounds that are not flags."""

    poll_interval: float = 30.0  # --bmc-poll-interval
    concurrent_polls: int = 10  # --bmc-concurrent-polls
    credentials_namespace: str = "kube-system"  # --bmc-credentials-namespace
    event_namespace: str = "default"  # Events about cluster-scoped objects live there
    instance: str = NAME
    backoff: tuple[float, float] = (5.0, 300.0)  # a failing BMC: first and longest retry delay
    jitter: float = 0.1  # each poll interval is this share early or late at random
    credentials_max_age: float = 600.0  # a Secret read is used at most this long
    contact_refresh: float = 300.0  # lastContact alone is written at most this often
    # ... and this often while the Node is not Ready: the lifecycle controller acts on fresh
    # readings only (its --bmc-max-age), and a NotReady Node is what it acts on.
    contact_refresh_not_ready: float = 30.0
    power_off_timeout: float = 120.0  # --bmc-power-off-timeout
    connect_timeout: float = 5.0  # TCP and TLS handshake with a BMC
    read_timeout: float = 10.0  # each read of a BMC's answer


def settings_from(parsed: Parsed) -> Settings | list[Problem]:
    """The flags above read and checked; every problem listed (the rest of the command line's
    are the shared options' to report)."""
    read = Loader(parsed)
    settings = Settings(poll_interval=read(POLL_FLAG), concurrent_polls=read(CONCURRENCY_FLAG),
                        credentials_namespace=read(NAMESPACE_FLAG),
                        power_off_timeout=read(POWER_OFF_FLAG))  # fmt: skip
    mine = [p for p in read.problems if p not in parsed.problems]
    return mine or settings


def settings_fields(settings: Settings) -> dict[str, object]:
    """What the start-up line shows of them."""
    return {
        POLL_FLAG: format_go_duration(settings.poll_interval),
        CONCURRENCY_FLAG: settings.concurrent_polls,
        NAMESPACE_FLAG: settings.credentials_namespace,
        POWER_OFF_FLAG: format_go_duration(settings.power_off_timeout),
    }
