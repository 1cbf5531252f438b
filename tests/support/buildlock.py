"""The build cache's lock and free-disk check."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.gotool import BuildError

# A cold Kubernetes build needs about this much (module cache ~1 GB, build cache 2-3 GB, plus
# the linker's temporary files); failing early beats "no space left on device" 20 minutes in.
MIN_FREE_BYTES = 8 * 10**9
LOCK_TIMEOUT = 3 * 3600.0
REPORT_EVERY = 30.0


def _holder(fd: int) -> str:
    data = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return data or "unknown"


@contextmanager
def build_lock(
    cache: Path, report: Callable[[str], None], timeout: float = LOCK_TIMEOUT
) -> Iterator[None]:
    """Hold an exclusive flock on <cache>/build.lock; say who holds it while waiting."""
    path = cache / "build.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, path, report, timeout)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path: Path, report: Callable[[str], None], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    next_report = 0.0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise BuildError(f"gave up after {timeout:.0f} s waiting for {path} ({_holder(fd)})")
        if now >= next_report:
            report(f"waiting for lock held by pid {_holder(fd)} ({path}); a build is running")
            next_report = now + REPORT_EVERY
        time.sleep(0.5)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_free_disk(paths: Sequence[Path], need: int = MIN_FREE_BYTES) -> None:
    """Fail before a cold build unless every filesystem it writes to has `need` bytes free."""
    short = []
    for p in paths:
        free = shutil.disk_usage(_existing(p)).free
        if free < need:
            short.append(f"{p}: {free / 1e9:.1f} GB free")
    if short:
        raise BuildError(
            f"not enough free disk for a cold build (need about {need / 1e9:.0f} GB): "
            + "; ".join(short)
            + ". Free some space (e.g. `go clean -cache`) and retry."
        )
