"""Route lookups, dumps and subscriptions need no capability.

The probe runs in a subprocess (pattern 2 in docs/testing.md): ``ip netns exec`` puts it in a test
namespace, then ``setpriv`` drops to nobody with no capabilities before Python starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.support.netns import NetnsFactory

PROBE = """
import json, select, sys
from ipaddress import ip_address
from local_ccm.netlink import Monitor, dump_addresses, dump_links, route_get

caps = dict(line.split(":\\t") for line in open("/proc/self/status") if line.startswith("Cap"))
with Monitor() as monitor:
    route = route_get(ip_address("8.8.8.8"))
    print(json.dumps({
        "capeff": caps["CapEff"].strip(),
        "prefsrc": str(route.prefsrc),
        "ifname": route.ifname,
        "addresses": sorted(str(a.address) for a in dump_addresses(family=4)),
        "links": sorted(link.name for link in dump_links()),
    }), flush=True)
    sys.stdin.readline()  # the test has changed an address by now
    select.select([monitor], [], [], 10)
    events = monitor.read_events()
    print(json.dumps(sorted(str(c.address.address) for c in events if c.address)), flush=True)
"""


def test_lookup_dump_and_monitor_work_without_privileges(netns: NetnsFactory) -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed for this test: apt-get install util-linux"
    up = netns.uplink()
    argv = [
        "ip", "netns", "exec", up.node.name,
        setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "--", sys.executable, "-c", PROBE,
    ]  # fmt: skip
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stderr is not None
        first = child.stdout.readline()
        assert first, f"probe failed: {child.stderr.read()}"
        up.node.add_address("eth0", "192.0.2.60/24")
        child.stdin.write("go\n")
        child.stdin.flush()
        second = child.stdout.readline()
        assert child.wait(timeout=15) == 0, child.stderr.read()

    report = json.loads(first)
    assert report["capeff"] == "0000000000000000"
    assert (report["prefsrc"], report["ifname"]) == ("192.0.2.10", "eth0")
    assert report["addresses"] == ["127.0.0.1/8", "192.0.2.10/24"]
    assert report["links"] == ["eth0", "lo"]
    assert json.loads(second) == ["192.0.2.60/24"]
