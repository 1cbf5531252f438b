"""The node-lifecycle-controller's command line: every flag of the
original and the new ones, and a loader that validates them all at once
into a frozen :class:`LifecycleOptions`.

Pure, no I/O: argv and the environment are parameters. Credentials are resolved later by the
composition root (`local_ccm.lifecycle.main`), so validation never touches a file or the API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from local_ccm import names
from local_ccm.flags import (
    Parsed,
    Problem,
    format_go_duration,
    go_quote,
    invalid,
    parse,
)
from local_ccm.flagvalues import bind_address, checked, choice
from local_ccm.lease.election import JITTER_FACTOR
from local_ccm.lifecycle.core.health import Protection, Scope, parse_protected
from local_ccm.lifecycle.core.model import ICMP, Family, ProbeKind, resolve_kinds, tcp
from local_ccm.lifecycle.core.state import DEFAULT_MAX_UNHEALTHY, PipelineSettings
from local_ccm.lifecycle.flagset import FLAGS, MINUTE
from local_ccm.lifecycle.probe import IcmpMode, ProbeConfig
from local_ccm.validate import (
    BindAddress,
    CountOrPercent,
    LabelSelector,
    ValidationError,
    dns1123_label,
    dns1123_subdomain,
    parse_count_or_percent,
    parse_label_selector,
    split_list,
)

T = TypeVar("T")
LogFormat = Literal["text", "json"]

MAX_VERBOSITY = 5
_FORMATS: Mapping[str, LogFormat] = {"text": "text", "json": "json"}
_ICMP_MODES: Mapping[str, IcmpMode] = {"auto": "auto", "raw": "raw", "datagram": "datagram"}
_FAMILIES: Mapping[str, Family] = {"ipv4": "ipv4", "ipv6": "ipv6"}
_POSITIVE_DURATIONS = (
    "not-ready-timeout", "ping-timeout", "ping-interval", "reconcile-interval",
    "out-of-service-timeout", "leader-elect-lease-duration", "leader-elect-renew-deadline",
    "leader-elect-retry-period",
)  # fmt: skip


@dataclass(frozen=True)
class Election:
    """`--leader-elect*` in seconds; `enabled` False means act at once, no Lease."""

    enabled: bool = True
    lease_name: str = names.LIFECYCLE
    namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = ""  # "" = POD_NAME or the hostname plus a random suffix, at start-up


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
    def dry_run(self) -> bool:
        return self.settings.dry_run

    @property
    def unprobed(self) -> bool:
        return self.settings.unprobed


def load_options(argv: Sequence[str], env: Mapping[str, str]) -> LifecycleOptions | list[Problem]:
    """Parse and validate `argv` (without the program name); every problem at once."""
    return options_from(parse(FLAGS, argv, env))


def options_from(parsed: Parsed) -> LifecycleOptions | list[Problem]:
    """Validate an already parsed command line (main handles --help first)."""
    problems = list(parsed.problems)
    durations = {flag: _positive_duration(parsed, flag, problems) for flag in _POSITIVE_DURATIONS}
    ping_count = _int_at_least(parsed, "ping-count", 0, problems)
    kinds = _probe_kinds(parsed, ping_count, problems)
    selector = _selector(parsed, problems)
    settings = PipelineSettings(
        interval=durations["reconcile-interval"],
        max_unhealthy=_max_unhealthy(parsed, problems),
        max_deletions=_int_at_least(parsed, "max-deletions-per-interval", 1, problems),
        kinds=kinds,
        probe_all_addresses=parsed.get_bool("probe-all-addresses"),
        families=_families(parsed, problems),
        self_check=parsed.get_bool("self-check"),
        self_check_sample=_int_at_least(parsed, "self-check-sample", 1, problems),
        dry_run=parsed.get_bool("dry-run"),
        out_of_service_taint=parsed.get_bool("out-of-service-taint"),
    )
    probe = ProbeConfig(
        count=ping_count,
        interval=durations["ping-interval"],
        timeout=durations["ping-timeout"],
        concurrency=_int_at_least(parsed, "probe-concurrency", 1, problems),
    )
    scope = Scope(
        selector=selector,
        watch_autoscaler_taint=parsed.get_bool("watch-autoscaler-taint"),
        protected=_protected(parsed, problems),
        own_node=parsed.get_str("node-name") or None,
    )
    options = LifecycleOptions(
        scope=scope,
        settings=settings,
        probe=probe,
        election=_election(parsed, durations, problems),
        kubeconfig=parsed.get_str("kubeconfig"),
        node_selector=str(selector) if selector is not None else "",
        not_ready_timeout=durations["not-ready-timeout"],
        icmp_mode=choice(parsed, "icmp-mode", _ICMP_MODES, problems) or "auto",
        out_of_service_timeout=durations["out-of-service-timeout"],
        metrics_bind=bind_address(parsed, "metrics-bind-address", problems),
        health_bind=bind_address(parsed, "health-probe-bind-address", problems),
        metrics_address=parsed.get_str("metrics-bind-address"),
        health_address=parsed.get_str("health-probe-bind-address"),
        metrics_secure=_metrics_secure(parsed, problems),
        metrics_cert_dir=parsed.get_str("metrics-cert-dir"),
        log_format=choice(parsed, "log-format", _FORMATS, problems) or "text",
        verbosity=_verbosity(parsed, problems),
        event_namespace=checked(parsed, "event-namespace", dns1123_label, problems),
        ignored_klog=parsed.ignored_klog,
        warnings=_warnings(probe, kinds),
    )
    return problems or options


# ---------------------------------------------------------------- metrics


def _metrics_secure(parsed: Parsed, problems: list[Problem]) -> bool:
    """HTTPS metrics cannot share the port of the plain-HTTP health probes."""
    secure = parsed.get_bool("metrics-secure")
    metrics = parsed.get_str("metrics-bind-address")
    if secure and metrics != "0" and metrics == parsed.get_str("health-probe-bind-address"):
        problems.append(invalid("metrics-bind-address", "must differ from "
                                "--health-probe-bind-address with --metrics-secure=true (the "
                                "probes stay plain HTTP)"))  # fmt: skip
    return secure


# ---------------------------------------------------------------- numbers and durations


def _positive_duration(parsed: Parsed, flag: str, problems: list[Problem]) -> float:
    """A duration > 0. [fix] The original panicked on a zero --reconcile-interval."""
    value = parsed.get_float(flag)
    if value <= 0:
        problems.append(invalid(flag, f"must be greater than 0, got {format_go_duration(value)}"))
    return value


def _int_at_least(parsed: Parsed, flag: str, low: int, problems: list[Problem]) -> int:
    """An integer >= `low`. [fix] The original treated a negative --ping-count as 0."""
    value = parsed.get_int(flag)
    if value < low:
        problems.append(invalid(flag, f"must be at least {low}, got {value}"))
        return low
    return value


def _verbosity(parsed: Parsed, problems: list[Problem]) -> int:
    value = parsed.get_int("v")
    if value < 0:
        problems.append(invalid("v", f"must be 0 or more, got {value}"))
        return 0
    return min(value, MAX_VERBOSITY)


def _max_unhealthy(parsed: Parsed, problems: list[Problem]) -> CountOrPercent:
    """An integer >= 0, or an integer percentage 0%-100%."""
    try:
        return parse_count_or_percent(parsed.get_str("max-unhealthy"))
    except ValidationError as err:
        problems.append(invalid("max-unhealthy", str(err)))
        return DEFAULT_MAX_UNHEALTHY


def _election(parsed: Parsed, durations: Mapping[str, float], problems: list[Problem]) -> Election:
    """Client-go's ordering of the three lease durations."""
    lease = durations["leader-elect-lease-duration"]
    renew = durations["leader-elect-renew-deadline"]
    retry = durations["leader-elect-retry-period"]
    if min(lease, renew, retry) > 0:  # a non-positive one is already reported
        if not lease > renew:
            problems.append(invalid("leader-elect-lease-duration", (
                f"must be greater than --leader-elect-renew-deadline ({format_go_duration(renew)})"
                f", got {format_go_duration(lease)}")))  # fmt: skip
        if not renew > JITTER_FACTOR * retry:
            problems.append(invalid("leader-elect-renew-deadline", (
                f"must be greater than {JITTER_FACTOR} × --leader-elect-retry-period "
                f"({format_go_duration(retry)}), got {format_go_duration(renew)}")))  # fmt: skip
    lock = parsed.get_str("leader-elect-resource-lock")
    if lock != "leases":  # the only lock client-go still has that this controller writes
        problems.append(invalid("leader-elect-resource-lock", f"{go_quote(lock)}: only leases"))
    return Election(
        enabled=parsed.get_bool("leader-elect"),
        lease_name=checked(parsed, "leader-elect-resource-name", dns1123_subdomain, problems),
        namespace=checked(parsed, "leader-elect-resource-namespace", dns1123_label, problems),
        lease_duration=lease,
        renew_deadline=renew,
        retry_period=retry,
        identity=parsed.get_str("leader-elect-identity"),
    )


