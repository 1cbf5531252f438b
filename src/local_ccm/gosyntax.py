"""Go's scalar syntax: booleans, integers, floats and durations as Go's strconv and time parse
and print them, and Go-style quoting for messages.

Pure, no I/O. The flag parser (`local_ccm.flags`), the value parsers and the messages use these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

_ESCAPES: Mapping[str, str] = MappingProxyType(
    {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
)


class GoSyntaxError(ValueError):
    """A value Go's strconv/time parsers reject; the message is the reason."""


BOOL_SPELLINGS: Mapping[str, bool] = MappingProxyType(
    dict.fromkeys(("1", "t", "T", "true", "TRUE", "True"), True)
    | dict.fromkeys(("0", "f", "F", "false", "FALSE", "False"), False)
)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_INT_BASES: Mapping[str, int] = MappingProxyType({"b": 2, "o": 8, "x": 16})
_DURATION_UNITS: Mapping[str, int] = MappingProxyType(
    {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9}
    | {"m": 60 * 10**9, "h": 3600 * 10**9}
)
_DURATION_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_DEC_FLOAT = re.compile(r"[+-]?(?=\.?[0-9])[0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9][0-9_]*)?")
_HEX_FLOAT = re.compile(
    r"[+-]?0[xX](?=_*\.?_*[0-9a-fA-F])[0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?[pP][+-]?[0-9][0-9_]*"
)
_FLOAT_SPECIAL = re.compile(r"[+-]?(inf|infinity)|nan", re.IGNORECASE)


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool: `1 0 t f T F true false TRUE FALSE True False`."""
    if text not in BOOL_SPELLINGS:
        raise GoSyntaxError(f"invalid boolean {go_quote(text)} (use true or false)")
    return BOOL_SPELLINGS[text]


def parse_go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): sign, then 0x/0o/0b or a leading 0 (octal) or decimal;
    `_` separates digits as in Go integer literals."""
    body, negative = _strip_sign(text)
    base, digits = _int_base(body)
    value = 0
    for char in digits:
        if char == "_":
            continue
        digit = int(char, 36) if char.isascii() and char.isalnum() else 99
        if digit >= base or not body:
            raise GoSyntaxError(f"invalid integer {go_quote(text)}")
        value = value * base + digit
        if value > _UINT64_MAX:
            raise GoSyntaxError(f"integer {go_quote(text)} out of range")
    if not body or ("_" in digits and not _underscores_ok(text)):
        raise GoSyntaxError(f"invalid integer {go_quote(text)}")
    if value > _INT64_MAX + negative:
        raise GoSyntaxError(f"integer {go_quote(text)} out of range")
    return -value if negative else value


def _int_base(body: str) -> tuple[int, str]:
    if body[:1] != "0":
        return 10, body
    if len(body) >= 3 and body[1].lower() in _INT_BASES:
        return _INT_BASES[body[1].lower()], body[2:]
    return 8, body[1:]


def _underscores_ok(text: str) -> bool:
    """Go's strconv.underscoreOK: `_` only between digits or after a base prefix."""
    body, _ = _strip_sign(text)
    hexadecimal = body[:2].lower() == "0x"
    saw = "0" if body[:2].lower() in ("0b", "0o", "0x") else "^"
    for char in body[2:] if saw == "0" else body:
        if (char.isdigit() and char.isascii()) or (hexadecimal and char.lower() in "abcdef"):
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_go_float(text: str) -> float:
    """strconv.ParseFloat(text, 64): decimal or hexadecimal (with `p` exponent), `inf`,
    `infinity`, `nan`; `_` between digits."""
    if _FLOAT_SPECIAL.fullmatch(text):
        return float(text.lower().replace("infinity", "inf"))
    hexadecimal = _HEX_FLOAT.fullmatch(text) is not None
    if not (hexadecimal or _DEC_FLOAT.fullmatch(text)) or (
        "_" in text and not _underscores_ok(text)
    ):
        raise GoSyntaxError(f"invalid number {go_quote(text)}")
    plain = text.replace("_", "")
    try:
        value = float.fromhex(plain) if hexadecimal else float(plain)
    except OverflowError:
        value = math.inf
    if math.isinf(value):
        raise GoSyntaxError(f"number {go_quote(text)} out of range")
    return value


