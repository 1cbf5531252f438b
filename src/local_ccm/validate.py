"""Value parsers shared by the components: DNS names, lists, counts, addresses, CIDRs and
bind addresses (label keys and selectors are in `local_ccm.labels`).

Pure, no I/O. Every `parse_*` / name check returns the parsed value (addresses and networks as
`ipaddress` objects) or raises `ValidationError`, whose arguments are the reasons.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import TypeVar

from local_ccm.gosyntax import go_quote as _q
from local_ccm.records import dataclass

T = TypeVar("T")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
"""IPv4-mapped IPv6 addresses: the API server refuses them in Service and Node addresses."""
_KUBE_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_COUNT_OR_PERCENT = re.compile(r"([0-9]+)(%?)")
_PREFIX_LENGTH = re.compile(r"[0-9]{1,3}")
_PORT = re.compile(r"[0-9]{1,5}")


class ValidationError(ValueError):
    """An invalid value; each argument is one reason (without the flag name)."""

    def __str__(self) -> str:
        return "; ".join(map(str, self.args))


# ---------------------------------------------------------------- names


def dns1123_label(value: str) -> str:
    """RFC 1123 label as Kubernetes checks it: namespaces, Event namespaces."""
    return _dns1123(value, ("label", 63, _LABEL), "digits and '-'", "my-name")


def dns1123_subdomain(value: str) -> str:
    """RFC 1123 subdomain as Kubernetes checks it: Node names, Lease names."""
    return _dns1123(value, ("subdomain", 253, _SUBDOMAIN), "digits, '-' and '.'", "example.com")


def parse_node_name(name: str) -> str:
    """A Node name; a literal ``$(NODE_NAME)`` means the Pod spec lacks the variable."""
    match = _KUBE_VARIABLE.search(name)
    if match is not None:
        var = match.group(1)
        raise ValidationError(
            f"{_q(name)} contains the unexpanded variable reference $({var}): the "
            f"container has no environment variable {var}; add env {var} with "
            "valueFrom.fieldRef.fieldPath: spec.nodeName to the Pod spec"
        )
    return dns1123_subdomain(name) if name else name  # empty: not given (each caller decides)


def _dns1123(value: str, rule: tuple[str, int, re.Pattern[str]], chars: str, eg: str) -> str:
    what, size, pattern = rule
    if len(value) > size:
        raise ValidationError(
            f"{_q(value)} is not a DNS-1123 {what}: longer than {size} characters"
        )
    if not pattern.fullmatch(value):
        raise ValidationError(
            f"{_q(value)} is not a DNS-1123 {what}: use lower-case letters, {chars}, starting "
            f'and ending with a letter or digit (e.g. "{eg}")'
        )
    return value


# ---------------------------------------------------------------- lists and numbers


def split_list(text: str) -> tuple[str, ...]:
    """Comma-separated list: items trimmed, empty items dropped."""
    return tuple(item for item in (part.strip() for part in text.split(",")) if item)


def parse_families(text: str) -> tuple[str, ...]:
    """IP families, `ipv4` and/or `ipv6`, in the order given; empty: none."""
    items = split_list(text)
    unknown = [i for i in items if i not in ("ipv4", "ipv6")]
    if unknown or len(set(items)) != len(items):
        what = f"{_q(unknown[0])} is not a family" if unknown else "a family is repeated"
        raise ValidationError(f"{what}; use ipv4,ipv6 or ipv6,ipv4")
    return items


def each(item: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """A comma-separated list (see `split_list`), every bad item reported."""

    def check(text: str) -> tuple[T, ...]:
        values: list[T] = []
        reasons: list[str] = []
        for part in split_list(text):
            try:
                values.append(item(part))
            except ValidationError as err:
                reasons.extend(err.args)
        if reasons:
            raise ValidationError(*reasons)
        return tuple(values)

    return check


@dataclass(frozen=True)
class CountOrPercent:
    """`N` (count ≥ 0) or `P%` (0–100)."""

    value: int
    percent: bool

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def parse_count_or_percent(text: str) -> CountOrPercent:
    match = _COUNT_OR_PERCENT.fullmatch(text)
    if match is None:
        raise ValidationError(
            f"{_q(text)} is neither an integer ≥ 0 nor a percentage 0%-100% (e.g. 3 or 40%)"
        )
    value, percent = int(match.group(1)), bool(match.group(2))
    if percent and value > 100:
        raise ValidationError(f"{_q(text)}: a percentage must be between 0% and 100%")
    return CountOrPercent(value, percent)


# ---------------------------------------------------------------- addresses


def parse_ip(text: str) -> IPAddress:
    """An IP literal; hostnames and zone-scoped addresses (`fe80::1%eth0`) are rejected."""
    if "%" in text:
        raise ValidationError(f"{_q(text)}: zone-scoped addresses are not supported")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValidationError(
            f"{_q(text)} is not an IP address (hostnames are not allowed)"
        ) from None


def parse_ip_target(text: str) -> IPAddress:
    """A route-lookup target: unicast IP literal, not unspecified."""
    address = parse_ip(text)
    if address.is_unspecified:
        raise ValidationError(f"{_q(text)}: the unspecified address cannot be a target")
    if address.is_multicast:
        raise ValidationError(f"{_q(text)}: a multicast address cannot be a target")
    return address


def parse_cidr(text: str) -> IPNetwork:
    """`address/prefix` with no host bits set; the error suggests the network address."""
    address_text, slash, prefix_text = text.partition("/")
    if not slash or not _PREFIX_LENGTH.fullmatch(prefix_text):
        raise ValidationError(f"invalid CIDR {_q(text)}: expected address/prefix (e.g. 10.0.0.0/8)")
    try:
        address = parse_ip(address_text)
    except ValidationError as err:
        raise ValidationError(f"invalid CIDR {_q(text)}: {err}") from None
    prefix, width = int(prefix_text), address.max_prefixlen
    if prefix > width:
        raise ValidationError(f"invalid CIDR {_q(text)}: prefix length must be 0-{width}")
    network = ipaddress.ip_network((address, prefix), strict=False)
    if network.network_address != address:
        raise ValidationError(f"invalid CIDR {_q(text)}: host bits set; did you mean {network}?")
    return network


def parse_cidr_list(text: str) -> tuple[IPNetwork, ...]:
    """Comma list of CIDRs (see `split_list`), every bad item reported."""
    return each(parse_cidr)(text)


@dataclass(frozen=True)
class BindAddress:
    """A listen address. `host` None means every address of both families."""

    host: IPAddress | None
    port: int

    def __str__(self) -> str:
        if self.host is None:
            return f":{self.port}"
        if self.host.version == 6:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def parse_bind_address(text: str) -> BindAddress | None:
    """`127.0.0.1:8092`, `:8092`, `[::1]:8092`; `0` disables the server (returns None)."""
    if text == "0":
        return None
    host_text, colon, port_text = text.rpartition(":")
    if not colon:
        raise ValidationError(
            f'{_q(text)} is not [host]:port (e.g. "127.0.0.1:8080", ":8080", '
            '"[::1]:8080", or "0" to disable)'
        )
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        raise ValidationError(f"{_q(text)}: port must be a number 0-65535")
    return BindAddress(_bind_host(text, host_text), int(port_text))


def _bind_host(text: str, host: str) -> IPAddress | None:
    if not host:
        return None
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = parse_ip(host[1:-1] if bracketed else host)
    except ValidationError as err:
        raise ValidationError(f"{_q(text)}: host {err}") from None
    if address.version == 6 and not bracketed:
        raise ValidationError(f"{_q(text)}: put an IPv6 host in brackets, e.g. [{address}]:port")
    if address.version == 4 and bracketed:
        raise ValidationError(f"{_q(text)}: only IPv6 hosts go in brackets")
    return address
