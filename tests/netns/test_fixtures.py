"""The namespace fixtures themselves: naming, host links, teardown and stale-run cleanup."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess

import pytest

from local_ccm.netlink import dump_addresses, run_in_netns
from tests.support.netns import (
    HOST_RANGE,
    NetnsFactory,
    NetnsSession,
    delete_stale_namespaces,
    run_ip,
)


def _namespaces() -> set[str]:
    return {line.split()[0] for line in run_ip("netns", "list").splitlines() if line.strip()}


def _host_links() -> set[str]:
    return {str(link["ifname"]) for link in run_ip_json("link", "show")}


def run_ip_json(*args: str) -> list[dict[str, object]]:
    result: list[dict[str, object]] = json.loads(run_ip("-j", *args))
    return result


def test_namespaces_are_named_after_the_pytest_pid(netns: NetnsFactory) -> None:
    first, second = netns(), netns()

    assert re.fullmatch(rf"lcct-{os.getpid()}-\d+", first.name)
    assert first.name != second.name
    assert {first.name, second.name} <= _namespaces()
    assert first.ip_json("link", "show", "lo")[0]["operstate"] == "UNKNOWN"  # lo is up


def test_host_link_connects_the_test_process_to_the_namespace(netns: NetnsFactory) -> None:
    ns = netns()
    link = netns.host_link(ns, "eth0")
    server = run_in_netns(ns.name, lambda: socket.create_server((str(link.ns_v4.ip), 0)))

    with server, socket.create_connection((str(link.ns_v4.ip), server.getsockname()[1]), 5):
        pass
    with pytest.raises(ConnectionRefusedError):  # the peer answers: alive, port closed
        socket.create_connection((str(link.ns_v6.ip), 9), timeout=5)

    assert re.fullmatch(r"lv[0-9a-f]{6}a", link.host_if)
    assert len(link.host_if) <= 15
    assert link.block.subnet_of(HOST_RANGE)
    assert link.block.prefixlen == 28
    assert (link.host_v4.ip, link.ns_v4.ip) == (link.block[1], link.block[2])
    assert link.unused_v4 == link.block[5]
    assert f"{link.ns_v6.network}".startswith("2001:db8:ff:")
    in_ns = {str(a.address) for a in dump_addresses(netns=ns.name) if a.ifname == "eth0"}
    assert {str(link.ns_v4), str(link.ns_v6)} <= in_ns


def test_cleanup_deletes_namespaces_and_host_ends(netns_session: NetnsSession) -> None:
    factory = NetnsFactory(netns_session)
    ns = factory()
    link = factory.host_link(ns)
    up = factory.uplink()

    problems = factory.cleanup()

    assert problems == []
    assert not {ns.name, up.node.name, up.gateway.name} & _namespaces()
    assert link.host_if not in _host_links()


def test_stale_namespaces_of_dead_processes_are_deleted(netns: NetnsFactory) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"lcct-{gone.pid}-1"
    alive = netns()  # ours: this pid is alive
    run_ip("netns", "add", stale)
    try:
        deleted = delete_stale_namespaces()
    finally:
        if stale in _namespaces():
            run_ip("netns", "del", stale)

    assert stale in deleted
    assert alive.name not in deleted
    assert alive.name in _namespaces()
