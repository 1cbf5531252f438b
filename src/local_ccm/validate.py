"""Value validators shared by the three components.

Pure, no I/O. Every `parse_*` / name-check function returns the parsed value or raises
`ValidationError`, whose message is the reason, ready for `flags.invalid(flag, str(err))`.
`try_parse` turns that into a value-or-error result for loaders that collect problems.
Addresses and networks come back as `ipaddress` objects.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, TypeVar

from local_ccm.gosyntax import go_quote as _q

T = TypeVar("T")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_COUNT_OR_PERCENT = re.compile(r"([0-9]+)(%?)")
_PREFIX_LENGTH = re.compile(r"[0-9]{1,3}")
_PORT = re.compile(r"[0-9]{1,5}")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ValidationError(ValueError):
    """An invalid value; each argument is one reason (without the flag name)."""

    def __str__(self) -> str:
        return "; ".join(map(str, self.args))


def try_parse(parser: Callable[[str], T], text: str) -> T | ValidationError:
    """The parsed value, or the `ValidationError` (returned, not raised)."""
    try:
        return parser(text)
    except ValidationError as err:
        return err


# ---------------------------------------------------------------- names


def dns1123_label(value: str) -> str:
    """RFC 1123 label as Kubernetes checks it: namespaces, Event namespaces."""
    return _dns1123(value, ("label", 63, _LABEL), "digits and '-'", "my-name")


def dns1123_subdomain(value: str) -> str:
    """RFC 1123 subdomain as Kubernetes checks it: Node names, Lease names."""
    return _dns1123(value, ("subdomain", 253, _SUBDOMAIN), "digits, '-' and '.'", "example.com")


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


def qualified_name(value: str) -> str:
    """Label or annotation key: optional DNS-subdomain prefix and '/', name ≤ 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or "/" in prefix):
        raise ValidationError(
            f"{_q(value)} is not a qualified name: expected name or prefix/name "
            '(e.g. "example.com/my-name")'
        )
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        raise ValidationError(
            f"{_q(value)} is not a qualified name: prefix {_q(prefix)} is not a DNS-1123 subdomain"
        )
    _check_name_part(value, name, "qualified name")
    return value


def label_value(value: str) -> str:
    """Label value: empty, or ≤ 63 alphanumerics, '-', '_', '.', alphanumeric at both ends."""
    if value:
        _check_name_part(value, value, "label value")
    return value


