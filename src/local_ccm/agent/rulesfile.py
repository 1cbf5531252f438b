"""The `--metadata-rules` file: loaded at start, reloaded when it changes.

A ConfigMap volume is updated by the kubelet swapping a symlink (`..data`), so a change is seen
as a new inode, size or mtime of the resolved path. The agent asks `changed()` on its reconcile
tick: no thread, no inotify, nothing that wakes an idle agent. A rules file that fails to load
at start is exit 2 (every problem listed); a bad reload keeps the last good rules, and the caller
reports it (Event and metric).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from local_ccm.agent.core.metadata import DEFAULT_LABEL_DOMAIN, Rules, parse_rules
from local_ccm.records import dataclass


@dataclass(frozen=True)
class Stamp:
    inode: int
    size: int
    mtime_ns: int


def stamp_of(path: str | os.PathLike[str]) -> Stamp | None:
    try:
        st = os.stat(path)  # follows the ConfigMap's symlinks
    except OSError:
        return None
    return Stamp(st.st_ino, st.st_size, st.st_mtime_ns)


def load_rules(
    path: str | os.PathLike[str], label_domains: Sequence[str] = (DEFAULT_LABEL_DOMAIN,)
) -> Rules | list[str]:
    """Rules from the file, or every problem (unreadable file, YAML syntax, rule errors).

    JSON (what the chart writes) is read without the YAML parser, which would cost every agent
    ~2.7 MiB of its 32 MiB budget; anything else is YAML."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{path}: cannot read: {exc}"]
    try:
        document = json.loads(text)
    except ValueError:
        loaded = _load_yaml(path, text)
        if isinstance(loaded, list):
            return loaded
        document = loaded[0]
    loaded_rules = parse_rules(document, label_domains=label_domains)
    if isinstance(loaded_rules, list):
        return [f"{path}: {p}" for p in loaded_rules]
    return loaded_rules


def _load_yaml(path: str | os.PathLike[str], text: str) -> tuple[object] | list[str]:
    import yaml  # noqa: PLC0415  (lazy: only agents given YAML rules pay for the parser)

    try:
        return (yaml.safe_load(text),)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        return [f"{path}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}"]


@dataclass
class RulesFile:
    """The last good rules and the stamp of the file they came from."""

    path: str  # os.path, not pathlib: importing pathlib would cost every agent about 170 KiB
    rules: Rules
    stamp: Stamp | None
    label_domains: tuple[str, ...] = (DEFAULT_LABEL_DOMAIN,)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], label_domains: Sequence[str]
    ) -> RulesFile | list[str]:
        path = os.fspath(path)
        stamp = stamp_of(path)
        loaded = load_rules(path, label_domains)
        if isinstance(loaded, list):
            return loaded
        return cls(path, loaded, stamp, tuple(label_domains))

    def reload(self) -> list[str] | None:
        """Reload when the file changed: None when unchanged or reloaded, else the problems
        (the last good rules stay in force)."""
        stamp = stamp_of(self.path)
        if stamp == self.stamp:
            return None
        self.stamp = stamp
        loaded = load_rules(self.path, self.label_domains)
        if isinstance(loaded, list):
            return loaded
        self.rules = loaded
        return None

    def refresh(self) -> bool | list[str]:
        """``reload`` for the reconcile tick: True when new rules are in force, False when the
        file did not change, else the problems (for the Event and the reloads metric)."""
        before = self.rules
        problems = self.reload()
        return problems if problems else self.rules is not before
