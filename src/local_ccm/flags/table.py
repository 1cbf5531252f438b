"""Flag tables: one `Flag` per option and the `FlagSet` of one binary."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field, replace
from types import MappingProxyType
from typing import Any, Literal

from local_ccm.records import dataclass

FlagKind = Literal["string", "bool", "int", "float", "duration"]
HELP_NAMES = frozenset({"h", "help"})
_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]*")


@dataclass(frozen=True)
class Flag:
    """One flag. `default` is typed: str, bool, int, float, or float seconds for a duration;
    `None` means "unset". `env` lists fallback variables in priority order. `value` turns the
    Go-typed value into what the options hold (a bind address, a tuple of CIDRs...), raising
    `ValidationError` or `GoSyntaxError` with the reason; it must accept the default.
    `accumulates`: a comma list whose repeats on the command line add up (pflag's string
    slices, kube-controller-manager's `--controllers`) instead of the last one winning."""

    name: str
    kind: FlagKind
    default: object
    help: str
    env: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    value: Callable[[Any], object] | None = None
    accumulates: bool = False

    def __post_init__(self) -> None:
        if self.accumulates and self.kind != "string":
            raise TypeError(f"flag {self.name}: only a string flag accumulates")
        for name in (self.name, *self.aliases):
            if not _NAME.fullmatch(name):
                raise ValueError(f"bad flag name {name!r}")
        if self.default is not None and not _default_fits(self.kind, self.default):
            raise TypeError(f"flag {self.name}: default {self.default!r} is not a {self.kind}")
        if self.default is not None:
            self.convert(self.initial)  # a default its own parser rejects is a programming error

    @property
    def initial(self) -> object:
        """The default as `parse` delivers it (durations and floats as float)."""
        if self.kind in ("float", "duration") and isinstance(self.default, int | float):
            return float(self.default)
        return self.default

    def convert(self, value: object) -> object:
        return value if self.value is None else self.value(value)


def _default_fits(kind: FlagKind, default: object) -> bool:
    if kind == "string":
        return isinstance(default, str)
    if kind == "bool":
        return isinstance(default, bool)
    if kind == "int":
        return isinstance(default, int) and not isinstance(default, bool)
    return isinstance(default, int | float) and not isinstance(default, bool)


@dataclass(frozen=True)
class Section:
    """A titled part of `--help`: the flags named (canonical names), listed in name order."""

    title: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class FlagSet:
    """The flags of one binary. Declaring a flag twice, or a flag named like `-h`/`--help`
    (or `--version` when a version is given), is a programming error (ValueError), as is a
    section naming a flag the set does not declare. Without sections `--help` is one list."""

    prog: str
    flags: Sequence[Flag]
    subcommands: frozenset[str] = frozenset()
    version: str | None = None
    sections: tuple[Section, ...] = ()
    _index: Mapping[str, Flag] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))
        object.__setattr__(self, "_index", MappingProxyType(self._build_index()))
        declared = {flag.name for flag in self.flags}
        strays = [n for section in self.sections for n in section.names if n not in declared]
        if strays:
            raise ValueError(f"{self.prog}: sections name undeclared flags {strays}")

    def _build_index(self) -> dict[str, Flag]:
        index: dict[str, Flag] = {}
        for flag in self.flags:
            for name in (flag.name, *flag.aliases):
                if name in index or name in self.reserved():
                    raise ValueError(f"{self.prog}: flag name {name!r} declared twice or reserved")
                index[name] = flag
        return index

    def reserved(self) -> frozenset[str]:
        """The built-in spellings: help, and version when there is one."""
        return HELP_NAMES | ({"version"} if self.version is not None else set())

    def lookup(self, name: str) -> Flag | None:
        """The flag called `name` or having it as an alias."""
        return self._index.get(name)

    def names(self) -> tuple[str, ...]:
        """Every spelling the parser accepts (without dashes), for "did you mean" hints."""
        return (*self._index, *sorted(self.reserved()))


def customize(
    flags: Iterable[Flag],
    env: Mapping[str, tuple[str, ...]] | None = None,
    aliases: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Flag]:
    """A shared group of flags with one binary's environment variables and extra spellings
    (both keyed by canonical flag name)."""
    env, aliases = env or {}, aliases or {}
    return [replace(f, env=env.get(f.name, ()), aliases=aliases.get(f.name, ())) for f in flags]


def unite(prog: str, tables: Iterable[Sequence[Flag]], version: str | None = None) -> FlagSet:
    """One binary's table from several (shared groups, components): a flag defined by more
    than one table is kept once, as the first table defines it; an alias of a later flag that
    an earlier one already spells is dropped, so every spelling keeps one meaning."""
    kept: dict[str, Flag] = {}
    spelled: set[str] = set()
    for flag in (flag for table in tables for flag in table):
        if flag.name in kept:
            continue
        aliases = tuple(alias for alias in flag.aliases if alias not in spelled)
        kept[flag.name] = replace(flag, aliases=aliases)
        spelled.update((flag.name, *aliases))
    return FlagSet(prog, list(kept.values()), version=version)
