"""The version is defined once and every copy agrees. `make lint` runs the same check; this keeps
`make test` honest for a change made without it."""

from __future__ import annotations

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
