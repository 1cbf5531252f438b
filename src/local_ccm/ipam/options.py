"""node-ipam-controller's command line and environment: upstream's flags and variables
[compat] and the new ones [beyond], each declared once with its parser, and a loader that
returns a frozen `IpamOptions` or every problem at once.

Pure, no I/O: argv and the environment are parameters. `resolve_resource_lock_env` rewrites
the environment before parsing: `IPAM_RESOURCE_LOCK` may mean the retry period or the lock type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Final, Literal

from local_ccm import __version__, names
from local_ccm.flags import Flag, FlagSet, Loader, Parsed, Problem, invalid_env
from local_ccm.flags.groups import check_metrics_port, logging_flags, metrics_flags
from local_ccm.flags.values import LogFormat, at_least, duration, positive
from local_ccm.gosyntax import GoSyntaxError, format_go_duration, go_quote, parse_go_duration
from local_ccm.ipam.core.cidrset import IPV6_MAX_BLOCKS, IPNetwork
from local_ccm.lease.options import Election, election_flags, election_from
from local_ccm.records import dataclass
from local_ccm.validate import BindAddress, ValidationError, parse_bind_address, parse_cidr_list

PROG: Final = names.IPAM
LOCK_TYPES = ("leases", "endpointsleases", "configmapsleases", "endpoints", "configmaps")
_REMOVED_LOCKS = ("endpoints", "configmaps")
_MIGRATION_LOCKS = ("endpointsleases", "configmapsleases")
# With --metrics-secure, /metrics leaves the plain-HTTP web server (health probes) for its own
# HTTPS port; next to the other controllers' ports (lifecycle 8090/8091, agent 8092/8093).
SECURE_METRICS_ADDRESS = ":8094"
EVENT_NAMESPACE = "default"  # the only namespace of Events about cluster-scoped objects
MetricsMode = Literal["web", "separate", "off"]
DEFAULT_ELECTION: Final = Election(lease_name="node-ipam-controller")


def _lock(value: str) -> str:
    """Upstream took client-go's lock types: the migration ones now mean leases."""
    if value == "leases" or value in _MIGRATION_LOCKS:
        return "leases"
    if value in _REMOVED_LOCKS:
        raise ValidationError(
            f"{go_quote(value)} is no longer supported (removed from client-go); use leases"
        )
    raise ValidationError(f"{go_quote(value)} is not a lock type; use leases")


def _one_per_family(reason: str) -> Callable[[str], tuple[IPNetwork, ...]]:
    def check(text: str) -> tuple[IPNetwork, ...]:
        cidrs = parse_cidr_list(text)
        if len({c.version for c in cidrs}) != len(cidrs):
            raise ValidationError(reason)
        return tuple(sorted(cidrs, key=lambda c: c.version))

    return check


def _optional_bind(text: str) -> BindAddress | None:
    return parse_bind_address(text) if text else None  # empty: decided with --metrics-secure


def _event_namespace(value: str) -> str:
    """The API server's core/v1 Event validation accepts Events about cluster-scoped objects
    (Nodes and ClusterCIDRs are) only in `default` and answers 422 anywhere else, so any other
    namespace would lose every Event at run time: refuse it at start-up (exit 2)."""
    if value != EVENT_NAMESPACE:
        raise ValidationError(
            f"{go_quote(value)} is not supported: the API server accepts Events about Nodes and "
            f"ClusterCIDRs (cluster-scoped) only in namespace {EVENT_NAMESPACE!r}; leave it unset"
        )
    return value


# IpamOptions fields named unlike their flags.
_OPTIONS_FLAGS = {"verbosity": "v", "legacy_and_terms": "legacy-and-selector-terms",
                  "reuse_delay": "cidr-reuse-delay", "status_interval": "status-update-interval",
                  "qps": "kube-api-qps", "burst": "kube-api-burst"}  # fmt: skip
