"""The agent's command line: every flag and a loader that validates them all at once (so an
operator sees every mistake in one run) into a frozen :class:`AgentOptions`.

Pure, no I/O, except for one injected seam: the credentials check calls a
``ConfigResolver`` (by default ``local_ccm.kube.config.resolve_config``), which reads the
kubeconfig or service-account files but never contacts the API. Unit tests pass a fake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Literal, Protocol, TypeVar

from local_ccm.agent.core.config import (
    AgentConfig,
    Family,
    IPAddress,
    IPNetwork,
    ProvidedPolicy,
    TypeSettings,
    family_name,
)
from local_ccm.agent.flagdefs import DETECT, FLAGS, MINUTE
from local_ccm.flags import (
    Parsed,
    Problem,
    format_go_duration,
    go_quote,
    invalid,
    invalid_env,
    missing,
    parse,
)
from local_ccm.flagvalues import bind_address, checked, choice
from local_ccm.kube.config import ClusterConfig, ConfigError, resolve_config
from local_ccm.validate import (
    BindAddress,
    ValidationError,
    dns1123_label,
    dns1123_subdomain,
    parse_cidr,
    parse_ip_target,
    split_list,
)

T = TypeVar("T")
LogFormat = Literal["text", "json"]
Output = Literal["text", "json"]
Mode = Literal["loop", "run-once", "detect"]

PROVIDER_ID_PLACEHOLDERS = ("node_name", "system_uuid", "machine_id")
IFNAMSIZ = 15  # Linux interface names have at most 15 characters
_KUBE_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_FAMILIES: Mapping[str, Family] = {"ipv4": 4, "ipv6": 6}
_POLICIES: Mapping[str, ProvidedPolicy] = {
    "prefer": "prefer",
    "strict": "strict",
    "ignore": "ignore",
}
_FORMATS: Mapping[str, LogFormat] = {"text": "text", "json": "json"}


DEFAULT_METRICS_BIND = BindAddress(ip_address("127.0.0.1"), 8092)
DEFAULT_HEALTH_BIND = BindAddress(ip_address("127.0.0.1"), 8093)


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
    output: Output = "text"  # detect mode only
    provider_id: str = ""  # --provider-id template; "" = none
    azure_provider_id: bool = False
    event_namespace: str = "default"
    ignored_klog: tuple[str, ...] = ()  # klog flags given (accepted and ignored)

    @property
    def mode(self) -> Mode:
        return "detect" if self.detect else "run-once" if self.run_once else "loop"

    @property
    def remove_taint(self) -> bool:
        return self.config.remove_taint

    @property
    def report_condition(self) -> bool:
        return self.config.report_condition


class ConfigResolver(Protocol):
    """``resolve_config``'s shape: raises ``ConfigError`` when no usable config exists."""

    def __call__(
        self, kubeconfig: str, apiserver: str, env: Mapping[str, str]
    ) -> ClusterConfig: ...


def load_options(
    argv: Sequence[str], env: Mapping[str, str], *, resolve: ConfigResolver | None = None
) -> AgentOptions | list[Problem]:
    """Parse and validate ``argv`` (without the program name); every problem at once."""
    return options_from(parse(FLAGS, argv, env), env, resolve=resolve)


