"""The agent's command line: every flag of the original agent (with its names, types and
defaults, so existing manifests keep working) and the new ones, each declared once with its
parser, and a loader that validates them all at once (so an operator sees every mistake in one
run) into a frozen :class:`AgentOptions`.

Pure, no I/O, except for two injected seams: the ``ConfigResolver`` of the credentials check,
which reads the kubeconfig or service-account files but never contacts the API, and the
``RulesOpener`` of ``--metadata-rules``, so that an invalid rules file is reported with the
other invalid flags. Unit tests pass fakes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import ip_address
from typing import Literal, Protocol

from local_ccm import __version__, names
from local_ccm.agent.core.config import (
    DEFAULT_INTERFACE_EXCLUDE,
    AgentConfig,
    IPAddress,
    IPNetwork,
    TypeSettings,
    family_name,
)
from local_ccm.agent.core.metadata import DEFAULT_LABEL_DOMAIN
from local_ccm.agent.rulesfile import RulesFile
from local_ccm.agent.values import (
    parse_family_order,
    parse_provider_id,
    parse_selection,
    parse_subnet,
    parse_targets,
)
from local_ccm.flags import Flag, FlagSet, Loader, Parsed, Problem, invalid, missing
from local_ccm.flags.groups import logging_flags
from local_ccm.flags.values import LOG_FORMATS, LogFormat, choice, duration
from local_ccm.gosyntax import format_go_duration
from local_ccm.ifnames import parse_glob
from local_ccm.kube.config import ClusterConfig, ConfigError, resolve_config
from local_ccm.lease.election import election_problems
from local_ccm.records import dataclass
from local_ccm.validate import (
    BindAddress,
    ValidationError,
    dns1123_label,
    dns1123_subdomain,
    each,
    parse_bind_address,
    parse_node_name,
)

PROG = names.AGENT
DETECT = "detect"
MINUTE = 60.0
Mode = Literal["loop", "run-once", "detect"]


_GLOBS = each(parse_glob)


def _address_flags(kind: str, target: str) -> list[Flag]:
    """Where InternalIPs or ExternalIPs come from: route lookups, allowed ranges, interfaces."""
    name = f"{kind.capitalize()}IP"
    return [
        Flag(f"{kind}-ip-target", "string", target, f"Route-lookup targets for {name}, at most "
             f"one per family. Empty: no route-based {name} detection.", metavar="IPs",
             value=parse_targets),
        Flag(f"{kind}-ip-cidrs", "string", "", f"Allowed ranges for {name}; a '!' prefix "
             "excludes (e.g. 10.0.0.0/8,!10.96.0.0/12).", metavar="CIDRs", value=parse_selection),
        Flag(f"{kind}-ip-interfaces", "string", "", f"Interface globs allowed for {name} "
             "(empty: all).", metavar="globs", value=_GLOBS),
    ]  # fmt: skip


_BIND = parse_bind_address
L2 = "l2-announce"
L2_FLAGS = [
    Flag(L2, "bool", False, "Answer ARP and NDP for the LoadBalancer addresses of pools with "
         "spec.l2Announcement, one Node per address by a Lease (docs/l2-announcement.md); "
         "needs CAP_NET_RAW."),
    Flag("l2-lease-namespace", "string", "kube-system", "Namespace of the address Leases "
         "(l2-<address>); every agent must use the same.", metavar="namespace",
         value=dns1123_label),
    Flag("l2-lb-class", "string", "lb.local-ccm.io/pools", "The spec.loadBalancerClass "
         "service-lb-ipam serves (its --lb-class).", metavar="class"),
    Flag("l2-lb-classless", "bool", True, "Also announce Services without a "
         "loadBalancerClass (service-lb-ipam's --lb-classless)."),
    Flag("l2-lease-duration", "duration", 6, "Address Lease duration: others take an address "
         "over this long (plus 1s) after its holder's last renewal.", value=duration(1.0)),
    Flag("l2-renew-deadline", "duration", 4, "A holder answers until this long after its "
         "last successful renewal (< --l2-lease-duration).", value=duration(1.0)),
    Flag("l2-renew-period", "duration", 2, "A holder renews this often (renew deadline > "
         "1.2 x this).", value=duration(0.1)),
]  # fmt: skip
FLAGS = FlagSet(
    PROG,
    [
        # Flags of the original [compat]
        Flag("node-name", "string", "", "Node to manage (required except in detect mode).",
             env=("NODE_NAME",), value=parse_node_name),
        Flag("kubeconfig", "string", "", "Kubeconfig file. Empty: in-cluster config, else "
             "$KUBECONFIG, else ~/.kube/config.", metavar="path"),
        *_address_flags("internal", ""),
        *_address_flags("external", "8.8.8.8"),
        Flag("remove-taint", "bool", True, "Remove the node.cloudprovider.kubernetes.io/"
             "uninitialized taint."),
        Flag("reconcile-interval", "duration", 10, "Period of local re-detection (>= 1s).",
             value=duration(1.0)),
        Flag("run-once", "bool", False, "One pass, then exit 0 (done) or 1."),
        Flag("enable-azure-provider-id", "bool", False, "Set spec.providerID from Azure IMDS."),
        *logging_flags(),
        # New flags [beyond]
        Flag("external-ip-subnet", "string", "", "Alias appended to --external-ip-cidrs.",
             metavar="CIDR", value=parse_subnet),
        Flag("interface-exclude", "string", ",".join(DEFAULT_INTERFACE_EXCLUDE),
             "Interface globs never used; setting it replaces the default list.",
             metavar="globs", value=_GLOBS),
        Flag("include-vips", "bool", False, "Allow host-prefix VIPs and IPv4 secondary "
             "addresses as candidates."),
        Flag("ip-family-order", "string", "", "ipv4,ipv6 or ipv6,ipv4. Empty: the family of "
             "the provided-node-ip annotation's first address first, else ipv4 first.",
             metavar="families", value=parse_family_order),
        Flag("provided-node-ip-policy", "string", "prefer", "prefer, strict or ignore.",
             metavar="policy", value=choice("prefer", "strict", "ignore")),
        Flag("dedupe-external-ip", "bool", True, "Do not write an ExternalIP equal to an "
             "InternalIP."),
        Flag("require-internal-ip", "bool", False, "Taint removal needs an InternalIP."),
        Flag("provider-id", "string", "", "spec.providerID template with {node_name}, "
             "{system_uuid}, {machine_id} (e.g. local://{system_uuid}).", metavar="template",
             value=parse_provider_id),
        Flag("report-condition", "bool", True, "Maintain the LocalCCMAddressesSynced "
             "condition."),
        Flag("resync-interval", "duration", 30 * MINUTE, "Full pass: kernel state "
             "re-read even without a netlink notification, Node from the watch "
             "(>= 1m, >= --reconcile-interval).", value=duration(MINUTE)),
        Flag("settle-time", "duration", 5, "A changed address must be stable this long "
             "(0-5m).", value=duration(0.0, 5 * MINUTE)),
        Flag("api-timeout", "duration", 15, "Timeout of one API request (>= 1s).",
             value=duration(1.0)),
        Flag("event-namespace", "string", "default", "Namespace for Events about the Node.",
             metavar="namespace", value=dns1123_label),
        Flag("metrics-bind-address", "string", "127.0.0.1:8092", "Address of /metrics; 0 "
             "disables.", metavar="host:port", value=_BIND),
        Flag("health-probe-bind-address", "string", "127.0.0.1:8093", "Address of /healthz "
             "and /readyz; 0 disables.", metavar="host:port", value=_BIND),
        Flag("detect-only", "bool", False, "Same as the detect sub-command: print what would "
             "be written, write nothing."),
        Flag("output", "string", "text", "Detect mode output: text or json.",
             metavar="format", value=choice(*LOG_FORMATS)),
        Flag("metadata", "bool", True, "Maintain zone, region, instance-type and rule labels "
             "on the Node (docs/metadata.md)."),
        Flag("metadata-rules", "string", "", "Node metadata rules file (YAML). Empty: only "
             "the instance type from DMI.", metavar="path"),
        Flag("metadata-beta-labels", "bool", False, "Also write the deprecated failure-domain."
             "beta.kubernetes.io/zone|region and beta.kubernetes.io/instance-type labels."),
        Flag("metadata-label-domains", "string", DEFAULT_LABEL_DOMAIN, "Domains (and their "
             "subdomains) of the extra labels rules may set.", metavar="domains",
             value=each(dns1123_subdomain)),
        *L2_FLAGS,
    ],
    subcommands=frozenset({DETECT}),
    version=__version__,
)  # fmt: skip
# AgentOptions fields named unlike their flags.
_OPTIONS_FLAGS = {"metrics_bind": "metrics-bind-address", "verbosity": "v",
                  "health_bind": "health-probe-bind-address",
                  "azure_provider_id": "enable-azure-provider-id"}  # fmt: skip
DEFAULT_METRICS_BIND = BindAddress(ip_address("127.0.0.1"), 8092)
DEFAULT_HEALTH_BIND = BindAddress(ip_address("127.0.0.1"), 8093)


@dataclass(frozen=True)
class MetadataOptions:
    """The node metadata flags; ``rules`` is the opened --metadata-rules file, if any."""

    rules: RulesFile | None = None
    beta_labels: bool = False
    label_domains: tuple[str, ...] = (DEFAULT_LABEL_DOMAIN,)


@dataclass(frozen=True)
class L2Options:
    """--l2-announce's settings; the timings are checked by leader election's rules."""

    lease_namespace: str = "kube-system"
    lb_class: str = "lb.local-ccm.io/pools"
    classless: bool = True
    lease_duration: float = 6.0
    renew_deadline: float = 4.0
    renew_period: float = 2.0


@dataclass(frozen=True)
class AgentOptions:
    """The validated command line. ``config`` is what detection and the pure core consume."""

    config: AgentConfig
    node_name: str | None  # None only in detect mode without --node-name / NODE_NAME
    kubeconfig: str = ""  # the --kubeconfig flag as given ("" = default resolution)
    cluster: ClusterConfig | None = None  # resolved credentials; None only in detect mode
    credentials_error: str | None = None  # why ``cluster`` is None (detect mode)
    reconcile_interval: float = 10.0  # seconds, like every duration below
    resync_interval: float = 30 * MINUTE
    settle_time: float = 5.0
    api_timeout: float = 15.0
    metrics_bind: BindAddress | None = DEFAULT_METRICS_BIND  # None: disabled ("0")
    health_bind: BindAddress | None = DEFAULT_HEALTH_BIND
    log_format: LogFormat = "text"
    verbosity: int = 0  # 0-5; larger values were clamped to 5
    run_once: bool = False
    detect: bool = False  # `local-ccm detect` or --detect-only
    output: LogFormat = "text"  # detect mode only
    provider_id: str = ""  # --provider-id template; "" = none
    azure_provider_id: bool = False
    event_namespace: str = "default"
    ignored_klog: tuple[str, ...] = ()  # klog flags given (accepted and ignored)
    metadata: MetadataOptions | None = MetadataOptions()  # None: --metadata=false
    l2: L2Options | None = None  # None: no --l2-announce

    @property
    def remove_taint(self) -> bool:
        """--remove-taint, kept in the configuration the pure core reads."""
        return self.config.remove_taint

    @property
    def mode(self) -> Mode:
        return "detect" if self.detect else "run-once" if self.run_once else "loop"

    @property
    def report_condition(self) -> bool:
        """--report-condition, kept in the configuration the pure core reads."""
        return self.config.report_condition


class ConfigResolver(Protocol):
    """``resolve_config``'s shape: raises ``ConfigError`` when no usable config exists."""

    def __call__(
        self, kubeconfig: str, apiserver: str, env: Mapping[str, str]
    ) -> ClusterConfig: ...


