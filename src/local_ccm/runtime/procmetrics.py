"""The process's own metrics, read at scrape time under the names and labels
`prometheus_client`'s process, platform and GC collectors gave them: `process_*` from
/proc/self, `python_info`, and the `python_gc_*` counters per generation."""

from __future__ import annotations

import gc
import os
import sys

from local_ccm.runtime.promtext import Family, Sample


def python_version() -> str:
    """As `platform.python_version()` ("3.11.7"), without importing `platform`."""
    return sys.version.split()[0]


class ProcessCollector:
    """`process_*` from /proc/self, read at scrape time; nothing where /proc is missing."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._pagesize = os.sysconf("SC_PAGE_SIZE")
        self._btime = 0.0
        try:
            with open(f"{proc}/stat", "rb") as stat:
                lines = [line for line in stat if line.startswith(b"btime ")]
            self._btime = float(lines[0].split()[1]) if lines else 0.0
        except OSError:
            pass

    def collect(self) -> list[Family]:
        if not self._btime:
            return []
        me = f"{self._proc}/self"
        families: list[Family] = []
        try:
            with open(f"{me}/stat", "rb") as stat:
                parts = stat.read().split(b")")[-1].split()
            families += [
                _one("process_virtual_memory_bytes", "Virtual memory size in bytes.", parts[20]),
                _one(
                    "process_resident_memory_bytes", "Resident memory size in bytes.",
                    float(parts[21]) * self._pagesize,
                ),
                _one(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    float(parts[19]) / self._ticks + self._btime,
                ),
                _one(
                    "process_cpu_seconds", "Total user and system CPU time spent in seconds.",
                    (float(parts[11]) + float(parts[12])) / self._ticks, "counter",
                ),
            ]  # fmt: skip
        except OSError:
            pass
        return families + self._fds(me)

    @staticmethod
    def _fds(me: str) -> list[Family]:
        try:
            with open(f"{me}/limits", "rb") as limits:
                soft = [line.split()[3] for line in limits if line.startswith(b"Max open file")]
            used = len(os.listdir(f"{me}/fd"))
        except OSError:
            return []
        return [
            _one("process_open_fds", "Number of open file descriptors.", used),
            _one("process_max_fds", "Maximum number of open file descriptors.", soft[0]),
        ]


def _one(name: str, doc: str, value: float | bytes, kind: str = "gauge") -> Family:
    suffix = "_total" if kind == "counter" else ""
    return Family(name, kind, doc, [Sample(name + suffix, {}, float(value))])


class PythonCollector:
    """`python_info` and the `python_gc_*` counters per generation."""

    def __init__(self) -> None:
        version = python_version()
        major, minor, patchlevel = [*version.split("."), "0"][:3]
        name = sys.implementation.name
        info = {
            "implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(name, name),
            "major": major, "minor": minor, "patchlevel": patchlevel, "version": version,
        }  # fmt: skip
        self._info = Family(
            "python_info", "gauge", "Python platform information",
            [Sample("python_info", info, 1.0)],
        )  # fmt: skip

    def collect(self) -> list[Family]:
        families = [self._info]
        docs = {
            "collected": "Objects collected during gc",
            "uncollectable": "Uncollectable objects found during GC",
            "collections": "Number of times this generation was collected",
        }
        for key, doc in docs.items():
            name = "python_gc_objects_" + key if key != "collections" else "python_gc_collections"
            samples = [
                Sample(name + "_total", {"generation": str(gen)}, float(stat[key]))
                for gen, stat in enumerate(gc.get_stats())
            ]
            families.append(Family(name, "counter", doc, samples))
        return families
