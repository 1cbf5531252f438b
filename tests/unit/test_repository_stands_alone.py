"""The repository stands alone: no tracked file cites a document that is not in it.

The code was written from design documents that were never part of this repository. A
comment that says "see §6.2 of agent.md" or "issue #3" sends an operator or contributor to
a text they cannot open, so the reason has to be written where it is needed instead. This
test fails on any tracked file that cites the design folder (``spec/<name>.md``, a bare
``agent.md``, ``lifecycle.md``, ``ipam.md``, ``deploy.md`` or ``stack.md`` that is not a
file of this repository), a section sign, the testing plan's file name, the shared folder
next to the checkout, or one of this project's own issue numbers. Public references such as
kubernetes/kubernetes#1234, squat/kilo#403 or "upstream issue 1234" are fine.

Run it alone with ``python tests/unit/test_repository_stands_alone.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[2]
THIS_FILE = PurePosixPath("tests/unit/test_repository_stands_alone.py")
# The only file allowed to spell the patterns out: this one.
ALLOWED = frozenset({THIS_FILE})

SPEC_NAMES = ("agent", "lifecycle", "ipam", "deploy", "stack")
_SIMPLE = re.compile(
    r"§"  # a section of a document that is not here
    r"|TESTING\.md"  # the testing plan
    r"|\.\./shared"  # the folder next to the checkout
    r"|(?<![\w/.$-])spec/"  # the design folder (not /spec/providerID or .spec/...)
)
# A spec file name, with whatever path is written in front of it.
_NAMED_DOC = re.compile(r"(?<![\w-])((?:[\w.-]+/)*)(" + "|".join(SPEC_NAMES) + r")\.md\b")
# "issue #3", "issues #4/#5", "Issue 5": the word before tells an upstream one apart.
# The word before is read from the line, not matched: an optional leading group makes the
# pattern try every position of every line, five times slower over the whole tree.
_ISSUE = re.compile(r"\b[Ii]ssues?\s+#?\d+")
_UPSTREAM_WORDS = frozenset({"upstream", "kubernetes", "go", "golang", "helm", "github"})


@dataclass(frozen=True)
class Finding:
    path: PurePosixPath
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text.strip()}"


def tracked_files(repo: Path) -> list[PurePosixPath]:
    """Every file git tracks in ``repo`` (the work tree's view, so deletions count)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    return [PurePosixPath(p) for p in out.decode().split("\0") if p]


def _resolves(path: PurePosixPath, written: str, tracked: frozenset[PurePosixPath]) -> bool:
    """A written ``docs/ipam.md`` (from the root) or ``ipam.md`` (next to ``path``) is ours."""
    target = PurePosixPath(written)
    return target in tracked or _normalise(path.parent / target) in tracked


def _normalise(path: PurePosixPath) -> PurePosixPath:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return PurePosixPath(*parts)


def _is_own_issue(line: str, match: re.Match[str]) -> bool:
    words = line[: match.start()].split()
    before = (words[-1] if words else "").lower().strip("([,;:")
    return before not in _UPSTREAM_WORDS and "/" not in before


def line_cites_outside(path: PurePosixPath, line: str, tracked: frozenset[PurePosixPath]) -> bool:
    """Does ``line`` of ``path`` cite a document that is not in the repository?"""
    if _SIMPLE.search(line):
        return True
    for m in _NAMED_DOC.finditer(line):
        if not _resolves(path, m.group(1) + m.group(2) + ".md", tracked):
            return True
    return any(_is_own_issue(line, m) for m in _ISSUE.finditer(line))


def findings(repo: Path) -> list[Finding]:
    files = tracked_files(repo)
    tracked = frozenset(files)
    found: list[Finding] = []
    for path in files:
        if path in ALLOWED or not (repo / path).is_file():
            continue
        try:
            text = (repo / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files cite nothing
        if not any(rx.search(text) for rx in (_SIMPLE, _NAMED_DOC, _ISSUE)):
            continue  # one pass over the whole file instead of one per line
        for number, line in enumerate(text.splitlines(), start=1):
            if line_cites_outside(path, line, tracked):
                found.append(Finding(path, number, line))
    return found


# ------------------------------------------------------------------ the pattern itself
TRACKED = frozenset({PurePosixPath("docs/ipam.md"), PurePosixPath("docs/design.md")})


def cites(line: str, path: str = "src/local_ccm/x.py") -> bool:
    return line_cites_outside(PurePosixPath(path), line, TRACKED)


def test_the_pattern_catches_every_kind_of_outside_reference() -> None:
    # Spelled with concatenation so that this file's own source shows how, not only what.
    for line in (
        "see spec/" + "agent.md for the rules",
        "(agent" + ".md " + "\u00a7" + "6.2)",
        "debounce (" + "\u00a7" + "6.2)",
        "tiers of TESTING" + ".md",
        "read ../" + "shared/spec",
        "the budget of issue " + "#3",
        "Issue" + " 5's budgets",
        "issues " + "#4/#5",
        "as lifecycle" + ".md says",
        "ipam" + ".md, rule 4",
    ):
        assert cites(line), line


def test_the_pattern_leaves_public_and_local_references_alone() -> None:
    for line in (
        'ops.append({"op": "add", "path": "/spec/providerID"})',
        "node.spec/podCIDRs",
        "CNI devices pick wrong addresses (squat/kilo#403, kubernetes/kubernetes#1234)",
        "an upstream issue 1234 describes it",
        "see kubernetes issue 98142",
        "More decisions: [docs/ipam.md](docs/ipam.md)",
        "the test_agent_startup benchmark",
    ):
        assert not cites(line), line
    assert not cites("[selector semantics](ipam.md)", "docs/design.md")
    assert cites("[selector semantics](ipam.md)", "src/local_ccm/ipam/run.py")


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    found = findings(REPO)
    assert not found, (
        "These lines cite a design document, a section or an issue that is not part of the "
        "repository. Write the reason itself instead (a public KEP, RFC or upstream issue is "
        "fine):\n" + "\n".join(str(f) for f in found)
    )


if __name__ == "__main__":
    results = findings(REPO)
    for finding in results:
        print(finding)
    sys.exit(1 if results else 0)
