"""node-ipam-controller's command line and environment.

Pure, no I/O: argv and the environment are parameters. `load_options` returns a frozen
`IpamOptions` or every problem at once. The `IPAM_RESOURCE_LOCK` rule is
applied to the environment *before* parsing (`flagdefs.resolve_resource_lock_env`), because that
one variable may mean either the retry period or the lock type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from local_ccm.flags import (
    Parsed,
    Problem,
    format_go_duration,
    go_quote,
    invalid,
    invalid_env,
    parse,
)
from local_ccm.ipam.core.cidrset import IPV6_MAX_BLOCKS, IPNetwork
from local_ccm.ipam.flagdefs import FLAGS, resolve_resource_lock_env
from local_ccm.lease.election import election_problems
from local_ccm.validate import (
    BindAddress,
    ValidationError,
    dns1123_label,
    dns1123_subdomain,
    parse_bind_address,
    parse_cidr,
    split_list,
)

LogFormat = Literal["text", "json"]
# With --metrics-secure, /metrics leaves the plain-HTTP web server (health probes) for its own
# HTTPS port; next to the other controllers' ports (lifecycle 8090/8091, agent 8092/8093).
SECURE_METRICS_ADDRESS = ":8094"
EVENT_NAMESPACE = "default"  # the only namespace of Events about cluster-scoped objects
_REMOVED_LOCKS = ("endpoints", "configmaps")
_MIGRATION_LOCKS = ("endpointsleases", "configmapsleases")


@dataclass(frozen=True)
class IpamOptions:
    """The validated command line; durations in seconds."""

    kubeconfig: str = ""
    apiserver: str = ""
    web_bind: BindAddress | None = None
    web_flag: str = "webserver-bind-address"  # the flag web_bind was given by, for messages
    metrics_bind: BindAddress | None = None  # used only when metrics_mode == "separate"
    metrics_mode: Literal["web", "separate", "off"] = "web"
    metrics_secure: bool = False  # HTTPS + TokenReview/SubjectAccessReview (mode "separate")
    metrics_cert_dir: str = ""  # empty: self-signed at start-up
    leader_election: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    lease_name: str = "node-ipam-controller"
    lease_namespace: str = ""
    identity: str = ""  # "" = generated at start-up
    pod_name: str = ""
    verbosity: int = 0
    log_format: LogFormat = "text"
    cluster_cidrs: tuple[IPNetwork, ...] = ()
    mask_v4: int = 24
    mask_v6: int = 64
    reserved: tuple[IPNetwork, ...] = ()  # service ranges and --reserved-cidrs
    legacy_and_terms: bool = False
    reuse_delay: float = 0.0
    concurrent_node_syncs: int = 20
    status_interval: float = 5.0
    qps: float = 50.0
    burst: int = 100
    event_namespace: str = "default"
    warnings: tuple[str, ...] = field(default=(), compare=False)  # logged after start-up


def load_options(argv: Sequence[str], env: Mapping[str, str]) -> IpamOptions | list[Problem]:
    """Parse and validate `argv` (without the program name); every problem at once."""
    fixed_env, warnings, problems = resolve_resource_lock_env(env)
    parsed = parse(FLAGS, argv, fixed_env)
    return options_from(parsed, env, warnings=warnings, problems=problems)


def options_from(
    parsed: Parsed,
    env: Mapping[str, str],
    *,
    warnings: Sequence[str] = (),
    problems: Sequence[Problem] = (),
) -> IpamOptions | list[Problem]:
    """Validate a parsed command line (the CLI handles --help/--version first)."""
    found = [*problems, *parsed.problems]
    notes = list(warnings)
    lock = _lock(parsed, found, notes)
    durations = _election(parsed, found)
    cluster = _cluster_cidrs(parsed, found)
    masks = _masks(parsed, cluster, found)
    web, metrics_mode, metrics_bind = _web(parsed, found)
    legacy = parsed.get_bool("legacy-and-selector-terms")
    if legacy:
        notes.append("--legacy-and-selector-terms is deprecated: nodeSelector terms are AND-ed")
    options = IpamOptions(
        kubeconfig=parsed.get_str("kubeconfig"),
        apiserver=parsed.get_str("apiserver"),
        web_bind=web,
        web_flag=_web_flag(parsed),
        metrics_bind=metrics_bind,
        metrics_mode=metrics_mode,
        metrics_secure=parsed.get_bool("metrics-secure") and metrics_mode == "separate",
        metrics_cert_dir=parsed.get_str("metrics-cert-dir"),
        leader_election=parsed.get_bool("leader-elect"),
        lease_duration=durations[0],
        renew_deadline=durations[1],
        retry_period=durations[2],
        resource_lock=lock,
        lease_name=_name(parsed, "leader-elect-resource-name", dns1123_subdomain, found),
        lease_namespace=_lease_namespace(parsed, env, found),
        identity=parsed.get_str("leader-elect-identity"),
        pod_name=env.get("POD_NAME", ""),
        verbosity=_verbosity(parsed, found),
        log_format=_log_format(parsed, found),
        cluster_cidrs=cluster,
        mask_v4=masks[0],
        mask_v6=masks[1],
        reserved=_service_ranges(parsed, found) + _reserved(parsed, found),
        legacy_and_terms=legacy,
        reuse_delay=_duration(parsed, "cidr-reuse-delay", found, allow_zero=True),
        concurrent_node_syncs=_at_least(parsed, "concurrent-node-syncs", 1, found),
        status_interval=_duration(parsed, "status-update-interval", found),
        qps=_positive_float(parsed, "kube-api-qps", found),
        burst=_at_least(parsed, "kube-api-burst", 1, found),
        event_namespace=_event_namespace(parsed, found),
        warnings=tuple(notes),
    )
    return found or options


# ---------------------------------------------------------------- leader election


def _lock(parsed: Parsed, problems: list[Problem], notes: list[str]) -> str:
    value = parsed.get_str("leader-elect-resource-lock")
    if value == "leases":
        return value
    if value in _MIGRATION_LOCKS:
        notes.append(f"--leader-elect-resource-lock={value} is treated as leases")
        return "leases"
    if value in _REMOVED_LOCKS:
        reason = f"{go_quote(value)} is no longer supported (removed from client-go); use leases"
    else:
        reason = f"{go_quote(value)} is not a lock type; use leases"
    problems.append(_problem(parsed, "leader-elect-resource-lock", reason))
    return "leases"


def _election(parsed: Parsed, problems: list[Problem]) -> tuple[float, float, float]:
    names_ = (
        "leader-elect-lease-duration",
        "leader-elect-renew-deadline",
        "leader-elect-retry-period",
    )
    values = tuple(parsed.get_float(n) for n in names_)
    before = len(problems)
    for flag, value in zip(names_, values, strict=True):
        if not value > 0:
            problems.append(_problem(parsed, flag, f"must be > 0, got {format_go_duration(value)}"))
    if len(problems) == before:
        for text in election_problems(*values):
            problems.append(invalid(None, f"invalid leader election durations: {text}"))
    return values[0], values[1], values[2]


def _lease_namespace(parsed: Parsed, env: Mapping[str, str], problems: list[Problem]) -> str:
    """Flag, else POD_NAMESPACE; still empty with leader election on: exit 2."""
    flag = "leader-elect-resource-namespace"
    value = parsed.get_str(flag) or env.get("POD_NAMESPACE", "")
    if not value:
        if parsed.get_bool("leader-elect"):
            problems.append(
                invalid(
                    parsed.given_as(flag),
                    "empty (also as its alias --leader-elect-namespace) and POD_NAMESPACE is "
                    "not set; required with leader election (a default could put two replicas "
                    "in different namespaces)",
                )
            )
        return ""
    try:
        return dns1123_label(value)
    except ValidationError as err:
        problems.append(_problem(parsed, flag, str(err)))
        return value


# ---------------------------------------------------------------- pools


def _cluster_cidrs(parsed: Parsed, problems: list[Problem]) -> tuple[IPNetwork, ...]:
    """At most one CIDR per family, each valid."""
    flag = "cluster-cidr"
    cidrs = _cidr_list(parsed, flag, problems)
    if cidrs is None:
        return ()
    versions = [c.version for c in cidrs]
    if len(set(versions)) != len(versions):
        problems.append(_problem(parsed, flag, "at most one IPv4 and one IPv6 CIDR"))
        return ()
    return tuple(sorted(cidrs, key=lambda c: c.version))


def _masks(parsed: Parsed, cidrs: Sequence[IPNetwork], problems: list[Problem]) -> tuple[int, int]:
    """Mask sizes within the family, not shorter than the pool, IPv6 ≤ 2^16 blocks."""
    masks = {
        4: parsed.get_int("node-cidr-mask-size-ipv4"),
        6: parsed.get_int("node-cidr-mask-size-ipv6"),
    }
    flags = {4: "node-cidr-mask-size-ipv4", 6: "node-cidr-mask-size-ipv6"}
    single = parsed.get_optional_int("node-cidr-mask-size")
    if single is not None:
        if len(cidrs) > 1:
            problems.append(
                _problem(parsed, "node-cidr-mask-size", "only for a single-stack --cluster-cidr; "
                         "use --node-cidr-mask-size-ipv4 and -ipv6")
            )  # fmt: skip
        else:
            version = cidrs[0].version if cidrs else 4
            masks[version], flags[version] = single, "node-cidr-mask-size"
    for version, width in ((4, 32), (6, 128)):
        mask, flag = masks[version], flags[version]
        if not 0 <= mask <= width:
            problems.append(_problem(parsed, flag, f"must be 0-{width}, got {mask}"))
            continue
        pool = next((c for c in cidrs if c.version == version), None)
        if pool is None:
            continue
        if mask < pool.prefixlen:
            problems.append(_problem(parsed, flag, f"{mask} is shorter than the prefix of {pool}"))
        elif version == 6 and 1 << (mask - pool.prefixlen) > IPV6_MAX_BLOCKS:
            problems.append(
                _problem(parsed, flag, f"{pool} with /{mask} blocks exceeds 65536 blocks "
                         "(mask - prefix length must be at most 16)")
            )  # fmt: skip
    return masks[4], masks[6]


def _service_ranges(parsed: Parsed, problems: list[Problem]) -> tuple[IPNetwork, ...]:
    flag = "service-cluster-ip-range"
    cidrs = _cidr_list(parsed, flag, problems)
    if cidrs is None:
        return ()
    versions = [c.version for c in cidrs]
    if len(cidrs) > 2 or len(set(versions)) != len(versions):
        problems.append(_problem(parsed, flag, "at most two CIDRs, one per family"))
        return ()
    return tuple(cidrs)


def _reserved(parsed: Parsed, problems: list[Problem]) -> tuple[IPNetwork, ...]:
    return tuple(_cidr_list(parsed, "reserved-cidrs", problems) or ())


def _cidr_list(parsed: Parsed, flag: str, problems: list[Problem]) -> list[IPNetwork] | None:
    """Valid CIDRs; None (one problem per bad item) when any is invalid."""
    cidrs: list[IPNetwork] = []
    bad = False
    for item in split_list(parsed.get_str(flag)):
        try:
            cidrs.append(parse_cidr(item))
        except ValidationError as err:
            problems.append(_problem(parsed, flag, str(err)))
            bad = True
    return None if bad else cidrs


# ---------------------------------------------------------------- web server, scalars


def _web(
    parsed: Parsed, problems: list[Problem]
) -> tuple[BindAddress | None, Literal["web", "separate", "off"], BindAddress | None]:
    """The web server's address (`--health-probe-address` wins when set) and the metrics mode."""
    web = _bind(parsed, _web_flag(parsed), problems)
    raw = parsed.get_str("metrics-bind-address")
    secure = parsed.get_bool("metrics-secure")
    if raw == "0":
        return web, "off", None
    if raw == "" and not secure:
        return web, "web", None  # upstream's layout: one plain server for everything
    if raw == "":
        return web, "separate", parse_bind_address(SECURE_METRICS_ADDRESS)
    metrics = _bind(parsed, "metrics-bind-address", problems)
    if secure and metrics is not None and metrics == web:
        reason = (f"must differ from --{_web_flag(parsed)} with --metrics-secure=true (the "
                  "health probes stay plain HTTP)")  # fmt: skip
        problems.append(_problem(parsed, "metrics-bind-address", reason))
    return web, "separate", metrics


