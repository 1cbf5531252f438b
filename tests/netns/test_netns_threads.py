"""run_in_netns: a short-lived thread enters the namespace; the caller never moves."""

from __future__ import annotations

import os
import threading

import pytest

from local_ccm.netlink import run_in_netns
from tests.support.netns import NetnsFactory


def _inode(path: str) -> int:
    return os.stat(path).st_ino


def test_the_callable_runs_inside_the_namespace_on_another_thread(netns: NetnsFactory) -> None:
    ns = netns()
    caller = threading.get_ident()

    inside, thread = run_in_netns(
        ns.name, lambda: (_inode("/proc/thread-self/ns/net"), threading.get_ident())
    )

    assert inside == _inode(f"/run/netns/{ns.name}")
    assert thread != caller
    assert _inode("/proc/thread-self/ns/net") != inside
    assert _inode("/proc/self/ns/net") != inside


def test_exceptions_from_the_callable_reach_the_caller(netns: NetnsFactory) -> None:
    ns = netns()

    def boom() -> None:
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        run_in_netns(ns.name, boom)


def test_a_missing_namespace_raises_file_not_found() -> None:
    with pytest.raises(FileNotFoundError):
        run_in_netns(f"lcct-{os.getpid()}-does-not-exist", lambda: None)
