"""The version is defined once and every copy agrees. `make lint` runs the same check; this keeps
`make test` honest for a change made without it."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import local_ccm

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "local-ccm"
#: cozystack/local-ccm's last release: ours must sort above it.
GO_ORIGINAL_LAST = (0, 3, 0)


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_every_copy_of_the_version_agrees() -> None:
    done = _script("scripts/version.py", "check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_chart_version_and_app_version_follow_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == local_ccm.__version__
    assert chart["appVersion"] == f"v{local_ccm.__version__}"


def test_the_version_is_above_every_release_of_the_go_original() -> None:
    version = tuple(int(p) for p in local_ccm.__version__.split("."))
    assert version > GO_ORIGINAL_LAST, local_ccm.__version__


def _copy_of_the_versioned_files(dest: Path) -> None:
    """The files scripts/version.py reads and writes, in a scratch tree of the same shape."""
    paths = ["scripts/version.py", "src/local_ccm/__init__.py", "charts/local-ccm/Chart.yaml",
             "charts/local-ccm/README.md", "Containerfile", "docs/development.md",
             "README.md"]  # fmt: skip
    for path in paths:
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, dest / path)


def test_bump_moves_the_chart_readme_s_links_and_install_command(tmp_path: Path) -> None:
    _copy_of_the_versioned_files(tmp_path)

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "scripts/version.py", *args]
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)

    readme = tmp_path / "charts" / "local-ccm" / "README.md"
    old = local_ccm.__version__
    pinned = f"github.com/local-ccm/local-ccm/blob/v{old}/"
    assert pinned in readme.read_text()
    done = script("bump", "9.8.7")
    assert done.returncode == 0, done.stdout + done.stderr
    text = readme.read_text()
    assert pinned not in text
    assert text.count("github.com/local-ccm/local-ccm/blob/v9.8.7/") >= 3
    assert "/local-ccm --version 9.8.7" in text
    assert "/local-ccm --version 9.8.7" in (tmp_path / "README.md").read_text()
    assert script("check").returncode == 0
    # One link left behind is a mismatch the check names.
    readme.write_text(text.replace("blob/v9.8.7/docs/csr.md", "blob/v9.8.6/docs/csr.md"))
    done = script("check")
    assert done.returncode == 1
    assert "charts/local-ccm/README.md: 'v9.8.6 and v9.8.7', expected 'v9.8.7'" in done.stdout


def test_bump_opens_the_version_s_changelog_section_with_what_was_unreleased() -> None:
    from scripts import version  # noqa: PLC0415

    text = (
        "# Changelog\n\n## [Unreleased]\n\n### Fixed\n\n- a fix\n\n## [0.4.0]\n\nfirst\n\n"
        "[Unreleased]: https://github.com/local-ccm/local-ccm/compare/v0.4.0...HEAD\n"
        "[0.4.0]: https://github.com/local-ccm/local-ccm/releases/tag/v0.4.0\n"
    )
    day = datetime.date(2026, 12, 5)
    released = version.release_changelog(text, "0.5.0", day)
    assert released == (
        "# Changelog\n\n## [Unreleased]\n\n## [0.5.0] - 2026-12-05\n\n### Fixed\n\n- a fix\n\n"
        "## [0.4.0]\n\nfirst\n\n"
        "[Unreleased]: https://github.com/local-ccm/local-ccm/compare/v0.5.0...HEAD\n"
        "[0.5.0]: https://github.com/local-ccm/local-ccm/compare/v0.4.0...v0.5.0\n"
        "[0.4.0]: https://github.com/local-ccm/local-ccm/releases/tag/v0.4.0\n"
    )
    # Repeated, or back to a version that has its section: nothing moves.
    assert version.release_changelog(released, "0.5.0", day) == released
    assert version.release_changelog(text, "0.4.0", day) == text
