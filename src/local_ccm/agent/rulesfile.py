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
from collections.abc import Callable, Sequence
from typing import Any

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
    # Keys given twice (the last one would win: a rule or setting silently lost) and numbers
    # YAML reads as other numbers; listed with the rules' own problems.
    problems: list[str] = []
    try:
        document = json.loads(text, object_pairs_hook=_unique(problems))
    except ValueError as exc:
        loaded = _load_yaml(path, text, problems)
        if isinstance(loaded, list):
            json_like = text.lstrip().startswith(("{", "["))
            return [*loaded, f"{path}: not valid JSON either: {exc}"] if json_like else loaded
        document = loaded[0]
    loaded_rules = parse_rules(document, label_domains=label_domains)
    if isinstance(loaded_rules, list):
        problems += loaded_rules
    if problems:
        return [f"{path}: {p}" for p in problems]
    return loaded_rules


def _unique(problems: list[str]) -> Callable[[list[tuple[str, object]]], dict[str, object]]:
    """A JSON object hook that notes each key given twice in one object."""

    def pairs_to_dict(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for key, value in pairs:
            if key in seen:
                problems.append(f"duplicate key {json.dumps(key)} in one object")
            seen[key] = value
        return seen

    return pairs_to_dict


def _load_yaml(
    path: str | os.PathLike[str], text: str, problems: list[str]
) -> tuple[object] | list[str]:
    """The document, noting what it cannot say unambiguously in ``problems``; or a syntax
    error."""
    import yaml  # noqa: PLC0415  (lazy: only agents given YAML rules pay for the parser)

    class UniqueKeys(yaml.SafeLoader):
        """safe_load that notes a key given twice in one mapping (it keeps the last), and an
        unquoted number YAML reads as another one (07 is 7, 010 is 8, 0x1F is 31, 1:30 is 90):
        the label value would silently differ from what the file says."""

        def construct_yaml_int(self, node: Any) -> int:
            value: int = super().construct_yaml_int(node)
            if node.value != str(value):
                mark = node.start_mark
                problems.append(f"{node.value} at line {mark.line + 1}, column "
                                f"{mark.column + 1} is read by YAML as the number {value}; "
                                f"quote it ('{node.value}')")  # fmt: skip
            return value

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, str | int | float | bool) and key in seen:
                    mark = key_node.start_mark
                    problems.append(f"duplicate key {key!r} at line {mark.line + 1}, "
                                    f"column {mark.column + 1}")  # fmt: skip
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    UniqueKeys.add_constructor("tag:yaml.org,2002:int", UniqueKeys.construct_yaml_int)
    try:
        document = yaml.load(text, Loader=UniqueKeys)  # a SafeLoader
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        return [f"{path}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}"]
    return (document,)


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