# ---------------------------------------------------------------- probes


def _probe_kinds(parsed: Parsed, ping_count: int, problems: list[Problem]) -> tuple[ProbeKind, ...]:
    """`none` alone; `icmp` given together with --ping-count=0 is a contradiction; an unset
    --probe with --ping-count=0 is unprobed mode (the original's documented meaning, kept so a
    working manifest does not become a crash loop)."""
    text = parsed.get_str("probe")
    items = split_list(text)
    if not items:
        problems.append(invalid("probe", f"{go_quote(text)}: list icmp, tcp:<port> or none"))
        return resolve_kinds(None, ping_count)
    if "none" in items:
        if len(items) > 1:
            problems.append(invalid("probe", f"{go_quote(text)}: none must be the only value"))
        return ()
    kinds: list[ProbeKind] = []
    for item in items:
        kind = _probe_kind(item, problems)
        if kind is not None and kind not in kinds:
            kinds.append(kind)
    explicit = "probe" in parsed.explicit
    if explicit and ICMP in kinds and ping_count == 0:
        problems.append(invalid("probe", "icmp contradicts --ping-count=0 (no echo to send)"))
    return resolve_kinds(tuple(kinds) if explicit else None, ping_count)


def _probe_kind(item: str, problems: list[Problem]) -> ProbeKind | None:
    if item == "icmp":
        return ICMP
    name, colon, port = item.partition(":")
    if name == "tcp" and colon and port.isdigit() and 1 <= int(port) <= 65535:
        return tcp(int(port))
    problems.append(invalid("probe", f"{go_quote(item)} is not icmp, tcp:<port 1-65535> or none"))
    return None