def _web_flag(parsed: Parsed) -> str:
    """The flag the web server's address comes from: `--health-probe-address` when set."""
    if "health-probe-address" in parsed.explicit:
        return "health-probe-address"
    return "webserver-bind-address"


def _bind(parsed: Parsed, flag: str, problems: list[Problem]) -> BindAddress | None:
    try:
        return parse_bind_address(parsed.get_str(flag))
    except ValidationError as err:
        problems.append(_problem(parsed, flag, str(err)))
        return None


def _duration(
    parsed: Parsed, flag: str, problems: list[Problem], *, allow_zero: bool = False
) -> float:
    value = parsed.get_float(flag)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        problems.append(_problem(parsed, flag, f"must be {bound}, got {format_go_duration(value)}"))
    return value


def _at_least(parsed: Parsed, flag: str, low: int, problems: list[Problem]) -> int:
    value = parsed.get_int(flag)
    if value < low:
        problems.append(_problem(parsed, flag, f"must be at least {low}, got {value}"))
    return value


def _positive_float(parsed: Parsed, flag: str, problems: list[Problem]) -> float:
    value = parsed.get_float(flag)
    if not value > 0:
        problems.append(_problem(parsed, flag, f"must be > 0, got {value:g}"))
    return value


def _verbosity(parsed: Parsed, problems: list[Problem]) -> int:
    value = parsed.get_int("v")
    if value < 0:
        problems.append(_problem(parsed, "v", f"must be 0 or more, got {value}"))
        return 0
    return min(value, 5)


