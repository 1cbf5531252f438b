"""The node-lifecycle-controller's command line: every flag of the original [compat] and the
new ones [beyond], each declared once with its parser, and a loader that validates them all at
once into a frozen :class:`LifecycleOptions`.

Pure, no I/O: argv and the environment are parameters. Credentials are resolved later by the
composition root (`local_ccm.cli.lifecycle`), so validation never touches a file or the API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from local_ccm import __version__, names
from local_ccm.flags import Flag, FlagSet, Loader, Parsed, Problem
from local_ccm.flags.groups import check_metrics_port, logging_flags, metrics_flags
from local_ccm.flags.values import LogFormat, at_least, choice, duration
from local_ccm.gosyntax import format_go_duration, go_quote
from local_ccm.labels import LabelSelector, parse_label_selector
from local_ccm.lease.options import Election, election_flags, election_from
from local_ccm.lifecycle.core.health import Protection, Scope, parse_protected
from local_ccm.lifecycle.core.model import ICMP, Family, ProbeKind, resolve_kinds, tcp
from local_ccm.lifecycle.core.state import DEFAULT_MAX_UNHEALTHY, PipelineSettings
from local_ccm.lifecycle.probe import IcmpMode, ProbeConfig
from local_ccm.records import dataclass
from local_ccm.validate import (
    BindAddress,
    ValidationError,
    dns1123_label,
    each,
    parse_bind_address,
    parse_count_or_percent,
    parse_families,
    parse_node_name,
    split_list,
)

PROG: Final = names.LIFECYCLE
BMC_FLAG: Final = "bmc-power-state"
FENCING_FLAG: Final = "bmc-fencing"
MINUTE: Final = 60.0
_FAMILIES: Mapping[str, Family] = {"ipv4": "ipv4", "ipv6": "ipv6"}
_POSITIVE = duration(strict=True)  # [fix] The original panicked on a zero --reconcile-interval.


def _selector(text: str) -> LabelSelector | None:
    """[fix] The original sent an invalid selector to the server every tick."""
    return parse_label_selector(text) if text.strip() else None


def _protected(text: str) -> tuple[Protection, ...]:
    """[fix] A typo in a safety list must not silently protect nothing."""
    return tuple(entry for entries in each(parse_protected)(text) for entry in entries)


def _probe_kinds(text: str) -> tuple[ProbeKind, ...]:
    """`icmp`, `tcp:<port>` (de-duplicated, in order), or `none` alone."""
    items = split_list(text)
    if not items:
        raise ValidationError(f"{go_quote(text)}: list icmp, tcp:<port> or none")
    if "none" in items:
        if len(items) > 1:
            raise ValidationError(f"{go_quote(text)}: none must be the only value")
        return ()
    return tuple(dict.fromkeys(each(_probe_kind)(text)))


def _probe_kind(item: str) -> ProbeKind:
    if item == "icmp":
        return ICMP
    name, colon, port = item.partition(":")
    if name == "tcp" and colon and port.isdigit() and 1 <= int(port) <= 65535:
        return tcp(int(port))
    raise ValidationError(f"{go_quote(item)} is not icmp, tcp:<port 1-65535> or none")


def _families(text: str) -> tuple[Family, ...]:
    """A non-empty subset of ipv4, ipv6."""
    families = parse_families(text)
    if not families:
        raise ValidationError("must name ipv4, ipv6 or both")
    return tuple(_FAMILIES[family] for family in families)


# Options fields named unlike their flags.
_SETTINGS_FLAGS = {"interval": "reconcile-interval", "families": "probe-families",
                   "max_deletions": "max-deletions-per-interval"}  # fmt: skip
_PROBE_FLAGS = {"count": "ping-count", "interval": "ping-interval", "timeout": "ping-timeout",
                "concurrency": "probe-concurrency"}  # fmt: skip
FLAGS = FlagSet(
    PROG,
    [
        # Flags of the original [compat]
        Flag("kubeconfig", "string", "", "Kubeconfig file. Empty: in-cluster config, else "
             "$KUBECONFIG, else ~/.kube/config.", metavar="path"),
        Flag("node-selector", "string", "", "Label selector of the managed Nodes; when set, "
             "the autoscaler-taint filter is ignored.", metavar="selector", value=_selector),
        Flag("watch-autoscaler-taint", "bool", True, "Without a selector, manage only Nodes "
             "tainted ToBeDeletedByClusterAutoscaler:NoSchedule."),
        Flag("protected-labels", "string", "", "Comma-separated key or key=value; a matching "
             "label or annotation protects a Node.", metavar="list", value=_protected),
        Flag("not-ready-timeout", "duration", 5 * MINUTE, "Minimum NotReady age (since the "
             "Ready condition's lastTransitionTime) before probing.", value=_POSITIVE),
        Flag("ping-timeout", "duration", 5.0, "Upper bound of one probe of one address.",
             value=_POSITIVE),
        # [fix] The original treated a negative --ping-count as 0.
        Flag("ping-count", "int", 3, "ICMP echo requests per address; 0 = no ICMP probe "
             "(without --probe: delete on NotReady alone).", value=at_least(0)),
        Flag("reconcile-interval", "duration", 30.0, "Re-evaluation period, probe gap and "
             "rate-limit window.", value=_POSITIVE),
        # The original's --leader-elect-id (Lease name) and --namespace (Lease namespace) are
        # aliases of kube-controller-manager's names, which every binary of this image accepts.
        *election_flags(
            names.LIFECYCLE,
            env={"leader-elect-resource-namespace": ("POD_NAMESPACE",)},
            aliases={"leader-elect-resource-name": ("leader-elect-id",),
                     "leader-elect-resource-namespace": ("namespace",)},
        ),
        Flag("dry-run", "bool", False, "Decide and log, never delete Nodes."),
        *logging_flags(),
        # New flags [beyond]
        Flag("max-unhealthy", "string", str(DEFAULT_MAX_UNHEALTHY), "Circuit breaker: N or P% "
             "unhealthy Nodes above which nothing is deleted.", metavar="N|P%",
             value=parse_count_or_percent),
        Flag("max-deletions-per-interval", "int", 1, "Deletions allowed per "
             "--reconcile-interval.", value=at_least(1)),
        Flag("probe", "string", "icmp", "Probe kinds: icmp, tcp:<port>, or none.",
             metavar="kinds", value=_probe_kinds),
        Flag("probe-all-addresses", "bool", False, "Probe every InternalIP and ExternalIP "
             "(default: InternalIPs, else ExternalIPs)."),
        Flag("probe-families", "string", "ipv4,ipv6", "Address families probed.",
             metavar="families", value=_families),
        Flag("ping-interval", "duration", 1.0, "Gap between ICMP echoes of one probe.",
             value=_POSITIVE),
        Flag("icmp-mode", "string", "auto", "raw, datagram or auto.", metavar="mode",
             value=choice("auto", "raw", "datagram")),
        Flag("probe-concurrency", "int", 64, "Maximum concurrently running probes.",
             value=at_least(1)),
        Flag("self-check", "bool", True, "Probe Ready peers before deleting (self-partition "
             "check)."),
        Flag("self-check-sample", "int", 3, "Ready peer Nodes probed by the self-check.",
             value=at_least(1)),
        Flag("node-name", "string", "", "The Node this controller runs on: never deleted, "
             "never a self-check peer.", env=("NODE_NAME",), metavar="name", value=parse_node_name),
        Flag("out-of-service-taint", "bool", False, "Taint node.kubernetes.io/out-of-service "
             "before deleting."),
        Flag("out-of-service-timeout", "duration", 5 * MINUTE, "Longest wait for "
             "VolumeAttachments after tainting.", value=_POSITIVE),
        Flag(BMC_FLAG, "bool", False, "Act on what NodeBMCs report (docs/bmc.md): a System "
             "absent deletes its NotReady Node; the out-of-service taint waits for Off. "
             "local-ccm-controller-manager: on by default when node-bmc runs too."),
        Flag("bmc-max-age", "duration", 2 * MINUTE, "A NodeBMC whose lastContact is older "
             "tells nothing.", value=_POSITIVE),
        Flag(FENCING_FLAG, "bool", False, "Power off (ForceOff, through node-bmc) a Node "
             "NotReady and unreachable past --not-ready-timeout whose BMC still reads On, "
             "before its out-of-service taint. Needs --bmc-power-state and "
             "--out-of-service-taint."),
        *metrics_flags(":8090", "Address of /metrics; 0 disables."),
        Flag("health-probe-bind-address", "string", ":8091", "Address of /healthz and "
             "/readyz; 0 disables.", metavar="host:port", value=parse_bind_address),
        Flag("event-namespace", "string", "default", "Namespace of Events about Nodes.",
             metavar="namespace", value=dns1123_label),
    ],
    # [beyond] The original had no --version; every binary of this image prints one.
    version=__version__,
)  # fmt: skip


@dataclass(frozen=True)
class LifecycleOptions:
    """The validated command line; `settings`, `scope` and `probe` feed the pure core."""

    scope: Scope
    settings: PipelineSettings
    probe: ProbeConfig
    election: Election
    kubeconfig: str = ""
    node_selector: str = ""  # canonical form, usable as the watch's labelSelector
    not_ready_timeout: float = 5 * MINUTE
    icmp_mode: IcmpMode = "auto"
    out_of_service_timeout: float = 5 * MINUTE
    metrics_bind: BindAddress | None = None  # None: disabled ("0")
    health_bind: BindAddress | None = None
    metrics_address: str = ":8090"  # as given, for serve.start_servers
    health_address: str = ":8091"
    metrics_secure: bool = True  # HTTPS + TokenReview/SubjectAccessReview
    metrics_cert_dir: str = ""  # empty: self-signed at start-up
    log_format: LogFormat = "text"
    verbosity: int = 0
    event_namespace: str = "default"
    ignored_klog: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # logged at start-up, not errors

    @property
    def interval(self) -> float:
        return self.settings.interval

    @property
    def unprobed(self) -> bool:
        return not self.settings.kinds

    @property
    def dry_run(self) -> bool:
        return self.settings.dry_run


def options_from(parsed: Parsed) -> LifecycleOptions | list[Problem]:
    """Validate an already parsed command line (main handles --help first)."""
    read = Loader(parsed)
    settings = read.into(PipelineSettings, _SETTINGS_FLAGS, kinds=_kinds(read))
    probe = read.into(ProbeConfig, _PROBE_FLAGS)
    selector: LabelSelector | None = read("node-selector")
    metrics, health = read("metrics-bind-address"), read("health-probe-bind-address")
    check_metrics_port(read, metrics, health, "health-probe-bind-address")
    own_node = read("node-name") or None
    scope = Scope(selector, read("watch-autoscaler-taint"), read("protected-labels"), own_node)
    options = read.into(
        LifecycleOptions, {"verbosity": "v"}, scope=scope, settings=settings, probe=probe,
        election=election_from(read), node_selector=str(selector or ""), metrics_bind=metrics,
        health_bind=health, metrics_address=parsed.get_str("metrics-bind-address"),
        health_address=parsed.get_str("health-probe-bind-address"),
        ignored_klog=parsed.ignored_klog,
        warnings=_warnings(probe, settings.kinds) + _own_node_warning(settings, own_node),
    )  # fmt: skip
    return read.result(options)


def with_bmc(
    options: LifecycleOptions, parsed: Parsed, *, default: bool = False
) -> LifecycleOptions | list[Problem]:
    """`--bmc-power-state` as given, else `default` (the manager's: whether node-bmc runs
    too), and `--bmc-fencing` checked against it: fencing powers a machine off only to taint
    its Node out-of-service, and learns the power state only from NodeBMCs."""
    read = Loader(parsed)
    settings = options.settings
    power = settings.bmc_power_state if read.given(BMC_FLAG) else default
    if settings.bmc_fencing and not power:
        read.reject(FENCING_FLAG, f"needs --{BMC_FLAG} (the power state is read from NodeBMCs)")
    if settings.bmc_fencing and not settings.out_of_service_taint:
        read.reject(FENCING_FLAG, "needs --out-of-service-taint (a Node is powered off to be "
                    "tainted out-of-service)")  # fmt: skip
    new = replace(settings, bmc_power_state=power)
    return read.result(replace(options, settings=new))


def _kinds(read: Loader) -> tuple[ProbeKind, ...]:
    """An unset --probe with --ping-count=0 is unprobed mode (the original's documented meaning,
    kept so a working manifest does not become a crash loop); `icmp` given together with
    --ping-count=0 is a contradiction."""
    ping_count: int = read("ping-count")
    kinds: tuple[ProbeKind, ...] = read("probe")
    explicit = read.given("probe") and "probe" not in read.failed
    if explicit and ICMP in kinds and ping_count == 0:
        read.reject("probe", "icmp contradicts --ping-count=0 (no echo to send)")
    return resolve_kinds(kinds if explicit else None, ping_count)


def _warnings(probe: ProbeConfig, kinds: Sequence[ProbeKind]) -> tuple[str, ...]:
    """Echoes that can never be sent are a warning, not an error [compat]."""
    if ICMP in kinds and (probe.count - 1) * probe.interval >= probe.timeout > 0:
        return (
            f"--ping-count={probe.count} echoes {format_go_duration(probe.interval)} apart do "
            f"not fit in --ping-timeout={format_go_duration(probe.timeout)}: later echoes are "
            "never sent",
        )
    return ()


def _own_node_warning(settings: PipelineSettings, own_node: str | None) -> tuple[str, ...]:
    """Without --node-name the self-check may pick this controller's own Node as a peer, which
    always answers: a partition of the controller alone would then go unseen."""
    if own_node or not settings.self_check or not settings.kinds:
        return ()
    return ("--node-name (NODE_NAME) is not set: the self-check may probe this controller's own "
            "Node, which always answers, and miss a partition of the controller alone; set "
            "NODE_NAME from the downward API (fieldRef spec.nodeName)",)  # fmt: skip


# ---------------------------------------------------------------- start-up line [compat]


def startup_fields(options: LifecycleOptions) -> dict[str, str]:
    """Key/values of the one INFO line with the effective configuration."""
    settings, scope, probe = options.settings, options.scope, options.probe
    election = options.election
    return {
        "node_selector": options.node_selector or "-",
        "watch_autoscaler_taint": str(scope.watch_autoscaler_taint).lower(),
        "protected_labels": ",".join(map(str, scope.protected)) or "-",
        "not_ready_timeout": format_go_duration(options.not_ready_timeout),
        "reconcile_interval": format_go_duration(settings.interval),
        "probe": ",".join(map(str, settings.kinds)) or "none (unprobed mode)",
        "ping_count": str(probe.count),
        "ping_interval": format_go_duration(probe.interval),
        "ping_timeout": format_go_duration(probe.timeout),
        "icmp_mode": options.icmp_mode,
        "probe_families": ",".join(settings.families),
        "probe_all_addresses": str(settings.probe_all_addresses).lower(),
        "max_unhealthy": str(settings.max_unhealthy),
        "max_deletions_per_interval": str(settings.max_deletions),
        "self_check": str(settings.self_check).lower(),
        "dry_run": str(settings.dry_run).lower(),
        "out_of_service_taint": str(settings.out_of_service_taint).lower(),
        "bmc_power_state": str(settings.bmc_power_state).lower(),
        "bmc_fencing": str(settings.bmc_fencing).lower(),
        "leader_elect": str(election.enabled).lower(),
        "lease": f"{election.namespace}/{election.lease_name}",
        "node_name": scope.own_node or "-",
        "event_namespace": options.event_namespace,
        "metrics": str(options.metrics_bind or "off"),
        "metrics_secure": str(options.metrics_secure).lower(),
        "health": str(options.health_bind or "off"),
    }