class RulesOpener(Protocol):
    """``RulesFile.open``'s shape: the opened file, or every problem with it."""

    def __call__(self, path: str, label_domains: Sequence[str]) -> RulesFile | list[str]: ...


def options_from(
    parsed: Parsed,
    env: Mapping[str, str],
    *,
    resolve: ConfigResolver | None = None,
    open_rules: RulesOpener | None = None,
) -> AgentOptions | list[Problem]:
    """Validate an already parsed command line (the CLI handles --help/--version first).
    ``resolve`` defaults to ``local_ccm.kube.config.resolve_config``, ``open_rules`` to
    ``RulesFile.open``."""
    read = Loader(parsed)
    detect = parsed.subcommand == DETECT or parsed.get_bool("detect-only")
    config = read.into(
        AgentConfig,
        {"family_order": "ip-family-order"},
        internal=_type_settings(read, "internal-ip"),
        external=_type_settings(read, "external-ip"),
    )
    node_name = _required_node_name(read, detect)
    cluster, error = _credentials(read, env, detect, node_name, resolve or resolve_config)
    reconcile, resync = _intervals(read)
    provider_id = _checked_provider_id(read)
    _check_modes(read, detect)
    options = read.into(
        AgentOptions, _OPTIONS_FLAGS, config=config, node_name=node_name or None,
        cluster=cluster, credentials_error=error, reconcile_interval=reconcile,
        resync_interval=resync, detect=detect, provider_id=provider_id,
        ignored_klog=parsed.ignored_klog,
        metadata=_metadata(read, open_rules or RulesFile.open), l2=_l2(read, detect),
    )  # fmt: skip
    return read.result(options)


