"""Unprivileged (datagram) ICMP probes.

The prober runs in a subprocess inside a test namespace (pattern 2 in docs/testing.md), because
`net.ipv4.ping_group_range` is per namespace: it is widened to "0 0" in that namespace only,
never on the host. With the default range ("1 0") the start-up check must report a clear
permission error instead of silently falling back to raw sockets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.netns import Namespace, NetnsFactory, Uplink

PROBER = r"""
import asyncio, json, sys
from ipaddress import ip_address
from local_ccm.lifecycle.core.model import ICMP
from local_ccm.lifecycle.probe import ProbeConfig, SocketProber, detect_capabilities

caps = detect_capabilities([ICMP], ["ipv4", "ipv6"], sys.argv[1])
print(json.dumps([[c.family, c.usable, c.mode, c.problem] for c in caps.entries]), flush=True)
if sys.argv[2:] and sys.argv[2] == "--wait":
    sys.stdin.readline()  # the test changes ping_group_range meanwhile
prober = SocketProber(ProbeConfig(count=2, interval=0.2, timeout=0.8), caps)
outcomes = {}
for target in [a for a in sys.argv[2:] if a != "--wait"]:
    outcome = asyncio.run(prober.probe_one(ip_address(target), ICMP))
    outcomes[target] = [outcome.outcome, outcome.detail]
print(json.dumps(outcomes), flush=True)
"""


def run_prober(ns: Namespace, mode: str, *targets: str, stdin: str = "") -> list[Any]:
    argv = ["ip", "netns", "exec", ns.name, sys.executable, "-c", PROBER, mode, *targets]
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def widened(netns: NetnsFactory) -> Uplink:
    up = netns.uplink()
    up.node.sysctl("net.ipv4.ping_group_range=0 0")
    return up


def test_datagram_mode_probes_loopback_and_the_gateway_both_families(netns: NetnsFactory) -> None:
    up = widened(netns)
    assert up.gateway_v4 is not None
    assert up.gateway_v6 is not None
    gw4, gw6 = str(up.gateway_v4.ip), str(up.gateway_v6.ip)
    caps, outcomes = run_prober(up.node, "datagram", "127.0.0.1", "::1", gw4, gw6)
    assert caps == [["ipv4", True, "datagram", ""], ["ipv6", True, "datagram", ""]]
    assert outcomes == {t: ["reply", "echo reply"] for t in ("127.0.0.1", "::1", gw4, gw6)}


def test_datagram_mode_unused_addresses_are_silent(netns: NetnsFactory) -> None:
    up = widened(netns)
    _, outcomes = run_prober(up.node, "datagram", "192.0.2.99", "2001:db8:0:1::99")
    assert {t: o[0] for t, o in outcomes.items()} == {
        "192.0.2.99": "no_reply", "2001:db8:0:1::99": "no_reply",
    }  # fmt: skip


def test_default_ping_group_range_is_a_clear_permission_error_at_start_up(
    netns: NetnsFactory,
) -> None:
    ns = netns()
    caps, outcomes = run_prober(ns, "datagram", "127.0.0.1")
    for family, usable, mode, problem in caps:
        assert (usable, mode) == (False, None), family
        assert f"datagram ICMP socket for {family} not permitted" in problem
        assert "net.ipv4.ping_group_range (1 0)" in problem
        assert "widen ping_group_range" in problem
    # no silent fallback to raw sockets, although this process (root) could open them
    assert outcomes["127.0.0.1"][0] == "error"
    assert "not permitted" in outcomes["127.0.0.1"][1]


def test_l26_permission_lost_at_run_time_is_an_error_outcome_not_a_crash(
    netns: NetnsFactory,
) -> None:
    ns = netns()
    ns.sysctl("net.ipv4.ping_group_range=0 0")
    argv = ["ip", "netns", "exec", ns.name, sys.executable, "-c", PROBER, "datagram",
            "--wait", "127.0.0.1"]  # fmt: skip
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        caps = json.loads(child.stdout.readline())
        assert [c[1] for c in caps] == [True, True]
        ns.sysctl("net.ipv4.ping_group_range=1 0")
        child.stdin.write("go\n")
        child.stdin.close()
        outcomes = json.loads(child.stdout.readline())
        assert child.wait(timeout=20) == 0
    assert outcomes["127.0.0.1"][0] == "error"
    assert "ping_group_range (1 0)" in outcomes["127.0.0.1"][1]


def test_auto_mode_without_net_raw_falls_back_to_datagram(netns: NetnsFactory) -> None:
    # auto = raw if permitted, else datagram; dropping CAP_NET_RAW shows the fallback
    up = widened(netns)
    drop_net_raw = ["setpriv", "--inh-caps=-net_raw", "--bounding-set=-net_raw", "--"]
    argv = ["ip", "netns", "exec", up.node.name, *drop_net_raw,
            sys.executable, "-c", PROBER, "auto", "127.0.0.1"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr
    caps, outcomes = (json.loads(line) for line in done.stdout.splitlines())
    assert [(c[0], c[2]) for c in caps] == [("ipv4", "datagram"), ("ipv6", "datagram")]
    assert outcomes["127.0.0.1"][0] == "reply"
