"""Attach a release's files to the forge's release page for its tag (`make forge-release
TAG=vX.Y.Z`, the release workflow's last step), with gh.

docs/install.md sends Talos users to ``releases/download/v<version>/local-ccm-talos.yaml``: a
file of the release page, which only exists once something uploads it. The assets are the files
at the top of dist/ (a release page is flat: the image archive and its digest, the SBOM, the
chart, the wheel and sdist, ``local-ccm-talos.yaml`` and ``SHA256SUMS``; the rendered
``deploy/`` files stay in the repository at the tag, where the static-manifest URLs point); the
notes are the version's CHANGELOG.md section. The release is created (``--verify-tag``: the tag
must exist on the forge) or, when it exists already (a workflow run again), its assets are
replaced (``--clobber``). ``--dry-run`` prints the commands. gh reads ``GH_TOKEN``.

After downloading the assets, ``sha256sum -c --ignore-missing SHA256SUMS`` checks them (the
``deploy/`` lines name files that are not assets).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from release import ReleaseError, read_version  # a sibling: run from scripts/, as `make` does

REPO = Path(__file__).resolve().parent.parent


def notes(changelog: str, version: str) -> str | None:
    """The body of CHANGELOG.md's ``## [version]`` section, or None."""
    found = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|^\[[^\]]+\]: |\Z)",
                      changelog, re.M | re.S)  # fmt: skip
    return found.group(1).strip() + "\n" if found else None


def assets(dist: Path) -> list[Path]:
    """The files at the top of dist/: what a flat release page holds."""
    return sorted(p for p in dist.iterdir() if p.is_file())


def create(gh: str, tag: str, version: str, notes_file: str, files: Sequence[Path]) -> list[str]:
    return [gh, "release", "create", tag, "--verify-tag", "--title", f"local-ccm {version}",
            "--notes-file", notes_file, *map(str, files)]  # fmt: skip


def upload(gh: str, tag: str, files: Sequence[Path]) -> list[str]:
    return [gh, "release", "upload", tag, "--clobber", *map(str, files)]


def problems(tag: str, version: str, dist: Path, changelog: str) -> list[str]:
    found = []
    if tag != f"v{version}":
        found.append(f"TAG={tag or '(empty)'} is not this version's tag, v{version}")
    if notes(changelog, version) is None:
        found.append(f"CHANGELOG.md has no `## [{version}]` section for the release notes")
    if not (dist / "SHA256SUMS").is_file():
        found.append(f"no {dist}/SHA256SUMS: run `make release` first")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="", help="the git tag, vX.Y.Z (TAG)")
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="default: dist/")
    parser.add_argument("--gh", default="gh")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    try:
        version = read_version()
    except ReleaseError as exc:
        print(f"forge-release: {exc}", file=sys.stderr)
        return 2
    changelog = (REPO / "CHANGELOG.md").read_text()
    found = problems(args.tag, version, args.dist, changelog)
    if found:
        print("forge-release: cannot start:", file=sys.stderr)
        for problem in found:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    files = assets(args.dist)
    with tempfile.NamedTemporaryFile("w", prefix="local-ccm-notes-", suffix=".md") as body:
        body.write(notes(changelog, version) or "")
        body.flush()
        if args.dry_run:
            print(shlex.join(create(args.gh, args.tag, version, "<notes>", files)))
            print(f"# or, when the release exists: {shlex.join(upload(args.gh, args.tag, files))}")
            return 0
        exists = subprocess.run([args.gh, "release", "view", args.tag], capture_output=True,
                                check=False).returncode == 0  # fmt: skip
        argv_ = (upload(args.gh, args.tag, files) if exists
                 else create(args.gh, args.tag, version, body.name, files))  # fmt: skip
        print(f"$ {shlex.join(argv_)}", flush=True)
        done = subprocess.run(argv_, check=False)
        return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