# ---------------------------------------------------------------- detection settings


def _type_settings(read: Loader, prefix: str) -> TypeSettings:
    targets: tuple[IPAddress, ...] = read(f"{prefix}-target")
    include, exclude = read(f"{prefix}-cidrs")
    if prefix == "external-ip":
        include += read("external-ip-subnet")
    if f"{prefix}-target" not in read.failed:  # a bad target is reported once, not twice
        _check_exclusions(read, prefix, targets, include, exclude)
    return TypeSettings(targets, include, exclude, read(f"{prefix}-interfaces"))


def _check_exclusions(
    read: Loader,
    prefix: str,
    targets: Sequence[IPAddress],
    include: Sequence[IPNetwork],
    exclude: Sequence[IPNetwork],
) -> None:
    """Exclusions alone select nothing: they only filter a target's source."""
    kind = "InternalIP" if prefix.startswith("internal") else "ExternalIP"
    for family in sorted({n.version for n in exclude}):
        if any(n.version == family for n in include) or any(t.version == family for t in targets):
            continue
        name = family_name(family)
        read.reject(f"{prefix}-cidrs", f"only exclusions for {name} and no {name} "
                    f"--{prefix}-target: nothing selects an {name} {kind} (add a positive "
                    f"{name} CIDR or a target)")  # fmt: skip


