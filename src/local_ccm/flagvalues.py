"""Typed values out of parsed flags, with every problem collected instead of raised.

Pure, no I/O. The components' option loaders share these, so that an enum, a bind address
or a validated string is checked and reported the same way by every binary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from local_ccm.flags import Parsed, Problem, invalid
from local_ccm.gosyntax import go_quote
from local_ccm.validate import BindAddress, ValidationError, parse_bind_address

T = TypeVar("T")


def choice(
    parsed: Parsed, flag: str, choices: Mapping[str, T], problems: list[Problem]
) -> T | None:
    """An enum flag: its value must be one of `choices`' keys."""
    value = parsed.get_str(flag)
    if value in choices:
        return choices[value]
    problems.append(invalid(flag, f"{go_quote(value)} is not one of {', '.join(choices)}"))
    return None


def bind_address(parsed: Parsed, flag: str, problems: list[Problem]) -> BindAddress | None:
    """`[host]:port`, or `0` for a disabled server (None either way on a problem)."""
    try:
        return parse_bind_address(parsed.get_str(flag))
    except ValidationError as err:
        problems.append(invalid(flag, str(err)))
        return None


def checked(parsed: Parsed, flag: str, check: Callable[[str], str], problems: list[Problem]) -> str:
    """A string flag passed through a validator; on a problem the raw value is returned."""
    value = parsed.get_str(flag)
    try:
        return check(value)
    except ValidationError as err:
        problems.append(invalid(parsed.given_as(flag), str(err)))
        return value