def _log_format(parsed: Parsed, problems: list[Problem]) -> LogFormat:
    value = parsed.get_str("log-format")
    if value == "json":
        return "json"
    if value != "text":
        problems.append(
            _problem(parsed, "log-format", f"{go_quote(value)} is not one of text, json")
        )
    return "text"


def _event_namespace(parsed: Parsed, problems: list[Problem]) -> str:
    """The API server's core/v1 Event validation accepts Events about cluster-scoped
    objects (Nodes and ClusterCIDRs are) only in `default` and answers 422 anywhere else, so
    any other namespace would lose every Event at run time: refuse it at start-up (exit 2)."""
    value = parsed.get_str("event-namespace")
    if value != EVENT_NAMESPACE:
        problems.append(_problem(parsed, "event-namespace", f"{go_quote(value)} is not "
                                 f"supported: the API server accepts Events about Nodes and "
                                 f"ClusterCIDRs (cluster-scoped) only in namespace "
                                 f"{EVENT_NAMESPACE!r}; leave it unset"))  # fmt: skip
    return value


def _name(parsed: Parsed, flag: str, check: object, problems: list[Problem]) -> str:
    value = parsed.get_str(flag)
    try:
        return check(value)  # type: ignore[operator,no-any-return]
    except ValidationError as err:
        problems.append(_problem(parsed, flag, str(err)))
        return value