def _families(parsed: Parsed, problems: list[Problem]) -> tuple[Family, ...]:
    """A non-empty subset of ipv4, ipv6."""
    text = parsed.get_str("probe-families")
    families: list[Family] = []
    for item in split_list(text):
        if item not in _FAMILIES:
            problems.append(invalid("probe-families", f"{go_quote(item)} is not ipv4 or ipv6"))
        elif _FAMILIES[item] not in families:
            families.append(_FAMILIES[item])
    if not split_list(text):
        problems.append(invalid("probe-families", "must name ipv4, ipv6 or both"))
    return tuple(families) or ("ipv4", "ipv6")


def _warnings(probe: ProbeConfig, kinds: Sequence[ProbeKind]) -> tuple[str, ...]:
    """Echoes that can never be sent are a warning, not an error [compat]."""
    if ICMP in kinds and (probe.count - 1) * probe.interval >= probe.timeout > 0:
        return (
            f"--ping-count={probe.count} echoes {format_go_duration(probe.interval)} apart do "
            f"not fit in --ping-timeout={format_go_duration(probe.timeout)}: later echoes are "
            "never sent",
        )
    return ()


# ---------------------------------------------------------------- names and selectors


def _selector(parsed: Parsed, problems: list[Problem]) -> LabelSelector | None:
    """A label selector. [fix] The original sent an invalid selector to the server every tick."""
    text = parsed.get_str("node-selector")
    if not text.strip():
        return None
    try:
        return parse_label_selector(text)
    except ValidationError as err:
        problems.append(invalid("node-selector", str(err)))
        return None


def _protected(parsed: Parsed, problems: list[Problem]) -> tuple[Protection, ...]:
    """Qualified label keys. [fix] A typo in a safety list must not silently protect nothing."""
    entries: list[Protection] = []
    for item in split_list(parsed.get_str("protected-labels")):
        try:
            entries.extend(parse_protected(item))
        except ValidationError as err:
            problems.append(invalid("protected-labels", str(err)))
    return tuple(entries)


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
        "leader_elect": str(election.enabled).lower(),
        "lease": f"{election.namespace}/{election.lease_name}",
        "node_name": scope.own_node or "-",
        "event_namespace": options.event_namespace,
        "metrics": str(options.metrics_bind or "off"),
        "metrics_secure": str(options.metrics_secure).lower(),
        "health": str(options.health_bind or "off"),
    }
