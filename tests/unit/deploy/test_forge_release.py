"""`make forge-release` (scripts/forge_release.py): the release page gets dist/'s top-level
files, among them the Talos asset docs/install.md's URL names, and the version's CHANGELOG
section as notes; a wrong tag or a missing section is refused, exit 2."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from local_ccm import __version__

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "forge_release.py"


def _load() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))  # forge_release.py imports release.py beside it
    spec = importlib.util.spec_from_file_location("forge_release", SCRIPT)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


forge = _load()


def script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip


def test_the_notes_are_the_versions_changelog_section() -> None:
    changelog = (
        "# Changelog\n\n## [Unreleased]\n\n- next\n\n## [1.2.0]\n\n### Added\n\n- this\n\n"
        "## [1.1.0]\n\n- older\n\n[Unreleased]: https://x/compare\n[1.2.0]: https://x/1.2.0\n"
    )
    assert forge.notes(changelog, "1.2.0") == "### Added\n\n- this\n"
    assert forge.notes(changelog, "1.1.0") == "- older\n"
    assert forge.notes(changelog, "1.3.0") is None
    assert forge.notes((REPO / "CHANGELOG.md").read_text(), "0.4.0") is not None


def test_the_release_page_gets_the_top_level_files_of_dist(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "deploy" / "talos").mkdir(parents=True)
    names = ["SHA256SUMS", "local-ccm-talos.yaml", f"local-ccm-{__version__}.oci.tar",
             f"local-ccm-{__version__}.tgz"]  # fmt: skip
    for name in [*names, "deploy/local-ccm.yaml", "deploy/talos/local-ccm.yaml"]:
        (dist / name).write_text("x")
    done = script("--tag", f"v{__version__}", "--dist", str(dist), "--dry-run")
    assert done.returncode == 0, done.stderr
    create = shlex.split(done.stdout.splitlines()[0])
    assert create[:5] == ["gh", "release", "create", f"v{__version__}", "--verify-tag"]
    assert [Path(a).name for a in create if a.startswith(str(dist))] == sorted(names)
    assert "--clobber" in done.stdout.splitlines()[1]


def test_a_wrong_tag_or_no_release_is_refused(tmp_path: Path) -> None:
    done = script("--tag", "v9.9.9", "--dist", str(tmp_path / "dist"), "--dry-run")
    assert done.returncode == 2
    assert "TAG=v9.9.9 is not this version's tag" in done.stderr
    assert "run `make release` first" in done.stderr
    assert done.stdout == ""
    changelog = "## [Unreleased]\n"
    (problem,) = [
        p for p in forge.problems("v1.0.0", "1.0.0", tmp_path, changelog) if "CHANGELOG" in p
    ]
    assert "no `## [1.0.0]` section" in problem