def options_from(
    parsed: Parsed, env: Mapping[str, str], *, resolve: ConfigResolver | None = None
) -> AgentOptions | list[Problem]:
    """Validate an already parsed command line (the CLI handles --help/--version first).
    ``resolve`` defaults to ``local_ccm.kube.config.resolve_config``."""
    problems = list(parsed.problems)
    detect = parsed.subcommand == DETECT or parsed.get_bool("detect-only")
    config = _agent_config(parsed, problems)
    node_name = _node_name(parsed, detect, problems)
    cluster, credentials_error = _credentials(
        parsed,
        env,
        detect=detect,
        node_name=node_name,
        resolve=resolve or resolve_config,
        problems=problems,
    )
    reconcile = _duration(parsed, "reconcile-interval", 1.0, None, problems)
    resync = _duration(parsed, "resync-interval", max(MINUTE, reconcile), None, problems)
    provider_id = _provider_id(parsed, problems)
    _check_modes(parsed, detect, problems)
    options = AgentOptions(
        config=config,
        node_name=node_name,
        kubeconfig=parsed.get_str("kubeconfig"),
        cluster=cluster,
        credentials_error=credentials_error,
        reconcile_interval=reconcile,
        resync_interval=resync,
        settle_time=_duration(parsed, "settle-time", 0.0, 5 * MINUTE, problems),
        api_timeout=_duration(parsed, "api-timeout", 1.0, None, problems),
        metrics_bind=bind_address(parsed, "metrics-bind-address", problems),
        health_bind=bind_address(parsed, "health-probe-bind-address", problems),
        log_format=choice(parsed, "log-format", _FORMATS, problems) or "text",
        verbosity=_verbosity(parsed, problems),
        run_once=parsed.get_bool("run-once"),
        detect=detect,
        output=choice(parsed, "output", _FORMATS, problems) or "text",
        provider_id=provider_id,
        azure_provider_id=parsed.get_bool("enable-azure-provider-id"),
        event_namespace=checked(parsed, "event-namespace", dns1123_label, problems),
        ignored_klog=parsed.ignored_klog,
    )
    return problems or options


# ---------------------------------------------------------------- detection settings


def _agent_config(parsed: Parsed, problems: list[Problem]) -> AgentConfig:
    return AgentConfig(
        internal=_type_settings(parsed, "internal-ip", problems),
        external=_type_settings(parsed, "external-ip", problems),
        interface_exclude=_globs(parsed, "interface-exclude", problems),
        include_vips=parsed.get_bool("include-vips"),
        family_order=_family_order(parsed, problems),
        provided_node_ip_policy=choice(parsed, "provided-node-ip-policy", _POLICIES, problems)
        or "prefer",
        dedupe_external_ip=parsed.get_bool("dedupe-external-ip"),
        require_internal_ip=parsed.get_bool("require-internal-ip"),
        remove_taint=parsed.get_bool("remove-taint"),
        report_condition=parsed.get_bool("report-condition"),
    )


def _type_settings(parsed: Parsed, prefix: str, problems: list[Problem]) -> TypeSettings:
    before = len(problems)
    targets = _targets(parsed, f"{prefix}-target", problems)
    targets_ok = len(problems) == before
    include, exclude = _cidrs(parsed, f"{prefix}-cidrs", problems)
    if prefix == "external-ip":
        include += _cidrs(parsed, "external-ip-subnet", problems, allow_exclusions=False)[0]
    if targets_ok:  # a bad target is already reported; do not pile a second problem on it
        _check_exclusions(f"{prefix}-cidrs", targets, include, exclude, problems)
    interfaces = _globs(parsed, f"{prefix}-interfaces", problems)
    return TypeSettings(targets, include, exclude, interfaces)


def _targets(parsed: Parsed, flag: str, problems: list[Problem]) -> tuple[IPAddress, ...]:
    """IP literals, at most one per family."""
    targets: list[IPAddress] = []
    for item in split_list(parsed.get_str(flag)):
        try:
            target = parse_ip_target(item)
        except ValidationError as err:
            problems.append(invalid(flag, str(err)))
            continue
        other = next((t for t in targets if t.version == target.version), None)
        if other is not None:
            family = family_name(target.version)
            problems.append(invalid(flag, f"at most one {family} target, got {other} and {target}"))
            continue
        targets.append(target)
    return tuple(targets)


