"""Go-compatible command-line parsing shared by the binaries.

The syntax is that of Go's standard `flag` package, because manifests written for the Go
originals must keep working. Two deliberate differences [fix]: parsing never stops at the first
error or positional argument, and every problem is collected, so `--dry-run false --v=2`
reports the stray `false` and still applies `--v=2`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from types import MappingProxyType
from typing import TypeVar

from local_ccm.flags.problems import Problem, invalid, invalid_env, unexpected_argument
from local_ccm.flags.table import HELP_NAMES, Flag, FlagSet
from local_ccm.gosyntax import (
    BOOL_SPELLINGS,
    GoSyntaxError,
    escape,
    go_quote,
    parse_go_bool,
    parse_go_duration,
    parse_go_float,
    parse_go_int,
)
from local_ccm.records import dataclass

T = TypeVar("T")

# klog flags registered by the Go originals: accepted and ignored.
KLOG_BOOL_FLAGS = frozenset(
    {"logtostderr", "alsologtostderr", "skip_headers", "skip_log_headers", "add_dir_header"}
    | {"one_output"}
)
KLOG_VALUE_FLAGS = frozenset(
    {"stderrthreshold", "log_dir", "log_file", "log_file_max_size", "log_backtrace_at", "vmodule"}
)
_CONVERTERS: Mapping[str, Callable[[str], object]] = MappingProxyType(
    {
        "string": str,
        "bool": parse_go_bool,
        "int": parse_go_int,
        "float": parse_go_float,
        "duration": parse_go_duration,
    }
)


@dataclass(frozen=True)
class Parsed:
    """The result of `parse`. `values` has every declared flag (canonical name); `sources`
    says where each value came from: "flag", "env:<VAR>" or "default"; `explicit` holds
    the flags whose value came from the command line or the environment."""

    values: Mapping[str, object]
    sources: Mapping[str, str]
    explicit: frozenset[str]
    subcommand: str | None = None
    problems: tuple[Problem, ...] = ()
    ignored_klog: tuple[str, ...] = ()
    help_requested: bool = False
    version_requested: bool = False
    # The spelling (canonical name or alias) a flag was last given as on the command line.
    spellings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    flagset: FlagSet | None = field(default=None, repr=False, compare=False)

    def flag(self, name: str) -> Flag:
        """The declaration of flag `name` (its value parser, default, aliases)."""
        flag = self.flagset.lookup(name) if self.flagset is not None else None
        if flag is None:
            raise KeyError(name)
        return flag

    def given_as(self, name: str) -> str:
        """How the user spelled flag `name` (an alias, say), for problems about its value;
        the canonical name when it was not on the command line."""
        return self.spellings.get(name, name)

    def about_given(self, problem: Problem) -> bool:
        """Whether `problem` is the parser's own or about a flag or variable that was set (on
        the command line or in the environment), not about a default."""
        if problem in self.problems or problem.env_var:
            return True
        flag = self.flagset.lookup(problem.flag) if problem.flag and self.flagset else None
        return flag is not None and flag.name in self.explicit and problem.kind != "missing"

    def get_str(self, name: str) -> str:
        return _typed(self.values[name], str, name)

    def get_bool(self, name: str) -> bool:
        return _typed(self.values[name], bool, name)


def _typed(value: object, kind: type[T], name: str) -> T:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TypeError(f"flag {name} holds {type(value).__name__}, not {kind.__name__}")
    return value


@dataclass
class _Acc:
    """Mutable state of one `parse` call (cursor and findings); it never escapes that call."""

    args: list[str]
    pos: int = 0
    values: dict[str, object] = field(default_factory=dict)
    attempted: set[str] = field(default_factory=set)
    # canonical name -> spelling -> (raw, value): what each spelling of a flag last said
    spelled: dict[str, dict[str, tuple[str, object]]] = field(default_factory=dict)
    last_spelling: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    klog: list[str] = field(default_factory=list)
    help: bool = False
    version: bool = False

    def take(self) -> str | None:
        """The next argument, consumed; None at the end."""
        if self.pos >= len(self.args):
            return None
        self.pos += 1
        return self.args[self.pos - 1]

    def set(self, flag: Flag, raw: str, spelling: str) -> None:
        self.attempted.add(flag.name)
        self.last_spelling[flag.name] = spelling
        try:
            value = _CONVERTERS[flag.kind](raw)
        except GoSyntaxError as err:
            self.problems.append(invalid(spelling, str(err)))
            return
        if flag.accumulates and flag.name in self.values:
            value = f"{self.values[flag.name]},{value}"
        self.values[flag.name] = value
        self.spelled.setdefault(flag.name, {})[spelling] = (raw, value)

    def ignore_klog(self, name: str) -> None:
        if name not in self.klog:
            self.klog.append(name)


def parse(flagset: FlagSet, argv: Sequence[str], env: Mapping[str, str]) -> Parsed:
    """Parse `argv` (without the program name) with Go `flag` rules and the environment
    fallbacks. Never raises for user errors: they are all in `Parsed.problems`."""
    acc = _Acc(list(argv))
    subcommand = acc.args[0] if acc.args and acc.args[0] in flagset.subcommands else None
    acc.pos = 1 if subcommand else 0
    _scan(flagset, acc)
    acc.problems.extend(_alias_conflicts(acc))
    values, sources = _resolve(flagset, env, acc)
    explicit = frozenset(name for name, src in sources.items() if src != "default")
    return Parsed(
        values=MappingProxyType(values),
        sources=MappingProxyType(sources),
        explicit=explicit,
        subcommand=subcommand,
        problems=tuple(acc.problems),
        ignored_klog=tuple(acc.klog),
        help_requested=acc.help,
        version_requested=acc.version,
        spellings=MappingProxyType(dict(acc.last_spelling)),
        flagset=flagset,
    )


def _alias_conflicts(acc: _Acc) -> list[Problem]:
    """A flag given under two spellings (its name and an alias, or two aliases) must say the
    same thing: which one "wins" would otherwise depend on argument order, silently."""
    problems = []
    for name, spelled in acc.spelled.items():
        if len({repr(value) for _, value in spelled.values()}) < 2:
            continue
        given = ", ".join(f"--{spelling}={go_quote(raw)}" for spelling, (raw, _) in spelled.items())
        problems.append(
            invalid(name, f"given with different values: {given} (aliases of one flag; give one)")
        )
    return problems


def _scan(flagset: FlagSet, acc: _Acc) -> None:
    bare_bool: str | None = None  # a bool flag given without "=", for the "use --x=false" hint
    while (arg := acc.take()) is not None:
        if arg == "--":
            acc.problems.extend(unexpected_argument(rest) for rest in acc.args[acc.pos :])
            return
        if len(arg) < 2 or arg[0] != "-":
            acc.problems.append(_positional(flagset, arg, bare_bool))
            bare_bool = None
        else:
            bare_bool = _one_flag(flagset, arg, acc)


def _positional(flagset: FlagSet, arg: str, bare_bool: str | None) -> Problem:
    if bare_bool is not None and arg in BOOL_SPELLINGS:
        return unexpected_argument(arg, f"use --{bare_bool}={arg}")
    if arg in flagset.subcommands:
        return unexpected_argument(arg, f"the sub-command {arg} must be the first argument")
    return unexpected_argument(arg)


def _one_flag(flagset: FlagSet, arg: str, acc: _Acc) -> str | None:
    """Handle the flag `arg`. Returns the name of a boolean given without a value."""
    body = arg[2:] if arg.startswith("--") else arg[1:]
    if not body or body[0] in "-=":
        acc.problems.append(Problem(None, f"bad flag syntax: {escape(arg)}", kind="syntax"))
        return None
    name, eq, value = body.partition("=")
    flag = flagset.lookup(name)
    if flag is None:
        return _undeclared(flagset, name, value if eq else None, acc)
    if flag.kind == "bool":
        acc.set(flag, value if eq else "true", name)
        return None if eq else name
    given = value if eq else acc.take()
    if given is None:
        acc.attempted.add(flag.name)
        acc.problems.append(invalid(name, "needs an argument"))
    else:
        acc.set(flag, given, name)
    return None


def _undeclared(flagset: FlagSet, name: str, value: str | None, acc: _Acc) -> str | None:
    """Help, version, klog and unknown flags."""
    if name in HELP_NAMES:
        acc.help = True  # Go's flag package ignores any "=value" here too
        return None
    if (name == "version" and flagset.version is not None) or name in KLOG_BOOL_FLAGS:
        return _builtin_bool(name, value, acc)
    if name in KLOG_VALUE_FLAGS:
        acc.ignore_klog(name)
        if value is None and acc.take() is None:
            acc.problems.append(invalid(name, "needs an argument"))
        return None
    acc.problems.append(_unknown(flagset, name))
    # A value after an unknown flag most likely belongs to it; reporting it as a second,
    # "unexpected argument" problem would only hide the real mistake.
    if value is None and acc.pos < len(acc.args) and not acc.args[acc.pos].startswith("-"):
        acc.take()
    return None


def _builtin_bool(name: str, value: str | None, acc: _Acc) -> str | None:
    try:
        on = parse_go_bool(value) if value is not None else True
    except GoSyntaxError as err:
        acc.problems.append(invalid(name, str(err)))
        return None
    if name == "version":
        acc.version = on
    else:
        acc.ignore_klog(name)
    return name if value is None else None


def _unknown(flagset: FlagSet, name: str) -> Problem:
    spellings = flagset.names()
    normalized = name.replace("_", "-")
    close = [normalized] if normalized in spellings else []
    import difflib  # noqa: PLC0415  (lazy: 0.2 MiB, needed only for a mistyped flag)

    close = close or difflib.get_close_matches(name, spellings, n=1, cutoff=0.75)
    hint = f" (did you mean --{close[0]}?)" if close else ""
    return Problem(None, f"unknown flag --{escape(name)}{hint}", kind="unknown")


def _resolve(
    flagset: FlagSet, env: Mapping[str, str], acc: _Acc
) -> tuple[dict[str, object], dict[str, str]]:
    """Flag beats environment beats default."""
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    for flag in flagset.flags:
        if flag.name in acc.values:
            values[flag.name], sources[flag.name] = acc.values[flag.name], "flag"
        elif flag.name in acc.attempted:  # given but invalid: already reported
            values[flag.name], sources[flag.name] = flag.initial, "default"
        else:
            values[flag.name], sources[flag.name] = _from_env(flag, env, acc.problems)
    return values, sources


def _from_env(flag: Flag, env: Mapping[str, str], problems: list[Problem]) -> tuple[object, str]:
    # An empty variable counts as unset: Kubernetes manifests often template optional
    # variables to "" (and Go code commonly reads them with `os.Getenv(...) != ""`).
    var = next((name for name in flag.env if env.get(name)), None)
    if var is None:
        return flag.initial, "default"
    try:
        return _CONVERTERS[flag.kind](env[var]), f"env:{var}"
    except GoSyntaxError as err:
        problems.append(invalid_env(var, str(err), flag.name))
        return flag.initial, "default"
