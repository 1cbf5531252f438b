"""The user errors of a command line: one `Problem` per mistake, one line each before exit 2."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from local_ccm.gosyntax import escape, go_quote
from local_ccm.records import dataclass

ProblemKind = Literal["invalid", "missing", "unknown", "argument", "syntax"]


@dataclass(frozen=True)
class Problem:
    """One user error; `str()` is the line printed on stderr."""

    flag: str | None
    message: str
    env_var: str | None = None
    kind: ProblemKind = "invalid"

    def __str__(self) -> str:
        # Escaping control characters keeps every problem on one stderr line.
        if self.env_var:
            return escape(f"invalid environment variable {self.env_var}: {self.message}")
        if self.kind == "invalid" and self.flag:
            return escape(f"invalid flag --{self.flag}: {self.message}")
        return escape(self.message)


def invalid(flag: str | None, reason: str) -> Problem:
    """`invalid flag --flag: reason`; with `flag=None` the reason is printed as it is."""
    return Problem(flag, reason)


def invalid_env(var: str, reason: str, flag: str | None = None) -> Problem:
    """`invalid environment variable VAR: reason`."""
    return Problem(flag, reason, env_var=var)


def missing(flag: str, env: Sequence[str] = ()) -> Problem:
    """`missing --node-name (or NODE_NAME)`."""
    alternatives = f" (or {' or '.join(env)})" if env else ""
    return Problem(flag, f"missing --{flag}{alternatives}", kind="missing")


def unexpected_argument(arg: str, hint: str | None = None) -> Problem:
    """`unexpected argument "x"`, with an optional hint in parentheses."""
    suffix = f" ({hint})" if hint else ""
    return Problem(None, f"unexpected argument {go_quote(arg)}{suffix}", kind="argument")


def usage_error(prog: str, problems: Sequence[Problem]) -> str:
    """The stderr text for exit 2: one line per problem, then where to get help."""
    return "\n".join([*(str(p) for p in problems), f"run '{prog} --help' for usage"])
