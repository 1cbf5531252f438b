"""What every benchmark result records about its run, and where it is written: one place for
the commit, the machine and the file name, so results of different harnesses compare."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test-artifacts" / "bench"


def command_output(*cmd: str, cwd: Path | str = ROOT) -> str:
    """What `cmd` printed, stripped; "unknown" when it printed nothing or could not run."""
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def git_head(tree: Path | str = ROOT) -> str:
    """The short commit a checkout is at ("unknown" outside a git work tree)."""
    return command_output("git", "rev-parse", "--short", "HEAD", cwd=tree)


def machine_facts(**extra: Any) -> dict[str, Any]:
    """When, at which commit, on what machine and how loaded at the start; plus `extra`."""
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_head(),
        "nproc": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "kernel": platform.release(),
        **extra,
    }


def write_result(kind: str, name: str, result: dict[str, Any], *, echo: bool = True) -> Path:
    """`result` with the load average at its end, as test-artifacts/bench/<kind>-<name>-<UTC
    stamp>.json; its path printed, and with `echo` its content too."""
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{kind}-{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    text = json.dumps(result, indent=2)
    path.write_text(text + "\n")
    print(f"\n{kind}-{name}: {path}" + (f"\n{text}" if echo else ""))
    return path
