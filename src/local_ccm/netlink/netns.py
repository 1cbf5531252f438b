"""Run a callable inside a named network namespace, on a short-lived thread.

Python 3.11 has no ``os.setns``, so the thread calls libc ``setns(fd, CLONE_NEWNET)`` through
ctypes. ``setns`` moves only the calling thread, and a socket keeps the namespace it was created
in, so a socket opened by ``fn`` can be used from any thread afterwards. The calling thread is
never moved: moving the main thread would take every other connection of the process with it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)

NETNS_RUN_DIR = "/run/netns"  # where `ip netns add` bind-mounts named namespaces
CLONE_NEWNET = 0x40000000
_OWN_NETNS = "/proc/thread-self/ns/net"

T = TypeVar("T")


def netns_path(name: str) -> str:
    """``/run/netns/<name>``; an absolute path (e.g. ``/proc/<pid>/ns/net``) is used as is."""
    if name.startswith("/"):
        return name
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"invalid network namespace name {name!r}")
    return os.path.join(NETNS_RUN_DIR, name)


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    """Move the calling thread into the namespace ``fd`` refers to."""
    import ctypes  # noqa: PLC0415  (lazy: 0.4 MiB that an agent on the host never needs)

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run_in_netns(name: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` on a fresh thread that has entered network namespace ``name``; return its result.

    Exceptions from ``fn`` (and from entering the namespace) are re-raised in the caller.
    """
    target = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix=f"netns:{name}") as thread:
            return thread.submit(_enter_and_call, target, fn).result()
    finally:
        os.close(target)


def _enter_and_call(target: int, fn: Callable[[], T]) -> T:
    own = os.open(_OWN_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        try:
            return fn()
        finally:
            _restore(own)
    finally:
        os.close(own)


def _restore(own: int) -> None:
    # The thread ends right after this, so a failure cannot leak the namespace; go back anyway
    # so that nothing else that might run on this thread sees the wrong network.
    try:
        setns(own)
    except OSError as exc:
        log.warning("could not return thread to its network namespace: %s", exc)