def _check_name_part(value: str, name: str, what: str) -> None:
    if len(name) > 63:
        raise ValidationError(f"{_q(value)} is not a valid {what}: name longer than 63 characters")
    if not _NAME_PART.fullmatch(name):
        raise ValidationError(
            f"{_q(value)} is not a valid {what}: use letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )


# ---------------------------------------------------------------- lists and numbers


def split_list(text: str) -> tuple[str, ...]:
    """Comma-separated list: items trimmed, empty items dropped."""
    return tuple(item for item in (part.strip() for part in text.split(",")) if item)


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
    """Comma list of CIDRs (see `split_list`)."""
    return tuple(parse_cidr(item) for item in split_list(text))


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


# ---------------------------------------------------------------- label selectors

Operator = Literal["In", "NotIn", "Equals", "NotEquals", "Exists", "DoesNotExist", "Gt", "Lt"]
_SYMBOL_OPERATORS = MappingProxyType[str, Operator](
    {
        "=": "Equals",
        "==": "Equals",
        "!=": "NotEquals",
        "in": "In",
        "notin": "NotIn",
        ">": "Gt",
        "<": "Lt",
    }
)
_OPERATOR_SYMBOLS: Mapping[str, str] = MappingProxyType(
    {"Equals": "=", "NotEquals": "!=", "Gt": ">", "Lt": "<"}
)
_SPECIAL = "=!(),<>"
_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector. The values of In/NotIn are kept sorted and
    de-duplicated (the canonical order); Equals, NotEquals, Gt and Lt have one value."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator in ("In", "NotIn"):
            object.__setattr__(self, "values", tuple(sorted(set(self.values))))

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator in ("In", "Equals"):
            return value in self.values
        if self.operator in ("NotIn", "NotEquals"):
            return value not in self.values  # an absent label matches, as in Kubernetes
        if self.operator in ("Exists", "DoesNotExist"):
            return (value is not None) == (self.operator == "Exists")
        if value is None or not _INTEGER.fullmatch(value):
            return False
        bound = int(self.values[0])
        return int(value) > bound if self.operator == "Gt" else int(value) < bound

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return self.key if self.operator == "Exists" else f"!{self.key}"
        if self.operator in ("In", "NotIn"):
            return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"
        return f"{self.key}{_OPERATOR_SYMBOLS[self.operator]}{''.join(self.values)}"


@dataclass(frozen=True)
class LabelSelector:
    """Requirements AND-ed together; no requirement matches every object. `str()` is the
    canonical form (sorted by key), usable as the `labelSelector` query parameter."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)


def parse_label_selector(text: str) -> LabelSelector:
    """Kubernetes label-selector syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`,
    `a`, `!a`, `a>1`, `a<1`; `,` means AND; the empty string selects everything."""
    try:
        requirements = _SelectorParser(text, _lex(text)).parse()
    except ValidationError as err:
        raise ValidationError(f"invalid label selector {_q(text)}: {err}") from None
    unique = {str(requirement): requirement for requirement in requirements}
    ordered = sorted(unique.values(), key=lambda r: (r.key, str(r)))
    return LabelSelector(tuple(ordered))


def _lex(text: str) -> list[tuple[bool, str]]:
    """Tokens as (is_symbol, text). Symbols are the longest of `= == != ! ( ) , < >`."""
    tokens: list[tuple[bool, str]] = []
    i = 0
    while i < len(text):
        if text[i] in _WHITESPACE:
            i += 1
        elif text[i] in _SPECIAL:
            size = 2 if text[i : i + 2] in ("==", "!=") else 1
            tokens.append((True, text[i : i + size]))
            i += size
        else:
            end = i
            while end < len(text) and text[end] not in _SPECIAL + _WHITESPACE:
                end += 1
            tokens.append((False, text[i:end]))
            i = end
    return tokens


class _SelectorParser:
    """Recursive descent over the tokens of one selector; lives for one parse call."""

    def __init__(self, text: str, tokens: list[tuple[bool, str]]) -> None:
        self.text, self.tokens, self.pos = text, tokens, 0

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while self.pos < len(self.tokens):
            requirements.append(self._requirement())
            if self._peek() is not None:
                self._expect_symbol(",", "',' or end of selector")
                if self._peek() is None:
                    raise ValidationError("expected a requirement after ','")
        return requirements

    def _peek(self) -> tuple[bool, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _next(self, expected: str) -> tuple[bool, str]:
        token = self._peek()
        if token is None:
            raise ValidationError(f"expected {expected}, found end of selector")
        self.pos += 1
        return token

    def _expect_symbol(self, symbol: str, expected: str) -> None:
        is_symbol, text = self._next(expected)
        if not is_symbol or text != symbol:
            raise ValidationError(f"expected {expected}, found {_q(text)}")

    def _identifier(self, expected: str) -> str:
        is_symbol, text = self._next(expected)
        if is_symbol:  # "in" and "notin" are keywords only where an operator is expected
            raise ValidationError(f"expected {expected}, found {_q(text)}")
        return text

    def _requirement(self) -> Requirement:
        negated = self._peek() == (True, "!")
        self.pos += negated
        key = qualified_name(self._identifier("a label key"))
        if negated:
            return Requirement(key, "DoesNotExist")
        token = self._peek()
        if token is None or token == (True, ","):
            return Requirement(key, "Exists")
        operator = _SYMBOL_OPERATORS.get(self._next("an operator")[1])
        if operator is None:
            raise ValidationError(f"expected an operator after {_q(key)}: =, ==, !=, in, notin")
        return Requirement(key, operator, self._values(key, operator))

    def _values(self, key: str, operator: Operator) -> tuple[str, ...]:
        if operator in ("In", "NotIn"):
            return tuple(self._value_list(key))
        token = self._peek()
        value = "" if token is None or token == (True, ",") else self._identifier("a value")
        if operator in ("Gt", "Lt") and not _INTEGER.fullmatch(value):
            raise ValidationError(f"{_q(key)}: '>' and '<' need an integer, not {_q(value)}")
        return (label_value(value),)

    def _value_list(self, key: str) -> list[str]:
        self._expect_symbol("(", f"'(' after the operator of {_q(key)}")
        if self._peek() == (True, ")"):  # Kubernetes reads "()" as the empty value
            self.pos += 1
            return [""]
        values: list[str] = []
        while True:
            token = self._peek()
            empty = token is not None and token[0] and token[1] in (",", ")")
            values.append(label_value("" if empty else self._identifier("a value")))
            is_symbol, text = self._next("',' or ')'")
            if not is_symbol or text not in (",", ")"):
                raise ValidationError(f"expected ',' or ')', found {_q(text)}")
            if text == ")":
                return values
