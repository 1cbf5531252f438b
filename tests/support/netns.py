"""Network-namespace fixtures for the netns tier.

The ``netns`` fixture returns a :class:`NetnsFactory`::

    def test_x(netns: NetnsFactory) -> None:
        up = netns.uplink()                        # node + gateway namespaces, eth0 <-> gw0
        up.node.ip("addr", "add", "192.0.2.100/32", "dev", "eth0")
        link = netns.host_link(up.node, "eth1")   # veth to the test process's namespace

Namespaces are ``lcct-<pytest pid>-<n>`` and are deleted at teardown even when the test failed;
namespaces of dead pytest processes are deleted when the first netns test starts. Every address
is a documentation range: 192.0.2.0/24 and 2001:db8:0:<n>::/64 inside namespaces, one /28 of
198.51.100.0/24 (and 2001:db8:ff:<block>::/64) per test for host-side veths.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, IPv6Address, IPv6Interface
from typing import Any

import pytest

PREFIX = "lcct"
HOST_RANGE = IPv4Network("198.51.100.0/24")
HOST_BLOCK_PREFIX = 28
_STALE = re.compile(rf"^{PREFIX}-(\d+)-\S+")


class IpCommandError(AssertionError):
    """An ``ip`` command failed; the message carries the command line and its stderr."""


def run_ip(*args: str, stdin: str | None = None) -> str:
    """Run ``ip <args>`` and return stdout; raise IpCommandError with stderr on failure."""
    cmd = ["ip", *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shown = " ".join(cmd) + (f" <<< {stdin!r}" if stdin else "")
        raise IpCommandError(f"{shown}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Namespace:
    """A network namespace created by the fixture; every helper runs ``ip -n <name>``."""

    name: str

    def ip(self, *args: str) -> str:
        return run_ip("-n", self.name, *args)

    def ip_json(self, *args: str) -> Any:
        return json.loads(self.ip("-j", *args) or "null")

    def batch(self, *commands: str) -> None:
        """Several ``ip`` commands (without the leading ``ip``) in one ``ip -batch``."""
        run_ip("-n", self.name, "-batch", "-", stdin="\n".join(commands) + "\n")

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a program inside the namespace (``ip netns exec``)."""
        cmd = ["ip", "netns", "exec", self.name, *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise IpCommandError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def sysctl(self, *settings: str) -> None:
        """``sysctl -w key=value ...`` inside the namespace (net.* sysctls are per namespace)."""
        self.exec("sysctl", "-q", "-w", *settings)

    def add_veth(self, name: str, peer: str, *, up: bool = True) -> None:
        """A veth pair with both ends in this namespace (CNI-like devices, spare uplinks)."""
        commands = [f"link add name {name} type veth peer name {peer}"]
        if up:
            commands += [f"link set {name} up", f"link set {peer} up"]
        self.batch(*commands)

    def add_address(
        self, dev: str, cidr: str, *, nodad: bool | None = None, options: Sequence[str] = ()
    ) -> None:
        """``ip addr add``; IPv6 addresses get ``nodad`` unless ``nodad=False``."""
        extra = list(options)
        if nodad if nodad is not None else ":" in cidr:
            extra.append("nodad")
        self.ip("addr", "add", cidr, "dev", dev, *extra)

    def link_index(self, dev: str) -> int:
        return int(self.ip_json("link", "show", "dev", dev)[0]["ifindex"])

    def link_stats(self, dev: str) -> dict[str, dict[str, int]]:
        """``{"rx": {...}, "tx": {...}}`` counters of one link (``ip -s -j link``)."""
        stats: dict[str, dict[str, int]] = self.ip_json("-s", "link", "show", "dev", dev)[0][
            "stats64"
        ]
        return stats

    def tx_packets(self, dev: str) -> int:
        return self.link_stats(dev)["tx"]["packets"]


@dataclass(frozen=True)
class Uplink:
    """A node namespace wired to a gateway namespace by one veth pair."""

    node: Namespace
    gateway: Namespace
    node_if: str
    gateway_if: str
    node_v4: IPv4Interface | None
    gateway_v4: IPv4Interface | None
    node_v6: IPv6Interface | None
    gateway_v6: IPv6Interface | None


@dataclass(frozen=True)
class HostLink:
    """A veth with one end in the test process's namespace and one in ``netns``."""

    netns: Namespace
    host_if: str
    ns_if: str
    block: IPv4Network  # the test's /28
    host_v4: IPv4Interface  # <base+1>/28
    ns_v4: IPv4Interface  # <base+2>/28
    host_v6: IPv6Interface  # 2001:db8:ff:<block>::1/64
    ns_v6: IPv6Interface  # 2001:db8:ff:<block>::2/64

    @property
    def unused_v4(self) -> IPv4Address:
        """An address on the link that nothing answers (<base+5>)."""
        return self.block[5]

    @property
    def unused_v6(self) -> IPv6Address:
        return self.host_v6.network[0x99]


@dataclass
class NetnsSession:
    """Per pytest process: namespace counter and this worker's share of the /28 blocks."""

    pid: int = field(default_factory=os.getpid)
    counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    blocks: Iterator[int] = field(default_factory=lambda: itertools.cycle(worker_blocks()))


def worker_blocks(env: dict[str, str] | None = None) -> list[int]:
    """Block indexes (0-15) of this xdist worker: worker k of n takes i with i mod n == k."""
    env = dict(os.environ) if env is None else env
    worker = env.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(env.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    k = int(worker.removeprefix("gw") or 0)
    total = 2 ** (HOST_BLOCK_PREFIX - HOST_RANGE.prefixlen)
    return [i for i in range(total) if i % count == k]


class NetnsFactory:
    """Creates namespaces, uplinks and host links for one test and removes them afterwards."""

    def __init__(self, session: NetnsSession) -> None:
        self._session = session
        self._namespaces: list[Namespace] = []
        self._host_ifs: list[str] = []

    def __call__(self, *, disable_ipv6: bool = False, lo_up: bool = True) -> Namespace:
        """A fresh namespace ``lcct-<pid>-<n>``, with ``lo`` up by default."""
        ns = Namespace(f"{PREFIX}-{self._session.pid}-{next(self._session.counter)}")
        run_ip("netns", "add", ns.name)
        self._namespaces.append(ns)
        if disable_ipv6:  # before any link exists, so no IPv6 packet is ever sent
            ns.sysctl("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        if lo_up:
            ns.ip("link", "set", "lo", "up")
        return ns

    def uplink(
        self,
        node: Namespace | None = None,
        *,
        node_if: str = "eth0",
        gateway_if: str = "gw0",
        v4: tuple[str, str] | None = ("192.0.2.10/24", "192.0.2.1/24"),
        v6: tuple[str, str] | None = ("2001:db8:0:1::10/64", "2001:db8:0:1::1/64"),
        default_routes: bool = True,
    ) -> Uplink:
        """A node namespace (new unless given) with a gateway namespace behind ``node_if``.

        ``v4``/``v6`` are (node, gateway) addresses; ``None`` leaves the family unconfigured
        (and, for IPv6, disabled in both namespaces so no IPv6 traffic appears).
        """
        node = node or self(disable_ipv6=v6 is None)
        gateway = self(disable_ipv6=v6 is None)
        run_ip("link", "add", "name", node_if, "netns", node.name, "type", "veth",
               "peer", "name", gateway_if, "netns", gateway.name)  # fmt: skip
        node_cmds, gw_cmds = [f"link set {node_if} up"], [f"link set {gateway_if} up"]
        for pair in (v4, v6):
            if pair is not None:
                flags = " nodad" if ":" in pair[0] else ""
                node_cmds.append(f"addr add {pair[0]} dev {node_if}{flags}")
                gw_cmds.append(f"addr add {pair[1]} dev {gateway_if}{flags}")
        gateway.batch(*gw_cmds)
        if default_routes:  # after the link is up: a down link rejects "via"
            node_cmds += [
                f"route add default via {_addr(p[1])} dev {node_if}" for p in (v4, v6) if p
            ]
        node.batch(*node_cmds)
        return Uplink(
            node, gateway, node_if, gateway_if,
            IPv4Interface(v4[0]) if v4 else None, IPv4Interface(v4[1]) if v4 else None,
            IPv6Interface(v6[0]) if v6 else None, IPv6Interface(v6[1]) if v6 else None,
        )  # fmt: skip

    def host_link(self, ns: Namespace, ns_if: str | None = None) -> HostLink:
        """A veth from the test process's namespace (``lv<6 hex>a``) into ``ns``, both ends up,
        addressed from this test's /28 block. One per test: the block has room for one link."""
        if self._host_ifs:
            raise AssertionError("one host link per test: the test's /28 is already in use")
        index = next(self._session.blocks)
        block = list(HOST_RANGE.subnets(new_prefix=HOST_BLOCK_PREFIX))[index]
        v6 = f"2001:db8:ff:{index:x}::"
        tag = secrets.token_hex(3)
        link = HostLink(
            ns, f"lv{tag}a", ns_if or f"lv{tag}b", block,
            IPv4Interface(f"{block[1]}/28"), IPv4Interface(f"{block[2]}/28"),
            IPv6Interface(f"{v6}1/64"), IPv6Interface(f"{v6}2/64"),
        )  # fmt: skip
        run_ip("link", "add", "name", link.host_if, "type", "veth",
               "peer", "name", link.ns_if, "netns", ns.name)  # fmt: skip
        self._host_ifs.append(link.host_if)
        run_ip("-batch", "-", stdin=_link_setup(link.host_if, link.host_v4, link.host_v6))
        ns.batch(*_link_setup(link.ns_if, link.ns_v4, link.ns_v6).splitlines())
        return link

    def cleanup(self) -> list[str]:
        """Delete everything this factory made; return the problems (never raises)."""
        problems = []
        # Host ends first and synchronously: namespace deletion is asynchronous in the kernel,
        # and a lingering host end would still hold this block's addresses for the next test.
        for name in [*self._host_ifs, *(f"netns {ns.name}" for ns in reversed(self._namespaces))]:
            args = (
                ("netns", "del", name[6:]) if name.startswith("netns ") else ("link", "del", name)
            )
            try:
                run_ip(*args)
            except IpCommandError as exc:
                if "Cannot find device" not in str(exc):
                    problems.append(str(exc))
        self._host_ifs.clear()
        self._namespaces.clear()
        return problems


def _addr(cidr: str) -> str:
    return cidr.split("/", 1)[0]


def _link_setup(dev: str, v4: IPv4Interface, v6: IPv6Interface) -> str:
    return f"link set {dev} up\naddr add {v4} dev {dev}\naddr add {v6} dev {dev} nodad\n"


def delete_stale_namespaces() -> list[str]:
    """Delete ``lcct-<pid>-*`` namespaces whose pytest process is gone; return their names."""
    deleted = []
    for line in run_ip("netns", "list").splitlines():
        match = _STALE.match(line)
        if match and not pid_alive(int(match.group(1))):
            name = line.split()[0]
            run_ip("netns", "del", name)
            deleted.append(name)
    return deleted


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def require_root() -> None:
    """Skip (a local convenience; CI turns this skip into an error) unless root with iproute2."""
    if os.geteuid() != 0:
        pytest.skip("netns: needs root (network namespaces and veth pairs)")
    if shutil.which("ip") is None:
        pytest.fail(
            "netns: iproute2 is missing: the `ip` command is not on PATH (apt-get install iproute2)"
        )


@pytest.fixture(scope="session")
def netns_session() -> NetnsSession:
    require_root()
    delete_stale_namespaces()
    return NetnsSession()


@pytest.fixture
def netns(netns_session: NetnsSession) -> Iterator[NetnsFactory]:
    """Factory for namespaces, uplinks and host links; everything is deleted at teardown."""
    factory = NetnsFactory(netns_session)
    try:
        yield factory
    finally:
        problems = factory.cleanup()
    if problems:
        pytest.fail("netns teardown: " + "; ".join(problems))
