"""The release version: defined once, in ``src/local_ccm/__init__.py`` ``__version__``.

pyproject.toml reads it (``dynamic = ["version"]``); the places that cannot read it (the chart's
``version``/``appVersion``, the Containerfile's ``ARG VERSION`` default, the sample transcript in
docs/development.md, the install commands of README.md and the chart's README, the release tag
every link of the chart's README points at) are copies this script checks and rewrites:

    python scripts/version.py            print the version
    python scripts/version.py check      exit 1 and list every copy that differs (make lint)
    python scripts/version.py bump X.Y.Z rewrite the definition and every copy (make bump), and
                                         open CHANGELOG.md's ``## [X.Y.Z] - <date>`` section
                                         with what [Unreleased] held (`release_changelog`)

The chart version equals the package version, and appVersion is ``v<version>``, the image tag.
Releases start at 0.4.0, above cozystack/local-ccm's last release (v0.3.0), so `helm history`,
Renovate and support threads can tell this project's releases from the Go original's.
"""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
_V = r"(\d+\.\d+\.\d+)"


@dataclass(frozen=True)
class Copy:
    """One place that holds the version: a file, a regex whose group 1 is the version, and how
    the version is written there."""

    path: str
    pattern: str
    form: Callable[[str], str] = str

    def read(self) -> str | None:
        """The version written there; every occurrence must agree (a file with two that
        differ reads as both, so the check reports it)."""
        found = re.findall(self.pattern, (REPO / self.path).read_text(), re.MULTILINE)
        values = sorted({m if isinstance(m, str) else m[0] for m in found})
        return " and ".join(values) if values else None

    def write(self, version: str) -> None:
        file = REPO / self.path
        text = file.read_text()
        new, count = re.subn(
            self.pattern,
            lambda m: m.group(0).replace(m.group(1), self.form(version)),
            text,
            flags=re.MULTILINE,
        )
        if count == 0:
            raise SystemExit(f"{self.path}: no match for {self.pattern!r}")
        file.write_text(new)


DEFINITION = Copy("src/local_ccm/__init__.py", rf'^__version__ = "{_V}"$')
COPIES = (
    Copy("charts/local-ccm/Chart.yaml", rf"^version: {_V}$"),
    Copy("charts/local-ccm/Chart.yaml", r"^appVersion: (v\d+\.\d+\.\d+)$", lambda v: f"v{v}"),
    Copy("Containerfile", rf"^ARG VERSION={_V}$"),
    Copy("docs/development.md", rf"starting local-ccm {_V} "),
    # The packaged chart has no docs/: its README links to the repository at the release tag.
    Copy(
        "charts/local-ccm/README.md",
        r"github\.com/local-ccm/local-ccm/(?:blob|tree)/(v\d+\.\d+\.\d+)/",
        lambda v: f"v{v}",
    ),
    Copy("charts/local-ccm/README.md", rf"oci://\S+/local-ccm --version {_V}\b"),
    Copy("README.md", rf"oci://\S+/local-ccm --version {_V}\b"),
)


def current() -> str:
    version = DEFINITION.read()
    if version is None:
        raise SystemExit(f'{DEFINITION.path}: no __version__ = "X.Y.Z" line')
    return version


def problems(version: str) -> list[str]:
    """Every copy that does not hold ``version`` (in its form)."""
    found = []
    for copy in COPIES:
        value = copy.read()
        if value != copy.form(version):
            found.append(f"{copy.path}: {value!r}, expected {copy.form(version)!r}")
    return found


UNRELEASED = "## [Unreleased]"
RELEASES = "https://github.com/local-ccm/local-ccm"


def release_changelog(text: str, version: str, today: datetime.date) -> str:
    """CHANGELOG.md with what ``[Unreleased]`` holds as the ``## [version] - today`` section,
    an empty ``[Unreleased]`` above it and the links at the bottom moved (Keep a Changelog).
    Unchanged when the version's section exists already (a bump repeated, or back to a released
    version); the release's tag check needs that section (scripts/release.py)."""
    if re.search(rf"^## \[{re.escape(version)}\]", text, re.MULTILINE) or UNRELEASED not in text:
        return text
    text = text.replace(UNRELEASED, f"{UNRELEASED}\n\n## [{version}] - {today.isoformat()}", 1)
    link = re.search(r"^\[Unreleased\]: \S+/compare/v(\d+\.\d+\.\d+)\.\.\.HEAD$", text,
                     re.MULTILINE)  # fmt: skip
    if link is None:
        return text
    previous = link.group(1)
    return text.replace(link.group(0), f"[Unreleased]: {RELEASES}/compare/v{version}...HEAD\n"
                        f"[{version}]: {RELEASES}/compare/v{previous}...v{version}")  # fmt: skip


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(current())
        return 0
    if argv[0] == "check" and len(argv) == 1:
        wrong = problems(current())
        for line in wrong:
            print(f"version mismatch: {line} (run `make bump VERSION={current()}`)")
        return 1 if wrong else 0
    if argv[0] == "bump" and len(argv) == 2:
        version = argv[1].removeprefix("v")
        if not SEMVER.match(version):
            print(f"not a version X.Y.Z: {argv[1]!r}", file=sys.stderr)
            return 2
        for copy in (DEFINITION, *COPIES):
            copy.write(version)
        changelog = REPO / "CHANGELOG.md"
        if changelog.exists():
            text = changelog.read_text()
            changelog.write_text(release_changelog(text, version, datetime.date.today()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