def _cidrs(
    parsed: Parsed, flag: str, problems: list[Problem], *, allow_exclusions: bool = True
) -> tuple[tuple[IPNetwork, ...], tuple[IPNetwork, ...]]:
    """Valid CIDRs without host bits; ``!`` marks an exclusion."""
    include: list[IPNetwork] = []
    exclude: list[IPNetwork] = []
    for item in split_list(parsed.get_str(flag)):
        if item.startswith("!") and not allow_exclusions:
            problems.append(
                invalid(flag, f"{go_quote(item)}: exclusions go in --{flag[:-7]}-cidrs")
            )
            continue
        negated = item.startswith("!")
        body = item[1:].strip() if negated else item
        try:
            network = parse_cidr(body)
        except ValidationError as err:
            reason = str(err)
            if negated:  # show the item as typed, and a hint that can be pasted back
                reason = reason.replace(go_quote(body), go_quote(item), 1)
                reason = reason.replace("did you mean ", "did you mean !")
            problems.append(invalid(flag, reason))
            continue
        (exclude if negated else include).append(network)
    return tuple(include), tuple(exclude)


def _check_exclusions(
    flag: str,
    targets: Sequence[IPAddress],
    include: Sequence[IPNetwork],
    exclude: Sequence[IPNetwork],
    problems: list[Problem],
) -> None:
    """Exclusions alone select nothing: they only filter a target's source."""
    kind = "InternalIP" if flag.startswith("internal") else "ExternalIP"
    target_flag = flag.replace("-cidrs", "-target")
    for family in sorted({n.version for n in exclude}):
        if any(n.version == family for n in include) or any(t.version == family for t in targets):
            continue
        name = family_name(family)
        problems.append(
            invalid(
                flag,
                f"only exclusions for {name} and no {name} --{target_flag}: nothing selects "
                f"an {name} {kind} (add a positive {name} CIDR or a target)",
            )
        )


def _globs(parsed: Parsed, flag: str, problems: list[Problem]) -> tuple[str, ...]:
    """Interface-name patterns (``*``, ``?``, ``[...]``), matching whole names."""
    globs = []
    for pattern in split_list(parsed.get_str(flag)):
        reason = _glob_problem(pattern)
        if reason is None:
            globs.append(pattern)
        else:
            problems.append(invalid(flag, f"{go_quote(pattern)}: {reason}"))
    return tuple(globs)


def _glob_problem(pattern: str) -> str | None:
    if any(c.isspace() or c == "/" for c in pattern):
        return "interface names contain no '/' or whitespace"
    opening = pattern.find("[")
    if opening >= 0 and pattern.find("]", opening + 2) < 0:
        return "unclosed '[' (a character class is written [...])"
    if not any(c in pattern for c in "*?[") and len(pattern) > IFNAMSIZ:
        return f"can never match: interface names have at most {IFNAMSIZ} characters"
    return None


def _family_order(parsed: Parsed, problems: list[Problem]) -> tuple[Family, ...]:
    """``ipv4,ipv6``, ``ipv6,ipv4``, or one family (that family first)."""
    items = split_list(parsed.get_str("ip-family-order"))
    unknown = [i for i in items if i not in _FAMILIES]
    if unknown or len(set(items)) != len(items):
        what = f"{go_quote(unknown[0])} is not a family" if unknown else "a family is repeated"
        problems.append(invalid("ip-family-order", f"{what}; use ipv4,ipv6 or ipv6,ipv4"))
        return ()
    return tuple(_FAMILIES[i] for i in items)


# ---------------------------------------------------------------- node and credentials


def _node_name(parsed: Parsed, detect: bool, problems: list[Problem]) -> str | None:
    """The Node name; a literal ``$(NODE_NAME)`` means the Pod spec lacks the variable."""
    name = parsed.get_str("node-name")
    if not name:
        if not detect:
            problems.append(missing("node-name", ("NODE_NAME",)))
        return None
    source = parsed.sources["node-name"]
    reason = _unexpanded(name)
    if reason is None:
        try:
            return dns1123_subdomain(name)
        except ValidationError as err:
            reason = str(err)
    if source.startswith("env:"):
        problems.append(invalid_env(source.removeprefix("env:"), reason, "node-name"))
    else:
        problems.append(invalid("node-name", reason))
    return None


