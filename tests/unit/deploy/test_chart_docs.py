"""The chart README's values table is what scripts/chart_docs.py generates from
values.schema.json and values.yaml. `make lint` runs the same check; this keeps `make test` honest
for a change made without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_chart_readme_values_table_is_generated() -> None:
    done = _script("scripts/chart_docs.py", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
