"""Reads the machine's facts from sysfs and procfs: no privileges, no network.

The thin adapter under `agent.core.facts`: it only reads files (each at most a few KiB) and
hands the texts to the pure `machine_facts`. Unreadable files are unknown facts, not errors:
containers mask parts of /sys and /proc differently.
"""

from __future__ import annotations

import os
from pathlib import Path

from local_ccm.agent.core.facts import DMI_FILES, Facts, machine_facts

DMI_DIR = Path("/sys/class/dmi/id")
_MAX_READ = 64 * 1024


def read_facts(root: Path = Path("/")) -> Facts:
    """The facts of the machine whose filesystem is at `root`."""
    dmi_dir = root / DMI_DIR.relative_to("/")
    dmi = None
    if dmi_dir.is_dir():
        dmi = {name: text for name in DMI_FILES if (text := _read(dmi_dir / name)) is not None}
    return machine_facts(
        dmi,
        _read(root / "proc/cpuinfo"),
        _read(root / "proc/meminfo"),
        os.uname().machine,
        os.cpu_count(),
    )


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as stream:
            return stream.read(_MAX_READ).decode("utf-8", "replace")
    except OSError:
        return None
