"""Reads the machine's facts from sysfs and procfs: no privileges, no network.

The thin adapter under `agent.core.facts`: it only reads files (each at most a few KiB) and
hands the texts to the pure `machine_facts`. Unreadable files are unknown facts, not errors:
containers mask parts of /sys and /proc differently.
"""

from __future__ import annotations

import os

from local_ccm.agent.core.facts import DMI_FILES, Facts, machine_facts

DMI_DIR = "/sys/class/dmi/id"
_MAX_READ = 64 * 1024


def read_facts(root: str | os.PathLike[str] = "/") -> Facts:
    """The facts of the machine whose filesystem is at `root`."""
    # os.path, not pathlib: importing pathlib would cost every agent about 170 KiB.
    root = os.fspath(root)
    dmi_dir = os.path.join(root, DMI_DIR.lstrip("/"))
    dmi = None
    if os.path.isdir(dmi_dir):
        dmi = {
            name: text
            for name in DMI_FILES
            if (text := _read(os.path.join(dmi_dir, name))) is not None
        }
    return machine_facts(
        dmi,
        _read(os.path.join(root, "proc/cpuinfo")),
        _read(os.path.join(root, "proc/meminfo")),
        os.uname().machine,
        os.cpu_count(),
    )


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as stream:
            return stream.read(_MAX_READ).decode("utf-8", "replace")
    except OSError:
        return None