FLAGS = FlagSet(
    PROG,
    [
        # Upstream's flags and variables [compat]
        Flag("apiserver", "string", "", "API server URL; overrides the kubeconfig's server "
             "(also with in-cluster credentials).", env=("IPAM_API_SERVER_URL",), metavar="URL"),
        Flag("kubeconfig", "string", "", "Kubeconfig path; empty: in-cluster config.",
             env=("IPAM_KUBECONFIG",), metavar="path"),
        Flag("health-probe-address", "string", ":8081", "Listen address of the web server "
             "(health, readiness; metrics with --metrics-secure=false); deprecated alias of "
             "--webserver-bind-address, wins when set.", env=("IPAM_HEALTH_PROBE_ADDR",),
             metavar="host:port", value=parse_bind_address),
        Flag("webserver-bind-address", "string", ":8081", "Listen address of the web server.",
             env=("IPAM_WEBSERVER_BIND_ADDR",), metavar="host:port", value=parse_bind_address),
        # Upstream's --enable-leader-election, --leader-elect-namespace and --leader-elect-id
        # (the holder identity) are aliases of kube-controller-manager's names, which every
        # binary of this image accepts.
        *election_flags(
            PROG,
            namespace="",
            env={"leader-elect": ("IPAM_ENABLE_LEADER_ELECTION",),
                 "leader-elect-lease-duration": ("IPAM_LEASE_DURATION",),
                 "leader-elect-renew-deadline": ("IPAM_RENEW_DEADLINE",),
                 "leader-elect-retry-period": ("IPAM_LEADER_ELECT_RETRY_PERIOD",),
                 "leader-elect-resource-lock": ("IPAM_RESOURCE_LOCK_NAME",),
                 "leader-elect-resource-name": ("IPAM_RESOURCE_NAME",),
                 "leader-elect-identity": ("IPAM_LEADER_ELECT_ID",),
                 "leader-elect-resource-namespace": ("IPAM_LEADER_ELECT_NAMESPACE",
                                                     "POD_NAMESPACE")},
            aliases={"leader-elect": ("enable-leader-election",),
                     "leader-elect-identity": ("leader-elect-id",),
                     "leader-elect-resource-namespace": ("leader-elect-namespace",)},
            lock=_lock,
        ),
        # New flags [beyond]
        *metrics_flags(
            "", "Empty: with --metrics-secure :8094, else /metrics on the web server; an "
            "address: a separate server; 0: off.", value=_optional_bind,
            env={"metrics-bind-address": ("IPAM_METRICS_BIND_ADDR",),
                 "metrics-secure": ("IPAM_METRICS_SECURE",),
                 "metrics-cert-dir": ("IPAM_METRICS_CERT_DIR",)},
        ),
        *logging_flags(
            env={"v": ("IPAM_LOG_VERBOSITY",), "log-format": ("IPAM_LOG_FORMAT",)},
            aliases={"log-format": ("logging-format",)},
        ),
        Flag("cluster-cidr", "string", "", "Default pool: at most one IPv4 and one IPv6 CIDR.",
             env=("IPAM_CLUSTER_CIDR",), metavar="CIDRs",
             value=_one_per_family("at most one IPv4 and one IPv6 CIDR")),
        Flag("node-cidr-mask-size", "int", None, "Mask of a single-stack --cluster-cidr "
             "(not with -ipv4/-ipv6).",
             env=("IPAM_NODE_CIDR_MASK_SIZE",)),
        Flag("node-cidr-mask-size-ipv4", "int", 24, "Per-Node IPv4 mask of the default pool.",
             env=("IPAM_NODE_CIDR_MASK_SIZE_IPV4",)),
        Flag("node-cidr-mask-size-ipv6", "int", 64, "Per-Node IPv6 mask of the default pool.",
             env=("IPAM_NODE_CIDR_MASK_SIZE_IPV6",)),
        Flag("service-cluster-ip-range", "string", "", "Reserved: at most one CIDR per family.",
             env=("IPAM_SERVICE_CLUSTER_IP_RANGE",), metavar="CIDRs",
             value=_one_per_family("at most two CIDRs, one per family")),
        Flag("reserved-cidrs", "string", "", "Reserved CIDRs, comma-separated.",
             env=("IPAM_RESERVED_CIDRS",), metavar="CIDRs", value=parse_cidr_list),
        Flag("legacy-and-selector-terms", "bool", False, "Deprecated: AND the terms of a "
             "nodeSelector as upstream did.", env=("IPAM_LEGACY_AND_SELECTOR_TERMS",)),
        Flag("cidr-reuse-delay", "duration", 0, "Quarantine of released blocks.",
             env=("IPAM_CIDR_REUSE_DELAY",), value=duration()),
        Flag("concurrent-node-syncs", "int", 20, "Concurrent Node writes.",
             env=("IPAM_CONCURRENT_NODE_SYNCS",), value=at_least(1)),
        Flag("status-update-interval", "duration", 5, "Minimum gap between status writes of "
             "one pool.", env=("IPAM_STATUS_UPDATE_INTERVAL",), value=duration(strict=True)),
        Flag("kube-api-qps", "float", 50, "Client-side request rate.",
             env=("IPAM_KUBE_API_QPS",), value=positive),
        Flag("kube-api-burst", "int", 100, "Client-side burst.", env=("IPAM_KUBE_API_BURST",),
             value=at_least(1)),
        Flag("event-namespace", "string", "default", "Namespace of Events about Nodes and "
             "ClusterCIDRs; the API server accepts only default.", env=("IPAM_EVENT_NAMESPACE",),
             metavar="namespace", value=_event_namespace),
    ],
    version=__version__,
)  # fmt: skip


