"""`--help` and `--version` text, in the layout of Go's `flag.PrintDefaults`."""

from __future__ import annotations

import textwrap

from local_ccm.flags.scan import KLOG_BOOL_FLAGS, KLOG_VALUE_FLAGS
from local_ccm.flags.table import Flag, FlagSet
from local_ccm.gosyntax import format_go_duration, go_quote


def format_version(flagset: FlagSet, python_version: str) -> str:
    """`local-ccm <version> (python <x.y.z>)`."""
    return f"{flagset.prog} {flagset.version or 'unknown'} (python {python_version})"


def format_usage(flagset: FlagSet) -> str:
    """Usage text, flags sorted by name: one list, or under each section's title (a flag no
    section names last, under "Other flags")."""
    sub = f" [{'|'.join(sorted(flagset.subcommands))}]" if flagset.subcommands else ""
    lines = [f"Usage: {flagset.prog}{sub} [flags]"]
    for title, members in _sections(flagset):
        lines += ["", f"{title}:"]
        lines += [_usage_entry(flag) for flag in sorted(members, key=lambda f: f.name)]
    lines.append("  -h, -help\n    \tPrint this help and exit.")
    if flagset.version is not None:
        lines.append("  -version\n    \tPrint the version and exit.")
    klog = " ".join(f"-{name}" for name in sorted(KLOG_BOOL_FLAGS | KLOG_VALUE_FLAGS))
    lines += ["", *textwrap.wrap(f"Accepted for compatibility and ignored (klog): {klog}", 78)]
    return "\n".join(lines) + "\n"


def _sections(flagset: FlagSet) -> list[tuple[str, list[Flag]]]:
    if not flagset.sections:
        return [("Flags", list(flagset.flags))]
    by_name = {flag.name: flag for flag in flagset.flags}
    found = [(s.title, [by_name[n] for n in s.names]) for s in flagset.sections]
    placed = {n for section in flagset.sections for n in section.names}
    others = [flag for flag in flagset.flags if flag.name not in placed]
    return [*found, ("Other flags", others)]


def _usage_entry(flag: Flag) -> str:
    metavar = flag.metavar or ("" if flag.kind == "bool" else flag.kind)
    head = f"  -{flag.name}" + (f" {metavar}" if metavar else "")
    # Go puts the help of a one-letter flag without a type on the same line.
    sep = "\t" if len(head) <= 4 else "\n    \t"
    notes = [_default_note(flag)]
    notes += [f"[alias: {', '.join('-' + a for a in flag.aliases)}]"] if flag.aliases else []
    notes += [f"[env: {', '.join(flag.env)}]"] if flag.env else []
    text = " ".join(part for part in (flag.help, *notes) if part)
    return head + sep + text.replace("\n", "\n    \t")


def _default_note(flag: Flag) -> str:
    value = flag.default
    if value is None or value in ("", 0, False):  # Go omits zero values
        return ""
    if flag.kind == "string":
        return f"(default {go_quote(str(value))})"
    if flag.kind == "duration" and isinstance(value, int | float):
        return f"(default {format_go_duration(value)})"
    if flag.kind == "bool":
        return "(default true)"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return f"(default {int(value)})"
    return f"(default {value})"
