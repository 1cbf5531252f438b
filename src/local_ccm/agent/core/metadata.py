"""Node metadata rules: which zone, region, instance type and extra labels a Node gets.

Pure, no I/O. `parse_rules` checks a rules document and reports every problem at once;
`desired_labels` evaluates the rules against one Node's facts. Rules are tried in order and the
first rule that matches *and* renders a non-empty value wins, per label key, so a general rule
at the end can fill what specific rules above it leave out. Without any rule for it, the instance
type is the machine's DMI product name (the upstream cloud-node controller's
`node.kubernetes.io/instance-type` comes from the cloud's API; on bare metal the firmware is the
closest thing to it).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from local_ccm.agent.core.facts import DMI_FIELDS, MACHINE_FACTS
from local_ccm.records import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# The deprecated twins the upstream cloud-node controller also wrote until Kubernetes 1.27; some
# older topology-aware tooling still reads them. Written only when asked for.
BETA_TWINS: Mapping[str, str] = {
    ZONE: "failure-domain.beta.kubernetes.io/zone",
    REGION: "failure-domain.beta.kubernetes.io/region",
    INSTANCE_TYPE: "beta.kubernetes.io/instance-type",
}
WELL_KNOWN = {"zone": ZONE, "region": REGION, "instanceType": INSTANCE_TYPE}
DEFAULT_LABEL_DOMAIN = "local-ccm.io"
DEFAULT_RULE = "(default: DMI product name)"

_RULE_KEYS = {"name", "match", "labels", *WELL_KNOWN}
_MATCH_KEYS = {"nodeName", "addresses", "dmi", "labels"}
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_INVALID_VALUE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RULE_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_. ]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class Template:
    """A label value with `{fact}` placeholders, split once at load."""

    text: str
    parts: tuple[tuple[bool, str], ...]  # (is_placeholder, literal or fact name)

    def render(self, facts: Mapping[str, str]) -> str:
        """The normalised value, or "" when a fact it needs is unknown on this machine."""
        out = []
        for is_fact, value in self.parts:
            if is_fact and not facts.get(value):
                return ""
            out.append(facts[value] if is_fact else value)
        return normalise_value("".join(out))


@dataclass(frozen=True)
class Match:
    """Every condition given must hold; a rule without conditions matches every Node."""

    node_name: re.Pattern[str] | None = None
    addresses: tuple[IPNetwork, ...] = ()
    dmi: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    labels: Mapping[str, re.Pattern[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    match: Match
    sets: Mapping[str, Template]  # label key → value template


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()
    default_instance_type: bool = True


@dataclass(frozen=True)
class NodeView:
    """What the rules may look at besides the machine's facts."""

    name: str
    addresses: tuple[IPAddress, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decided:
    value: str
    rule: str


def normalise_value(text: str) -> str:
    """Any text → a valid label value: invalid runs become `-`, at most 63 characters."""
    return _INVALID_VALUE_RUN.sub("-", text)[:63].strip("-._")


def desired_labels(rules: Rules, facts: Mapping[str, str], node: NodeView) -> dict[str, Decided]:
    """Label key → (value, the rule that set it). Pure."""
    out: dict[str, Decided] = {}
    for rule in rules.rules:
        values = _rule_facts(rule.match, facts, node)
        if values is None:
            continue
        for key, template in rule.sets.items():
            if key not in out and (value := template.render(values)):
                out[key] = Decided(value, rule.name)
    default = normalise_value(facts.get("dmi.productName", ""))
    if rules.default_instance_type and INSTANCE_TYPE not in out and default:
        out[INSTANCE_TYPE] = Decided(default, DEFAULT_RULE)
    return out


def matching_rules(rules: Rules, facts: Mapping[str, str], node: NodeView) -> list[str]:
    """Names of the rules that match this Node, in order (for `local-ccm detect`)."""
    return [r.name for r in rules.rules if _rule_facts(r.match, facts, node) is not None]


def _rule_facts(match: Match, facts: Mapping[str, str], node: NodeView) -> dict[str, str] | None:
    """The facts a matching rule's templates see (with its name groups), None: no match."""
    values = {**facts, "nodeName": node.name}
    values.update({f"label.{key}": value for key, value in node.labels.items()})
    if match.node_name is not None:
        found = match.node_name.search(node.name)
        if found is None:
            return None
        values.update({f"nodeName.{k}": v for k, v in found.groupdict().items() if v})
    if match.addresses and not any(a in net for a in node.addresses for net in match.addresses):
        return None
    for name, pattern in match.dmi.items():
        if pattern.search(facts.get(f"dmi.{name}", "")) is None:
            return None
    for key, pattern in match.labels.items():
        if key not in node.labels or pattern.search(node.labels[key]) is None:
            return None
    return values


# --- loading -------------------------------------------------------------------------------


def parse_rules(
    document: object, *, label_domains: Sequence[str] = (DEFAULT_LABEL_DOMAIN,)
) -> Rules | list[str]:
    """A loaded YAML/JSON document → Rules, or every problem found (never just the first)."""
    problems: list[str] = []
    if document is None:
        return Rules()
    if not isinstance(document, dict):
        return ["the rules file must be a mapping with a `rules` list"]
    problems += [f"unknown top-level key {k!r}" for k in document if k not in _TOP_KEYS]
    default = document.get("defaultInstanceType", True)
    if not isinstance(default, bool):
        problems.append("defaultInstanceType: must be true or false")
    raw = document.get("rules", [])
    if not isinstance(raw, list):
        return [*problems, "rules: must be a list"]
    rules, seen = [], set()
    for index, item in enumerate(raw):
        where = f"rules[{index}]"
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            where = f"rules[{index}] ({item['name']})"
            if item["name"] in seen:
                problems.append(f"{where}: duplicate rule name")
            seen.add(item["name"])
        rule = _parse_rule(item, where, label_domains, problems)
        if rule is not None:
            rules.append(rule)
    if problems:
        return problems
    return Rules(tuple(rules), default_instance_type=default is not False)


_TOP_KEYS = {"rules", "defaultInstanceType"}


def _parse_rule(
    item: object, where: str, domains: Sequence[str], problems: list[str]
) -> Rule | None:
    if not isinstance(item, dict):
        problems.append(f"{where}: must be a mapping")
        return None
    before = len(problems)
    problems += [f"{where}: unknown key {k!r}" for k in item if k not in _RULE_KEYS]
    name = item.get("name")
    if not isinstance(name, str) or not _RULE_NAME.fullmatch(name):
        problems.append(f"{where}: name: required, letters, digits, '-', '_', '.' or spaces")
    match = _parse_match(item.get("match", {}), f"{where}.match", problems)
    sets = _parse_sets(item, where, match, domains, problems)
    if not sets:
        problems.append(f"{where}: sets nothing (give zone, region, instanceType or labels)")
    if len(problems) > before or match is None:
        return None
    return Rule(str(name), match, sets)


def _parse_match(raw: object, where: str, problems: list[str]) -> Match | None:
    if raw is None:
        return Match()
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a mapping")
        return None
    problems += [f"{where}: unknown key {k!r}" for k in raw if k not in _MATCH_KEYS]
    node_name = None
    if "nodeName" in raw:
        node_name = _regex(raw["nodeName"], f"{where}.nodeName", problems)
    addresses = _cidrs(raw.get("addresses", []), f"{where}.addresses", problems)
    dmi = _patterns(raw.get("dmi", {}), f"{where}.dmi", problems, _dmi_name)
    labels = _patterns(raw.get("labels", {}), f"{where}.labels", problems, _label_key)
    return Match(node_name, addresses, dmi, labels)


def _parse_sets(
    item: Mapping[str, Any],
    where: str,
    match: Match | None,
    domains: Sequence[str],
    problems: list[str],
) -> dict[str, Template]:
    groups = set(match.node_name.groupindex) if match and match.node_name else set()
    sets: dict[str, Template] = {}
    for field_name, key in WELL_KNOWN.items():
        if field_name in item:
            sets[key] = _template(item[field_name], f"{where}.{field_name}", groups, problems)
    extra = item.get("labels", {})
    if not isinstance(extra, dict):
        problems.append(f"{where}.labels: must be a mapping of label key to value")
        return sets
    for key, value in extra.items():
        at = f"{where}.labels[{key!r}]"
        if error := _label_key(key) or _owned_key(str(key), domains):
            problems.append(f"{at}: {error}")
            continue
        sets[str(key)] = _template(value, at, groups, problems)
    return sets


def _template(raw: object, where: str, groups: set[str], problems: list[str]) -> Template:
    if not isinstance(raw, str | int) or isinstance(raw, bool):
        problems.append(f"{where}: must be a string")
        return Template("", ())
    text, parts, literal = str(raw), [], True
    last = 0
    for found in _PLACEHOLDER.finditer(text):
        parts.append((False, text[last : found.start()]))
        name = found.group(1).strip()
        if error := _fact_error(name, groups):
            problems.append(f"{where}: {error}")
        parts.append((True, name))
        last, literal = found.end(), False
    parts.append((False, text[last:]))
    if literal and (len(text) > 63 or not _LABEL_VALUE.fullmatch(text)):
        problems.append(f"{where}: {text!r} is not a valid label value")
    rest = _PLACEHOLDER.sub("", text)
    if "{" in rest or "}" in rest:
        problems.append(f"{where}: unbalanced braces in {text!r}")
    return Template(text, tuple(p for p in parts if p[0] or p[1]))


def _fact_error(name: str, groups: set[str]) -> str | None:
    if name in MACHINE_FACTS or name == "nodeName":
        return None
    prefix, _, rest = name.partition(".")
    if (prefix == "dmi" and rest in DMI_FIELDS) or (prefix == "label" and not _label_key(rest)):
        return None
    if prefix == "nodeName":
        return None if rest in groups else f"no group {rest!r} in match.nodeName"
    known = ", ".join(sorted({*MACHINE_FACTS, "nodeName", "nodeName.<group>", "label.<key>"}))
    return f"unknown fact {{{name}}} (known: dmi.<{', '.join(sorted(DMI_FIELDS))}>, {known})"


def _regex(raw: object, where: str, problems: list[str]) -> re.Pattern[str] | None:
    if not isinstance(raw, str):
        problems.append(f"{where}: must be a string (a regular expression)")
        return None
    try:
        return re.compile(raw)
    except re.error as exc:
        problems.append(f"{where}: invalid regular expression {raw!r}: {exc}")
        return None


def _cidrs(raw: object, where: str, problems: list[str]) -> tuple[IPNetwork, ...]:
    if not isinstance(raw, list):
        problems.append(f"{where}: must be a list of CIDRs")
        return ()
    out = []
    for text in raw:
        try:
            out.append(ipaddress.ip_network(str(text), strict=True))
        except ValueError as exc:
            problems.append(f"{where}: {text!r} is not a CIDR: {exc}")
    return tuple(out)


def _patterns(
    raw: object, where: str, problems: list[str], check_key: Any
) -> dict[str, re.Pattern[str]]:
    if not isinstance(raw, dict):
        problems.append(f"{where}: must be a mapping")
        return {}
    out = {}
    for key, value in raw.items():
        if error := check_key(key):
            problems.append(f"{where}: {error}")
        elif (pattern := _regex(value, f"{where}[{key!r}]", problems)) is not None:
            out[str(key)] = pattern
    return out


def _dmi_name(name: object) -> str | None:
    if name in DMI_FIELDS:
        return None
    return f"unknown DMI field {name!r} (known: {', '.join(sorted(DMI_FIELDS))})"


def _label_key(key: object) -> str | None:
    """Why `key` is not a valid Kubernetes label key, or None."""
    if not isinstance(key, str):
        return f"label key {key!r} must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain"
    if len(name) > 63 or not _NAME_PART.fullmatch(name):
        return f"label key {key!r}: invalid name part"
    return None


def _owned_key(key: str, domains: Sequence[str]) -> str | None:
    """Extra labels only under the allowed domains: the agent may not write anything else."""
    if key in WELL_KNOWN.values() or key in BETA_TWINS.values():
        return f"{key!r} is set by zone, region or instanceType, not under labels"
    if is_in_domains(key, domains):
        return None
    return f"{key!r} is outside the allowed label domains ({', '.join(domains)})"


def is_in_domains(key: str, domains: Sequence[str]) -> bool:
    """`key`'s prefix is one of `domains` or a subdomain of one."""
    prefix = key.rpartition("/")[0]
    return any(prefix == d or prefix.endswith("." + d) for d in domains)


def is_removable_key(key: str, domains: Sequence[str]) -> bool:
    """A label the agent may remove: zone, region, instance type, their beta twins (also
    after --metadata-beta-labels was turned off) and keys under the allowed domains. The
    chart's admission policy admits the same removals."""
    return key in WELL_KNOWN.values() or key in BETA_TWINS.values() or is_in_domains(key, domains)