@dataclass(frozen=True)
class IpamOptions:
    """The validated command line; durations in seconds."""

    kubeconfig: str = ""
    apiserver: str = ""
    web_bind: BindAddress | None = None
    web_flag: str = "webserver-bind-address"  # the flag web_bind was given by, for messages
    metrics_bind: BindAddress | None = None  # used only when metrics_mode == "separate"
    metrics_mode: MetricsMode = "web"
    metrics_secure: bool = False  # HTTPS + TokenReview/SubjectAccessReview (mode "separate")
    metrics_cert_dir: str = ""  # empty: self-signed at start-up
    election: Election = DEFAULT_ELECTION
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
    ignored_klog: tuple[str, ...] = ()  # klog flags given (accepted and ignored)
    warnings: tuple[str, ...] = field(default=(), compare=False)  # logged after start-up


def resolve_resource_lock_env(
    env: Mapping[str, str],
) -> tuple[dict[str, str], list[str], list[Problem]]:
    """Upstream's README bound the retry period to `IPAM_RESOURCE_LOCK`, a name that reads
    like the lock type: IPAM_LEADER_ELECT_RETRY_PERIOD wins, else a duration is the retry
    period, else a lock name is the lock type (with a WARNING), else exit 2."""
    out = dict(env)
    value = out.pop("IPAM_RESOURCE_LOCK", "")
    if not value or out.get("IPAM_LEADER_ELECT_RETRY_PERIOD"):
        return out, [], []
    try:
        parse_go_duration(value)
    except GoSyntaxError:
        pass
    else:
        out["IPAM_LEADER_ELECT_RETRY_PERIOD"] = value
        note = (
            "IPAM_RESOURCE_LOCK is deprecated for the retry period; "
            "use IPAM_LEADER_ELECT_RETRY_PERIOD"
        )
        return out, [note], []
    if value in LOCK_TYPES:
        out.setdefault("IPAM_RESOURCE_LOCK_NAME", value)
        note = f"IPAM_RESOURCE_LOCK={value} read as the lock type; use IPAM_RESOURCE_LOCK_NAME"
        return out, [note], []
    reason = (
        f"{go_quote(value)} is neither a duration (retry period) nor a lock type "
        f"({', '.join(LOCK_TYPES)})"
    )
    return out, [], [invalid_env("IPAM_RESOURCE_LOCK", reason)]


def options_from(
    parsed: Parsed,
    env: Mapping[str, str],
    *,
    warnings: Sequence[str] = (),
    problems: Sequence[Problem] = (),
) -> IpamOptions | list[Problem]:
    """Validate a parsed command line (the CLI handles --help/--version first)."""
    read = Loader(parsed, problems)
    cluster = read("cluster-cidr")
    web_flag = _web_flag(read)
    web, mode, metrics = _web(read, web_flag)
    masks = _masks(read, cluster)
    options = read.into(
        IpamOptions, _OPTIONS_FLAGS, web_bind=web, web_flag=web_flag,
        election=election_from(read, empty_namespace=_upstream_empty_namespace(parsed, env)),
        metrics_bind=metrics, metrics_mode=mode,
        metrics_secure=read("metrics-secure") and mode == "separate",
        pod_name=env.get("POD_NAME", ""), cluster_cidrs=cluster, mask_v4=masks[0],
        mask_v6=masks[1], reserved=read("service-cluster-ip-range") + read("reserved-cidrs"),
        ignored_klog=parsed.ignored_klog, warnings=(*warnings, *_notes(parsed)),
    )  # fmt: skip
    return read.result(options)


_UPSTREAM_WEB_FLAGS = ("webserver-bind-address", "health-probe-address")


def _upstream_empty_namespace(parsed: Parsed, env: Mapping[str, str]) -> str:
    """Upstream reads its --leader-elect-namespace given empty as POD_NAMESPACE's (it is the
    flag's default there); the canonical spelling given empty stays empty (refused)."""
    given = parsed.given_as("leader-elect-resource-namespace")
    return env.get("POD_NAMESPACE", "") if given == "leader-elect-namespace" else ""


