"""Kubernetes label syntax: qualified names (label and annotation keys), label values and
label selectors, as the API server checks and evaluates them.

Pure, no I/O. Problems raise `ValidationError` (from `local_ccm.validate`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from local_ccm.gosyntax import go_quote as _q
from local_ccm.records import dataclass
from local_ccm.validate import ValidationError, dns1123_subdomain

_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def int64(text: str) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads it, or None (not an integer, or
    outside int64): what Gt and Lt compare, in a requirement and in a label."""
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def qualified_name(value: str) -> str:
    """Label or annotation key: optional DNS-subdomain prefix and '/', name ≤ 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or "/" in prefix):
        raise ValidationError(
            f"{_q(value)} is not a qualified name: expected name or prefix/name "
            '(e.g. "example.com/my-name")'
        )
    if prefix and not _is_subdomain(prefix):
        raise ValidationError(
            f"{_q(value)} is not a qualified name: prefix {_q(prefix)} is not a DNS-1123 subdomain"
        )
    _check_name_part(value, name, "qualified name")
    return value


def load_balancer_class(value: str) -> str:
    """A `spec.loadBalancerClass` a controller may claim: a label-style key, as the API server
    requires, with a domain prefix (unprefixed names are reserved for end users)."""
    if "/" not in value:
        raise ValidationError(f"{_q(value)} is not a prefixed name like example.com/lb")
    return qualified_name(value)


def _is_subdomain(text: str) -> bool:
    try:
        dns1123_subdomain(text)
    except ValidationError:
        return False
    return True


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
_TOKEN = re.compile(r"==|!=|[=!(),<>]|[^=!(),<> \t\r\n]+")  # blanks between tokens skipped


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
        got = None if value is None else int64(value)
        bound = int64(self.values[0])
        if got is None or bound is None:
            return False
        return got > bound if self.operator == "Gt" else got < bound

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
    return [(token[0] in _SPECIAL, token) for token in _TOKEN.findall(text)]


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
        if operator in ("Gt", "Lt") and int64(value) is None:
            raise ValidationError(
                f"{_q(key)}: '>' and '<' need an integer that fits in 64 bits, not {_q(value)}"
            )
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