def _unexpanded(value: str) -> str | None:
    match = _KUBE_VARIABLE.search(value)
    if match is None:
        return None
    var = match.group(1)
    return (
        f"{go_quote(value)} contains the unexpanded variable reference $({var}): the container "
        f"has no environment variable {var}; add env {var} with valueFrom.fieldRef.fieldPath: "
        "spec.nodeName to the Pod spec"
    )


def _credentials(
    parsed: Parsed,
    env: Mapping[str, str],
    *,
    detect: bool,
    node_name: str | None,
    resolve: ConfigResolver,
    problems: list[Problem],
) -> tuple[ClusterConfig | None, str | None]:
    """Credentials must resolve. Detect mode without a Node needs no credentials, and with one
    they are optional (the plan is then skipped); an explicit --kubeconfig must always load."""
    kubeconfig = parsed.get_str("kubeconfig")
    if detect and node_name is None and not kubeconfig:
        return None, None
    try:
        return resolve(kubeconfig, "", env), None
    except ConfigError as err:
        detail = str(err).removeprefix("no Kubernetes configuration: ")
    if kubeconfig:
        problems.append(invalid("kubeconfig", detail))
    elif not detect:
        problems.append(invalid(None, f"no Kubernetes credentials: {detail}"))
    return None, detail


# ---------------------------------------------------------------- scalars


def _duration(
    parsed: Parsed, flag: str, low: float, high: float | None, problems: list[Problem]
) -> float:
    """A duration within [low, high]."""
    value = parsed.get_float(flag)
    got = format_go_duration(value)
    if high is not None and not low <= value <= high:
        limits = f"{format_go_duration(low)} and {format_go_duration(high)}"
        problems.append(invalid(flag, f"must be between {limits}, got {got}"))
    elif value < low:
        bound = format_go_duration(low)
        if flag == "resync-interval" and low > MINUTE:
            bound = f"--reconcile-interval ({bound})"
        problems.append(invalid(flag, f"must be at least {bound}, got {got}"))
    return value


def _verbosity(parsed: Parsed, problems: list[Problem]) -> int:
    """Values above 5 behave as 5 [compat]; negative values are an error."""
    value = parsed.get_int("v")
    if value < 0:
        problems.append(invalid("v", f"must be 0 or more, got {value}"))
        return 0
    return min(value, 5)


def _provider_id(parsed: Parsed, problems: list[Problem]) -> str:
    """A URL-like template with only the three placeholders; not with Azure."""
    template = parsed.get_str("provider-id")
    if not template:
        return ""
    if parsed.get_bool("enable-azure-provider-id"):
        problems.append(
            invalid("provider-id", "cannot be combined with --enable-azure-provider-id")
        )
    if "://" not in template:
        example = '"local://{system_uuid}"'
        problems.append(
            invalid("provider-id", f"{go_quote(template)} must contain :// (e.g. {example})")
        )
    for name in _PLACEHOLDER.findall(template):
        if name not in PROVIDER_ID_PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in PROVIDER_ID_PLACEHOLDERS)
            problems.append(invalid("provider-id", f"unknown placeholder {{{name}}}; use {known}"))
    if "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
        problems.append(invalid("provider-id", f"{go_quote(template)} has an unbalanced brace"))
    return template


def _check_modes(parsed: Parsed, detect: bool, problems: list[Problem]) -> None:
    """Flags that mean nothing in the chosen mode are mistakes, not silent no-ops."""
    if detect and parsed.get_bool("run-once"):
        problems.append(invalid("run-once", "detect mode writes nothing; drop --run-once"))
    if not detect and "output" in parsed.explicit:
        problems.append(invalid("output", "only used in detect mode (local-ccm detect)"))


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
    return fields
