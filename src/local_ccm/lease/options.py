"""The leader-election flags every leader-elected binary shares, with kube-controller-manager's
names, and their loader into an `Election`.

Pure, no I/O. Each binary builds the group with its own Lease defaults, environment variables
and the aliases its original had (kept with their original meanings); the durations follow
client-go's rules (`order_problems`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from local_ccm.flags import Flag, Loader, Parsed, Problem, invalid
from local_ccm.flags.table import customize
from local_ccm.flags.values import duration
from local_ccm.gosyntax import format_go_duration, go_quote
from local_ccm.lease.election import JITTER_FACTOR, order_problems
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, dns1123_label, dns1123_subdomain

DURATIONS = (
    "leader-elect-lease-duration",
    "leader-elect-renew-deadline",
    "leader-elect-retry-period",
)
NAMESPACE = "leader-elect-resource-namespace"


@dataclass(frozen=True)
class Election:
    """`--leader-elect*` in seconds; `enabled` False means act at once, no Lease."""

    enabled: bool = True
    lease_name: str = ""
    namespace: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = ""  # "" = POD_NAME or the hostname plus a random suffix, at start-up
    lock: str = "leases"


def only_leases(value: str) -> str:
    """The only lock client-go still has that these controllers write."""
    if value != "leases":
        raise ValidationError(f"{go_quote(value)}: only leases")
    return value


def _namespace(value: str) -> str:
    return dns1123_label(value) if value else value  # empty: checked with --leader-elect


def election_flags(
    lease_name: str,
    *,
    namespace: str = "kube-system",
    env: Mapping[str, tuple[str, ...]] | None = None,
    aliases: Mapping[str, tuple[str, ...]] | None = None,
    lock: Callable[[str], str] = only_leases,
) -> list[Flag]:
    """The group, for a binary whose Lease is `lease_name` in `namespace` by default. `env` and
    `aliases` map a canonical flag name to its variables and extra spellings."""
    flags = [
        Flag("leader-elect", "bool", True, "Lease-based leader election."),
        Flag("leader-elect-lease-duration", "duration", 15.0, "Lease duration.",
             value=duration(strict=True)),
        Flag("leader-elect-renew-deadline", "duration", 10.0, "Stop acting when the lease "
             "could not be renewed for this long.", value=duration(strict=True)),
        Flag("leader-elect-retry-period", "duration", 2.0, "Interval between lease attempts.",
             value=duration(strict=True)),
        Flag("leader-elect-resource-lock", "string", "leases", "Lock type; only leases.",
             metavar="type", value=lock),
        Flag("leader-elect-resource-name", "string", lease_name, "Lease name.", metavar="name",
             value=dns1123_subdomain),
        Flag(NAMESPACE, "string", namespace, "Lease namespace.", metavar="namespace",
             value=_namespace),
        Flag("leader-elect-identity", "string", "", "Holder identity; empty: POD_NAME or "
             "hostname plus a random suffix.", metavar="id"),
    ]  # fmt: skip
    return customize(flags, env, aliases)


def _lease_name(value: str) -> str:
    return dns1123_subdomain(value) if value else value


def wait_flag(name: str, default: str, help_text: str) -> Flag:
    """A flag naming a Lease, in the process's Lease namespace, that a controller waits to be
    free before it starts (`runtime.host.Host.standalone`); empty: start at once."""
    return Flag(name, "string", default, help_text, metavar="name", value=_lease_name)


def waited_leases(parsed: Parsed, flags: Mapping[str, str]) -> dict[str, str] | list[Problem]:
    """Controller name → the Lease it waits for, from the `wait_flag`s `flags` maps each
    controller to (empty values left out), or every problem with them."""
    read = Loader(parsed)
    leases = {name: read(flag) for name, flag in flags.items()}
    problems = [p for p in read.problems if p not in parsed.problems]
    return problems or {name: lease for name, lease in leases.items() if lease}


def election_from(read: Loader, *, empty_namespace: str = "") -> Election:
    """The group's values, checked together whenever leader election is on: client-go's
    ordering of the durations, and a namespace. Off, neither is used, and the originals (and
    kube-controller-manager) accept any durations then: so does this. `empty_namespace` is what
    a namespace flag given empty means (node-ipam-controller's POD_NAMESPACE); by default,
    none."""
    durations = [read(name) for name in DURATIONS]
    enabled = read("leader-elect")
    namespace = read(NAMESPACE) or empty_namespace
    if enabled and not namespace and NAMESPACE not in read.failed:
        _no_namespace(read)
    if enabled:
        valid = [None if name in read.failed else value
                 for name, value in zip(DURATIONS, durations, strict=True)]  # fmt: skip
        _check_order(read, *valid)
    return Election(
        enabled=enabled,
        lease_name=read("leader-elect-resource-name"),
        namespace=namespace,
        lease_duration=durations[0],
        renew_deadline=durations[1],
        retry_period=durations[2],
        identity=read("leader-elect-identity"),
        lock=read("leader-elect-resource-lock"),
    )


def _no_namespace(read: Loader) -> None:
    flag = read.parsed.flag(NAMESPACE)
    others = [n for n in (flag.name, *flag.aliases) if n != read.parsed.given_as(NAMESPACE)]
    what = f"empty (also as --{', --'.join(others)})" if others else "empty"
    if flag.env and not read.given(NAMESPACE):
        what += f" and {' or '.join(flag.env)} is not set"
    read.reject(NAMESPACE, f"{what}; required with leader election (a default could put two "
                "replicas in different namespaces)")  # fmt: skip


def _check_order(
    read: Loader, lease: float | None, renew: float | None, retry: float | None
) -> None:
    """Each pair of valid durations (None: refused already, which does not hide the other
    pair's problem). When variables may set the durations the problem names what they mean
    (the flags were perhaps not given); otherwise it names the flags to change."""
    if any(read.parsed.flag(name).env for name in DURATIONS):
        for text in order_problems(lease, renew, retry):
            read.problems.append(invalid(None, f"invalid leader election durations: {text}"))
        return
    fmt = format_go_duration
    if lease is not None and renew is not None and not lease > renew:
        read.reject(DURATIONS[0], f"must be greater than --{DURATIONS[1]} ({fmt(renew)}), "
                    f"got {fmt(lease)}")  # fmt: skip
    if renew is not None and retry is not None and not renew > JITTER_FACTOR * retry:
        read.reject(DURATIONS[1], f"must be greater than {JITTER_FACTOR} × --{DURATIONS[2]} "
                    f"({fmt(retry)}), got {fmt(renew)}")  # fmt: skip