def _problem(parsed: Parsed, flag: str, reason: str) -> Problem:
    """Blame the variable when the value came from the environment."""
    source = parsed.sources.get(flag, "")
    if source.startswith("env:"):
        return invalid_env(source.removeprefix("env:"), reason, flag)
    return invalid(parsed.given_as(flag), reason)


# ---------------------------------------------------------------- start-up line


def startup_fields(options: IpamOptions) -> dict[str, str]:
    """The effective configuration, logged at INFO at start-up."""
    return {
        "leader_election": str(options.leader_election).lower(),
        "lease": f"{options.lease_namespace or '-'}/{options.lease_name}",
        "lock": options.resource_lock,
        "lease_duration": format_go_duration(options.lease_duration),
        "renew_deadline": format_go_duration(options.renew_deadline),
        "retry_period": format_go_duration(options.retry_period),
        "cluster_cidr": ",".join(map(str, options.cluster_cidrs)) or "-",
        "node_cidr_mask_size_ipv4": str(options.mask_v4),
        "node_cidr_mask_size_ipv6": str(options.mask_v6),
        "reserved": ",".join(map(str, options.reserved)) or "-",
        "legacy_and_selector_terms": str(options.legacy_and_terms).lower(),
        "cidr_reuse_delay": format_go_duration(options.reuse_delay),
        "concurrent_node_syncs": str(options.concurrent_node_syncs),
        "status_update_interval": format_go_duration(options.status_interval),
        "event_namespace": options.event_namespace,
        "web": str(options.web_bind or "off"),
        "metrics": {"web": "web server", "off": "off"}.get(
            options.metrics_mode, str(options.metrics_bind)
        ),
        "metrics_secure": str(options.metrics_secure).lower(),
    }
