"""The agent's own kinds of flag values: route-lookup targets, CIDR selections, family order
and provider-ID templates (Node names are `local_ccm.validate.parse_node_name`, shared with the
lifecycle controller; interface globs are `local_ccm.ifnames.parse_glob`).

Pure, no I/O. Each parser returns the value or raises `ValidationError` with every reason.
"""

from __future__ import annotations

import re

from local_ccm.agent.core.config import Family, IPAddress, IPNetwork, family_name
from local_ccm.gosyntax import go_quote
from local_ccm.validate import (
    ValidationError,
    each,
    parse_cidr,
    parse_families,
    parse_ip_target,
    split_list,
)

PROVIDER_ID_PLACEHOLDERS = ("node_name", "system_uuid", "machine_id")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
Selection = tuple[tuple[IPNetwork, ...], tuple[IPNetwork, ...]]  # (include, exclude)


def parse_targets(text: str) -> tuple[IPAddress, ...]:
    """Route-lookup targets: IP literals, at most one per family."""
    targets: list[IPAddress] = []
    for target in each(parse_ip_target)(text):
        other = next((t for t in targets if t.version == target.version), None)
        if other is not None:
            family = family_name(target.version)
            raise ValidationError(f"at most one {family} target, got {other} and {target}")
        targets.append(target)
    return tuple(targets)


def parse_selection(text: str) -> Selection:
    """Valid CIDRs without host bits; ``!`` marks an exclusion."""
    include: list[IPNetwork] = []
    exclude: list[IPNetwork] = []
    for negated, network in each(_selection_item)(text):
        (exclude if negated else include).append(network)
    return tuple(include), tuple(exclude)


def _selection_item(item: str) -> tuple[bool, IPNetwork]:
    body = item.removeprefix("!").strip()
    try:
        return item.startswith("!"), parse_cidr(body)
    except ValidationError as err:
        if not item.startswith("!"):
            raise
        # Show the item as typed, and a hint that can be pasted back.
        reason = str(err).replace(go_quote(body), go_quote(item), 1)
        raise ValidationError(reason.replace("did you mean ", "did you mean !")) from None


def parse_subnet(text: str) -> tuple[IPNetwork, ...]:
    """--external-ip-subnet: positive CIDRs only."""
    for item in split_list(text):
        if item.startswith("!"):
            raise ValidationError(f"{go_quote(item)}: exclusions go in --external-ip-cidrs")
    return parse_selection(text)[0]


def parse_family_order(text: str) -> tuple[Family, ...]:
    """``ipv4,ipv6``, ``ipv6,ipv4``, or one family (that family first)."""
    return tuple(4 if family == "ipv4" else 6 for family in parse_families(text))


def parse_provider_id(template: str) -> str:
    """A URL-like template with only the three placeholders."""
    reasons = []
    if template and "://" not in template:
        example = '"local://{system_uuid}"'
        reasons.append(f"{go_quote(template)} must contain :// (e.g. {example})")
    known = ", ".join("{" + p + "}" for p in PROVIDER_ID_PLACEHOLDERS)
    for name in _PLACEHOLDER.findall(template):
        if name not in PROVIDER_ID_PLACEHOLDERS:
            reasons.append(f"unknown placeholder {{{name}}}; use {known}")
    if any(brace in _PLACEHOLDER.sub("", template) for brace in "{}"):
        reasons.append(f"{go_quote(template)} has an unbalanced brace")
    if reasons:
        raise ValidationError(*reasons)
    return template