# ---------------------------------------------------------------- node and credentials


def _required_node_name(read: Loader, detect: bool) -> str:
    name: str = read("node-name")
    if not name and not detect and "node-name" not in read.failed:
        read.problems.append(missing("node-name", ("NODE_NAME",)))
    return name


def _credentials(
    read: Loader, env: Mapping[str, str], detect: bool, node_name: str, resolve: ConfigResolver
) -> tuple[ClusterConfig | None, str | None]:
    """Credentials must resolve. Detect mode without a Node needs no credentials, and with one
    they are optional (the plan is then skipped); an explicit --kubeconfig must always load."""
    kubeconfig: str = read("kubeconfig")
    if detect and not node_name and not kubeconfig:
        return None, None
    try:
        return resolve(kubeconfig, "", env), None
    except ConfigError as err:
        detail = str(err).removeprefix("no Kubernetes configuration: ")
    if kubeconfig:
        read.reject("kubeconfig", detail)
    elif not detect:
        read.problems.append(invalid(None, f"no Kubernetes credentials: {detail}"))
    return None, detail


def _intervals(read: Loader) -> tuple[float, float]:
    """--resync-interval is never shorter than --reconcile-interval."""
    reconcile, resync = read("reconcile-interval"), read("resync-interval")
    if resync < reconcile and not read.failed & {"reconcile-interval", "resync-interval"}:
        got = f"({format_go_duration(reconcile)}), got {format_go_duration(resync)}"
        read.reject("resync-interval", f"must be at least --reconcile-interval {got}")
    return reconcile, resync


def _checked_provider_id(read: Loader) -> str:
    template: str = read("provider-id")
    if template and read("enable-azure-provider-id"):
        read.reject("provider-id", "cannot be combined with --enable-azure-provider-id")
    return template


