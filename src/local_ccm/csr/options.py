"""kubelet-serving-approver's own flags and settings. Pure, no I/O."""

from __future__ import annotations

from typing import Final

from local_ccm.csr.core.model import DEFAULT_MAX_EXPIRATION, Policy
from local_ccm.flags import Flag, Loader, Parsed, Problem
from local_ccm.flags.values import duration
from local_ccm.gosyntax import format_go_duration
from local_ccm.records import dataclass
from local_ccm.validate import parse_cidr_list

NAME: Final = "kubelet-serving-approver"
DENY_FLAG: Final = "csr-deny"
PREFIXES_FLAG: Final = "csr-ip-prefixes"
MAX_EXPIRATION_FLAG: Final = "csr-max-expiration"
FLAGS: Final = (
    Flag(DENY_FLAG, "bool", True, "kubelet-serving-approver: deny a kubelet serving CSR "
         "that fails a check; false leaves it pending (logged, with an Event).",
         env=("CSR_DENY",)),
    Flag(PREFIXES_FLAG, "string", "", "kubelet-serving-approver: IP prefixes (comma list of "
         "CIDRs) every IP SAN must lie in; empty: no restriction.", env=("CSR_IP_PREFIXES",),
         metavar="CIDRs", value=parse_cidr_list),
    Flag(MAX_EXPIRATION_FLAG, "duration", DEFAULT_MAX_EXPIRATION, "kubelet-serving-approver: "
         "deny a CSR whose spec.expirationSeconds asks for longer (367 days, as "
         "kubelet-csr-approver); 0: no bound (the signer's own limit applies).",
         env=("CSR_MAX_EXPIRATION",), value=duration()),
)  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """What the approver runs with: its flags, and the event namespace and identity the
    manager gives it."""

    deny: bool = True  # --csr-deny
    policy: Policy = Policy()  # --csr-ip-prefixes, --csr-max-expiration
    event_namespace: str = "default"  # Events about cluster-scoped objects live there
    instance: str = NAME
    backoff: tuple[float, float] = (0.5, 30.0)  # first and longest retry delay of a write


def settings_from(parsed: Parsed) -> Settings | list[Problem]:
    """The flags above read and checked; every problem with them listed (those of the rest of
    the command line are the shared options' to report)."""
    read = Loader(parsed)
    prefixes, bound = read(PREFIXES_FLAG), read(MAX_EXPIRATION_FLAG)
    settings = Settings(deny=parsed.get_bool(DENY_FLAG), policy=Policy(prefixes, bound))
    mine = [p for p in read.problems if p not in parsed.problems]
    return mine or settings


def settings_fields(settings: Settings) -> dict[str, object]:
    """What the start-up line shows of them."""
    return {
        DENY_FLAG: str(settings.deny).lower(),
        PREFIXES_FLAG: ",".join(str(p) for p in settings.policy.ip_prefixes),
        MAX_EXPIRATION_FLAG: format_go_duration(settings.policy.max_expiration),
    }