def parse_go_duration_ns(text: str) -> int:
    """time.ParseDuration in integer nanoseconds: `[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`."""
    rest, negative = _strip_sign(text)
    if rest == "0":
        return 0
    if not rest:
        raise GoSyntaxError(f"invalid duration {go_quote(text)}")
    total = 0
    while rest:
        value, rest = _duration_term(text, rest)
        total += value
        if total > _INT64_MAX + 1:
            raise GoSyntaxError(f"invalid duration {go_quote(text)} (out of range)")
    if total > _INT64_MAX + negative:
        raise GoSyntaxError(f"invalid duration {go_quote(text)} (out of range)")
    return -total if negative else total


def _duration_term(text: str, rest: str) -> tuple[int, str]:
    """One `<number><unit>` term of a duration; returns nanoseconds and what follows."""
    match = _DURATION_TERM.match(rest)
    assert match is not None  # every group may be empty, so it always matches
    whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3)
    if not whole and not fraction:
        raise GoSyntaxError(f"invalid duration {go_quote(text)}")
    if not unit:
        hint = f"; did you mean {text}s?" if match.end() == len(rest) else ""
        raise GoSyntaxError(f"missing unit in duration {go_quote(text)}{hint}")
    if unit not in _DURATION_UNITS:
        units = "ns, us, ms, s, m, h"
        raise GoSyntaxError(f"unknown unit {go_quote(unit)} in duration {go_quote(text)} ({units})")
    scale = _DURATION_UNITS[unit]
    value = int(whole or "0")
    if value > (_INT64_MAX + 1) // scale:
        raise GoSyntaxError(f"invalid duration {go_quote(text)} (out of range)")
    value = value * scale + _fraction_ns(fraction, scale)
    if value > _INT64_MAX + 1:
        raise GoSyntaxError(f"invalid duration {go_quote(text)} (out of range)")
    return value, rest[match.end() :]


def _fraction_ns(digits: str, scale: int) -> int:
    """Go's leadingFraction and its float64 arithmetic, so results match to the nanosecond."""
    numerator, denominator = 0, 1.0
    for char in digits:
        candidate = numerator * 10 + int(char)
        if numerator > _INT64_MAX // 10 or candidate > _INT64_MAX + 1:
            break  # Go stops accumulating precision here
        numerator, denominator = candidate, denominator * 10
    return int(float(numerator) * (float(scale) / denominator)) if numerator else 0


def parse_go_duration(text: str) -> float:
    """time.ParseDuration in (float) seconds."""
    return parse_go_duration_ns(text) / 1e9


def format_go_duration_ns(nanoseconds: int) -> str:
    """time.Duration.String(): `1h0m0s`, `1m30s`, `1.5s`, `300ms`, `1µs`, `0s`."""
    sign = "-" if nanoseconds < 0 else ""
    magnitude = abs(nanoseconds)
    if magnitude == 0:
        return "0s"
    if magnitude < 10**9:
        prec, unit = (0, "ns") if magnitude < 10**3 else (3, "\u00b5s")
        if magnitude >= 10**6:
            prec, unit = 6, "ms"
        return sign + _decimal(magnitude, prec) + unit
    seconds, minutes = magnitude % (60 * 10**9), magnitude // (60 * 10**9)
    text = _decimal(seconds, 9) + "s"
    if minutes:
        text = f"{minutes % 60}m{text}"
        text = f"{minutes // 60}h{text}" if minutes >= 60 else text
    return sign + text


def format_go_duration(seconds: float) -> str:
    """Duration.String() of `seconds`, rounded to the nanosecond."""
    return format_go_duration_ns(round(seconds * 1e9))


def _decimal(value: int, prec: int) -> str:
    """value / 10**prec without trailing zeros (Go's fmtFrac + fmtInt)."""
    whole, fraction = divmod(value, 10**prec)
    digits = f"{fraction:0{prec}d}".rstrip("0") if prec else ""
    return f"{whole}.{digits}" if digits else str(whole)


def _strip_sign(text: str) -> tuple[str, bool]:
    if text[:1] in ("+", "-"):
        return text[1:], text[0] == "-"
    return text, False


def go_quote(text: str) -> str:
    """Double-quoted like Go's strconv.Quote: problem lines stay single lines whatever the
    user typed."""
    return '"' + escape(text, quote=True) + '"'


def escape(text: str, *, quote: bool = False) -> str:
    """`text` with non-printable characters (and, when quoting, `"` and `\\`) escaped."""
    out = []
    for char in text:
        if quote and char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(_ESCAPES.get(char) or _code_point(ord(char)))
    return "".join(out)


def _code_point(number: int) -> str:
    if number < 0x80:
        return f"\\x{number:02x}"
    return f"\\u{number:04x}" if number < 0x10000 else f"\\U{number:08x}"