def _check_modes(read: Loader, detect: bool) -> None:
    """Flags that mean nothing in the chosen mode are mistakes, not silent no-ops."""
    if detect and read("run-once"):
        read.reject("run-once", "detect mode writes nothing; drop --run-once")
    if not detect and read.given("output"):
        read.reject("output", "only used in detect mode (local-ccm detect)")


def _metadata(read: Loader, open_rules: RulesOpener) -> MetadataOptions | None:
    """--metadata=false turns the feature off; a rules file that does not load is an invalid
    --metadata-rules, with every problem listed."""
    domains: tuple[str, ...] = read("metadata-label-domains")
    path: str = read("metadata-rules")
    if not read("metadata"):
        for name in ("metadata-rules", "metadata-beta-labels", "metadata-label-domains"):
            if read.given(name):  # a setting of a feature turned off is a mistake, not a no-op
                read.reject(name, "only used with --metadata=true")
        return None
    rules = None
    if path and "metadata-label-domains" not in read.failed:
        opened = open_rules(path, domains)
        if isinstance(opened, list):
            read.reject("metadata-rules", *opened)
        else:
            rules = opened
    return MetadataOptions(rules, read("metadata-beta-labels"), domains)


def _l2(read: Loader, detect: bool) -> L2Options | None:
    """--l2-announce and its settings: the timings by leader election's rules, the class a
    prefixed name; an --l2-* flag without --l2-announce is a mistake, not a no-op."""
    options = L2Options(
        read("l2-lease-namespace"), read("l2-lb-class"), read("l2-lb-classless"),
        read("l2-lease-duration"), read("l2-renew-deadline"), read("l2-renew-period"),
    )  # fmt: skip
    if not read(L2) or detect or read("run-once"):
        for flag in L2_FLAGS[1:]:
            if read.given(flag.name):
                read.reject(flag.name, "only used with --l2-announce in loop mode")
        if read(L2) and (detect or read("run-once")):
            read.reject(L2, "announcing runs in loop mode only (not detect or run-once)")
        return None
    from local_ccm.labels import load_balancer_class  # noqa: PLC0415 (with --l2-announce only)

    try:
        load_balancer_class(options.lb_class)
    except ValidationError as exc:
        read.reject("l2-lb-class", str(exc))
    timings = ("l2-lease-duration", "l2-renew-deadline", "l2-renew-period")
    if not read.failed & set(timings):
        problems = election_problems(options.lease_duration, options.renew_deadline,
                                     options.renew_period)  # fmt: skip
        for problem in problems:
            read.reject("l2-renew-deadline", problem)
    return options


# ---------------------------------------------------------------- start-up line


def startup_fields(options: AgentOptions) -> dict[str, str]:
    """Key/values of the INFO start-up line: targets, CIDRs, interfaces, policy, intervals."""
    config = options.config
    fields: dict[str, str] = {"mode": options.mode}
    for kind, settings in (("internal", config.internal), ("external", config.external)):
        fields[f"{kind}_targets"] = ",".join(map(str, settings.targets)) or "-"
        cidrs = [*map(str, settings.include), *(f"!{n}" for n in settings.exclude)]
        fields[f"{kind}_cidrs"] = ",".join(cidrs) or "-"
        fields[f"{kind}_interfaces"] = ",".join(settings.interfaces) or "*"
    fields["interface_exclude"] = ",".join(config.interface_exclude) or "-"
    order = config.family_order
    fields["family_order"] = ",".join(family_name(f) for f in order) if order else "auto"
    fields["provided_node_ip_policy"] = config.provided_node_ip_policy
    fields["reconcile_interval"] = format_go_duration(options.reconcile_interval)
    fields["resync_interval"] = format_go_duration(options.resync_interval)
    fields["settle_time"] = format_go_duration(options.settle_time)
    fields["metrics"] = str(options.metrics_bind or "off")
    fields["health"] = str(options.health_bind or "off")
    metadata = options.metadata
    rules = metadata and metadata.rules
    fields["metadata"] = str(rules.path) if rules else "dmi" if metadata else "off"
    fields["l2_announce"] = options.l2.lease_namespace if options.l2 else "off"
    return fields