def _web_flag(read: Loader) -> str:
    """The flag of the web server (health probes): upstream's two in node-ipam-controller, the
    deprecated one when it was given a value (empty is upstream's default: unset, as an empty
    variable is); in local-ccm-controller-manager, whose table makes both aliases of the
    process's health flag, that flag."""
    declared = read.parsed.flag("webserver-bind-address").name
    if declared != "webserver-bind-address":
        return declared
    deprecated = read.given("health-probe-address") and read.parsed.get_str("health-probe-address")
    return "health-probe-address" if deprecated else declared


def _notes(parsed: Parsed) -> list[str]:
    notes = []
    health = parsed.flag("webserver-bind-address").name  # another in the controller manager
    if health != "webserver-bind-address" and parsed.given_as(health) in _UPSTREAM_WEB_FLAGS:
        notes.append(f"--{parsed.given_as(health)} is deprecated in this binary: use --{health}")
    lock = parsed.values["leader-elect-resource-lock"]
    if lock in _MIGRATION_LOCKS:
        notes.append(f"--leader-elect-resource-lock={lock} is treated as leases")
    if parsed.get_bool("legacy-and-selector-terms"):
        notes.append("--legacy-and-selector-terms is deprecated: nodeSelector terms are AND-ed")
    return notes


def _web(read: Loader, web_flag: str) -> tuple[BindAddress | None, MetricsMode, BindAddress | None]:
    web: BindAddress | None = read(web_flag)
    raw = read.parsed.get_str("metrics-bind-address")
    secure = read.parsed.get_bool("metrics-secure")
    if raw == "0":
        return web, "off", None
    if raw == "" and not secure:
        return web, "web", None  # upstream's layout: one plain server for everything
    if raw == "":
        return web, "separate", parse_bind_address(SECURE_METRICS_ADDRESS)
    metrics: BindAddress | None = read("metrics-bind-address")
    check_metrics_port(read, metrics, web, web_flag)
    return web, "separate", metrics


def _masks(read: Loader, cidrs: Sequence[IPNetwork]) -> tuple[int, int]:
    """Mask sizes within the family, not shorter than the pool, IPv6 ≤ 2^16 blocks."""
    masks = {4: read("node-cidr-mask-size-ipv4"), 6: read("node-cidr-mask-size-ipv6")}
    flags = {4: "node-cidr-mask-size-ipv4", 6: "node-cidr-mask-size-ipv6"}
    single: int | None = read("node-cidr-mask-size")
    if single is not None and len(cidrs) > 1:
        read.reject("node-cidr-mask-size", "only for a single-stack --cluster-cidr; use "
                    "--node-cidr-mask-size-ipv4 and -ipv6")  # fmt: skip
    elif single is not None and (read.given(flags[4]) or read.given(flags[6])):
        # [compat] kube-controller-manager refuses the combination too; one was ignored.
        read.reject("node-cidr-mask-size", "cannot be combined with --node-cidr-mask-size-ipv4 "
                    "or -ipv6; give one of them")  # fmt: skip
    elif single is not None:
        version = cidrs[0].version if cidrs else 4
        masks[version], flags[version] = single, "node-cidr-mask-size"
    for version, width in ((4, 32), (6, 128)):
        problem = _mask_problem(masks[version], width, cidrs, version)
        if problem:
            read.reject(flags[version], problem)
    return masks[4], masks[6]


def _mask_problem(mask: int, width: int, cidrs: Sequence[IPNetwork], version: int) -> str:
    if not 0 <= mask <= width:
        return f"must be 0-{width}, got {mask}"
    pool = next((c for c in cidrs if c.version == version), None)
    if pool is not None and mask < pool.prefixlen:
        return f"{mask} is shorter than the prefix of {pool}"
    if pool is not None and version == 6 and 1 << (mask - pool.prefixlen) > IPV6_MAX_BLOCKS:
        return (
            f"{pool} with /{mask} blocks exceeds 65536 blocks "
            "(mask - prefix length must be at most 16)"
        )
    return ""


# ---------------------------------------------------------------- start-up line


def startup_fields(options: IpamOptions) -> dict[str, str]:
    """The effective configuration, logged at INFO at start-up."""
    election = options.election
    return {
        "leader_election": str(election.enabled).lower(),
        "lease": f"{election.namespace or '-'}/{election.lease_name}",
        "lock": election.lock,
        "lease_duration": format_go_duration(election.lease_duration),
        "renew_deadline": format_go_duration(election.renew_deadline),
        "retry_period": format_go_duration(election.retry_period),
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
