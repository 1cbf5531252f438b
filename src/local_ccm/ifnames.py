"""Linux interface names and the shell-style globs that select them, as the agent's
``--*-ip-interfaces`` flags and a pool's ``spec.l2Announcement.interfaces`` write them.

Pure, no I/O. `parse_glob` returns the glob or raises `ValidationError` (from
`local_ccm.validate`) with the reason.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Final

from local_ccm.gosyntax import go_quote
from local_ccm.validate import ValidationError

# Linux interface names have at most 15 characters (IFNAMSIZ is 16 with the terminating NUL).
IFNAMSIZ: Final = 15
_GLOB_MAGIC = frozenset("*?[")


def parse_glob(pattern: str) -> str:
    """An interface-name pattern (``*``, ``?``, ``[...]``) matching whole names."""
    opening = pattern.find("[")
    if not pattern:
        reason = "empty: an interface name has at least one character"
    elif any(c.isspace() or c == "/" for c in pattern):
        reason = "interface names contain no '/' or whitespace"
    elif opening >= 0 and pattern.find("]", opening + 2) < 0:
        reason = "unclosed '[' (a character class is written [...])"
    elif not _GLOB_MAGIC.intersection(pattern) and len(pattern) > IFNAMSIZ:
        reason = f"can never match: interface names have at most {IFNAMSIZ} characters"
    else:
        return pattern
    raise ValidationError(f"{go_quote(pattern)}: {reason}")


def interface_matches(name: str, pattern: str) -> bool:
    """`fnmatchcase`, without compiling a regular expression for plain names and `prefix*`
    globs, which make up the agent's default exclusions (compiling those 24 patterns cost about
    1 ms of every agent start)."""
    plain = pattern.removesuffix("*")
    if _GLOB_MAGIC.intersection(plain):
        return fnmatchcase(name, pattern)
    return name.startswith(plain) if len(plain) < len(pattern) else name == pattern
