"""Typed option values out of a parsed command line.

`Loader` reads values through each flag's parser (`Flag.value`) and collects every problem,
in the order it reads. The parsers here are the generic ones (bounds, enums); lists,
addresses, CIDRs and names are in `local_ccm.validate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any, Literal, TypeVar, cast

from local_ccm.flags.problems import Problem, invalid, invalid_env
from local_ccm.flags.scan import Parsed
from local_ccm.gosyntax import GoSyntaxError, format_go_duration, go_quote
from local_ccm.logs import MAX_VERBOSITY
from local_ccm.validate import ValidationError

T = TypeVar("T")
LogFormat = Literal["text", "json"]
LOG_FORMATS = ("text", "json")


class Loader:
    """Reads one parsed command line; lives for one `options_from` call."""

    def __init__(self, parsed: Parsed, problems: Iterable[Problem] = ()) -> None:
        self.parsed = parsed
        self.problems = [*problems, *parsed.problems]
        self.failed: set[str] = set()
        self._read: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        """Flag `name`'s value through its parser; on a problem (recorded once), its default."""
        if name not in self._read:
            self._read[name] = self._convert(name)
        return self._read[name]

    def _convert(self, name: str) -> Any:
        flag = self.parsed.flag(name)
        try:
            return flag.convert(self.parsed.values[name])
        except (ValidationError, GoSyntaxError) as err:
            self.reject(name, *err.args)
            return flag.convert(flag.initial)

    def given(self, name: str) -> bool:
        """Whether flag `name` came from the command line or the environment."""
        return name in self.parsed.explicit

    def reject(self, name: str, *reasons: str) -> None:
        """A problem with flag `name`'s value (see `blame`)."""
        self.failed.add(name)
        self.problems.extend(blame(self.parsed, name, reason) for reason in reasons)

    def into(
        self, cls: Callable[..., T], renames: Mapping[str, str] | None = None, **given: Any
    ) -> T:
        """A `cls` dataclass: the fields in `given` as they are, every other one read in field
        order from the flag of the same name (`-` for `_`) or named in `renames`."""
        values = dict(given)
        for name in (f.name for f in fields(cast(Any, cls)) if f.name not in given):
            values[name] = self((renames or {}).get(name, name.replace("_", "-")))
        return cls(**values)

    def result(self, options: T) -> T | list[Problem]:
        return self.problems or options


def blame(parsed: Parsed, name: str, reason: str) -> Problem:
    """A problem with flag `name`'s value, blaming the environment variable it came from, else
    the spelling it was given as."""
    source = parsed.sources.get(name, "")
    if source.startswith("env:"):
        return invalid_env(source.removeprefix("env:"), reason, name)
    return invalid(parsed.given_as(name), reason)


# ---------------------------------------------------------------- generic value parsers


def at_least(low: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < low:
            raise ValidationError(f"must be at least {low}, got {value}")
        return value

    return check


def positive(value: float) -> float:
    """A finite number above 0 (Go's ParseFloat also reads inf and nan: neither is a rate)."""
    if not 0 < value < math.inf:
        raise ValidationError(f"must be a finite number > 0, got {value:g}")
    return value


def duration(
    low: float = 0.0, high: float | None = None, *, strict: bool = False
) -> Callable[[float], float]:
    """Seconds in [low, high] (with `strict` and no `low`: more than 0), in Go's notation."""
    if high is not None:
        bound = f"between {format_go_duration(low)} and {format_go_duration(high)}"
    elif low:
        bound = f"at least {format_go_duration(low)}"
    else:
        bound = "> 0" if strict else ">= 0"

    def check(value: float) -> float:
        if value < low or (strict and value <= low) or (high is not None and value > high):
            raise ValidationError(f"must be {bound}, got {format_go_duration(value)}")
        return value

    return check


def verbosity(value: int) -> int:
    """klog's -v: values above 5 behave as 5 [compat]; negative values are an error."""
    if value < 0:
        raise ValidationError(f"must be 0 or more, got {value}")
    return min(value, MAX_VERBOSITY)


def choice(*choices: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValidationError(f"{go_quote(value)} is not one of {', '.join(choices)}")
        return value

    return check
