"""The prober as the chart runs it by default: uid/gid 65532, no capability in any set, ICMP
datagram sockets allowed by the network namespace's `net.ipv4.ping_group_range`.

The prober runs in a subprocess (pattern 2 in docs/testing.md): ``ip netns exec`` puts it in a
node namespace this test made, then ``setpriv`` drops to 65532 with every capability gone
before Python starts. Its peer is a gateway namespace this test made too, which answers echoes
as any kernel does; an unused address of the same /24 never answers. The range is set in the
node namespace only, as the chart's Pod sysctl does, never on the host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.support.netns import NetnsFactory, Uplink

UID = 65532
SILENT_V4, SILENT_V6 = "192.0.2.99", "2001:db8:0:1::99"  # on the link, nothing answers
PROBER = r"""
import asyncio, json, os, sys
from ipaddress import ip_address
from local_ccm.lifecycle.core.model import ICMP, combine
from local_ccm.lifecycle.probe import (
    ProbeConfig, SocketProber, capability_report, detect_capabilities,
)

status = dict(line.split(":\t") for line in open("/proc/self/status") if ":\t" in line)
caps = detect_capabilities([ICMP], ["ipv4", "ipv6"], sys.argv[1])
prober = SocketProber(ProbeConfig(count=3, interval=0.3, timeout=2.0), caps)
verdicts, outcomes = {}, {}
for target in sys.argv[2:]:
    result = asyncio.run(prober.probe([ip_address(target)], [ICMP]))
    outcomes[target] = [[o.outcome, o.detail] for o in result]
    verdicts[target] = combine(result)
report = capability_report(caps)
print(json.dumps({
    "ids": [os.getuid(), os.getgid(), os.getgroups()],
    "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
    "caps": [[c.family, c.usable, c.mode, c.problem] for c in caps.entries],
    "report": [report.blocking, report.message],
    "outcomes": outcomes, "verdicts": verdicts,
}))
"""


def run_unprivileged(up: Uplink, mode: str, *targets: str) -> dict[str, Any]:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed for this test: apt-get install util-linux"
    argv = ["ip", "netns", "exec", up.node.name,
            setpriv, f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--", sys.executable, "-c", PROBER, mode, *targets]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["ids"] == [UID, UID, []]
    assert result["cap_eff"] == result["cap_bnd"] == "0000000000000000"
    return result


def uplink_with_range(netns: NetnsFactory, groups: str) -> tuple[Uplink, str, str]:
    up = netns.uplink()
    up.node.sysctl(f"net.ipv4.ping_group_range={groups}")
    assert up.gateway_v4 is not None
    assert up.gateway_v6 is not None
    return up, str(up.gateway_v4.ip), str(up.gateway_v6.ip)


@pytest.mark.parametrize("mode", ["datagram", "auto"])
def test_as_65532_without_capabilities_the_gateway_replies_and_a_silent_address_does_not(
    netns: NetnsFactory, mode: str
) -> None:
    """`auto` is the chart's default: raw sockets are refused, so it settles on datagram."""
    up, gw4, gw6 = uplink_with_range(netns, f"{UID} {UID}")
    result = run_unprivileged(up, mode, gw4, gw6, SILENT_V4, SILENT_V6)
    assert result["caps"] == [["ipv4", True, "datagram", ""], ["ipv6", True, "datagram", ""]]
    assert result["report"] == [False, ""]
    assert result["verdicts"] == {gw4: "reachable", gw6: "reachable",
                                  SILENT_V4: "unreachable", SILENT_V6: "unreachable"}  # fmt: skip
    assert result["outcomes"][gw4] == [["reply", "echo reply"]]
    assert result["outcomes"][SILENT_V4][0][0] == "no_reply"


def test_a_range_without_our_group_is_reported_and_every_verdict_is_unknown(
    netns: NetnsFactory,
) -> None:
    """Unknown is never dead: the gateway, which would answer, and the silent address get the
    same verdict, and neither is `unreachable`."""
    up, gw4, _ = uplink_with_range(netns, "0 65531")  # every group but ours and above
    result = run_unprivileged(up, "auto", gw4, SILENT_V4)
    for family, usable, mode, problem in result["caps"]:
        assert (usable, mode) == (False, None), family
        assert f"datagram ICMP socket for {family} not permitted" in problem
        assert f"no group of this process ({UID}) is inside net.ipv4.ping_group_range " \
               "(0 65531)" in problem  # fmt: skip
        assert f"raw ICMP socket for {family} not permitted: CAP_NET_RAW is missing" in problem
    blocking, message = result["report"]
    assert blocking
    assert message.startswith("no configured probe is usable, so every verdict is unknown and "
                              "no Node is deleted")  # fmt: skip
    assert result["verdicts"] == {gw4: "unknown", SILENT_V4: "unknown"}
    assert [o[0] for o in result["outcomes"][gw4]] == ["error"]
