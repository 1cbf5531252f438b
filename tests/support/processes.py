"""Child processes of the harness: spawned in their own process group under
`setpriv --pdeathsig TERM`, logging to a file, stopped by recorded pid only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

log = logging.getLogger(__name__)
STOP_GRACE = 20.0
# The image runs every component with PYTHONOPTIMIZE=2 (scripts/image.py); benchmarks of ours
# run so too, after `compile_optimized()` made the level-2 .pyc files.
# Read-only: a caller that added to it in place would run every later process with its additions.
AS_SHIPPED: Mapping[str, str] = MappingProxyType({"PYTHONOPTIMIZE": "2"})


def python_env(impl: str, baseline: str = "") -> dict[str, str]:
    """What a benchmark adds to the environment of `impl`: nothing for "go"; AS_SHIPPED for ours,
    a floor and "baseline", which also gets another checkout's `src` (bench-compare's
    BENCH_BASELINE, an earlier commit measured in the same rounds) ahead of the editable install."""
    if impl == "go":
        return {}
    return {**AS_SHIPPED, **({"PYTHONPATH": baseline} if impl == "baseline" else {})}


def compile_optimized(*more: str) -> None:
    """Level-2 .pyc files for the project, its venv, the standard library and `more` trees
    (up-to-date ones are skipped), so a process run AS_SHIPPED does not compile its imports at
    every start."""
    paths = sysconfig.get_paths()
    roots = {str(Path(__file__).resolve().parents[2] / "src"), paths["purelib"], paths["stdlib"]}
    roots |= set(more)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", "-o", "2", *sorted(roots)],
        check=False, capture_output=True,
    )  # fmt: skip


class StartupError(RuntimeError):
    """A component failed to start; the message carries its log tail."""


def free_port() -> int:
    """A free loopback port: bind :0, read it, close (the small race is handled by a retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 50) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 256 * 1024))
            data = f.read().decode(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


@dataclass
class Child:
    """A started component. Mutable only in that it is reaped once."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the process group, wait up to `grace` seconds, then SIGKILL; always reap."""
        if self.proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning(
                "%s (pid %d) ignored SIGTERM for %.0fs; killing", self.name, self.pid, grace
            )
            self._signal(signal.SIGKILL)
            self.proc.wait()

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # its own group: process_group=0 at spawn


def spawn(
    name: str,
    args: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = True,
    cwd: Path | None = None,
) -> Child:
    """Start `args` in its own process group, stdout and stderr appended to `log_path`.

    `setpriv --pdeathsig TERM` (not preexec_fn, which is unsafe in a threaded process) makes
    the child die with the thread that spawned it, so call this from the main thread.
    """
    cmd = list(args)
    if die_with_parent:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise StartupError("setpriv not found: install util-linux (scripts/setup.sh does)")
        cmd = [setpriv, "--pdeathsig", "TERM", "--", *cmd]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        out.write(f"# {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            process_group=0,
        )
    log.info("started %s (pid %d), log %s", name, proc.pid, log_path)
    return Child(name, proc, log_path)


def stop_all(children: Sequence[Child], grace: float = STOP_GRACE) -> None:
    """Stop children in reverse start order; an error stopping one never skips the rest."""
    for child in reversed(children):
        try:
            child.stop(grace)
        except Exception:
            log.exception("stopping %s (pid %d) failed", child.name, child.pid)


def _stat_fields(pid: int) -> list[str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 of proc(5) on


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (user and system CPU, all threads), seconds."""
    fields = _stat_fields(pid)
    ticks = int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def task_cpu_seconds(pid: int) -> float:
    """On-CPU time of every live thread of `pid` from /proc/<pid>/task/*/schedstat (ns), for
    idle windows where utime + stime (10 ms ticks) would read 0."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between listing and reading
    return total / 1e9


def task_wakeups(pid: int) -> int:
    """How often the live threads of `pid` went to sleep and were woken since they started
    (voluntary context switches, /proc/<pid>/task/*/status): each is a turn of work that starts
    with cold caches when the process sleeps between events."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between listing and reading
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def children_cpu_seconds(pid: int) -> float:
    """cutime + cstime of `pid`: the CPU of its children that ended and were waited for (ours
    makes the self-signed /metrics certificate in a child process), 10 ms ticks."""
    fields = _stat_fields(pid)
    ticks = int(fields[13]) + int(fields[14])  # fields 16 and 17 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of `pid`, KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields
