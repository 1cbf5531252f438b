"""A minimal "watch my Node, patch it" process on the project's stack, for measuring RSS.

Run as a subprocess by tests/bench/test_stack_rss.py, never imported by the product. It does
what the agent does, with the libraries the agent uses: TLS to the API server, GET its Node,
two status JSON Patches guarded by a resourceVersion test, a WATCH on its own Node (field
selector), a route lookup and an address dump over netlink, and - with ``--metrics`` - the
project's ``/metrics`` server (runtime.serve, runtime.promtext). Then it consumes watch
events (the test drives them) and sends ``--patches`` more patches, and exits. It prints its
VmRSS at each phase as one JSON line on stdout: ``imported``, ``first`` (first GET answered),
``work``, ``steady``.
"""

# Imports sit inside functions on purpose: what is imported is part of what is measured.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from ipaddress import ip_address
from pathlib import Path
from typing import Any

T0 = time.monotonic()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def report(phase: str, **extra: object) -> None:
    line = {"phase": phase, "rss_kib": rss_kib(), "t": round(time.monotonic() - T0, 4)}
    print(json.dumps(line | extra), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--node", required=True)
    parser.add_argument("--metrics", action="store_true")
    parser.add_argument("--patches", type=int, default=300)
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    from local_ccm.kube.aio import AsyncClient
    from local_ccm.kube.client import Client

    if args.metrics:
        import local_ccm.runtime.serve  # with runtime.promtext, the /metrics text
    import local_ccm.netlink  # noqa: F401

    report("imported")
    client = AsyncClient(Client.from_kubeconfig(args.kubeconfig, field_manager="stack-probe"))
    return asyncio.run(Probe(client, args).run())


class Probe:
    def __init__(self, client: Any, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.writes = 0

    async def run(self) -> int:
        from local_ccm.kube.resources import NODES
        from local_ccm.netlink import dump_addresses, route_get

        node = await self.client.get(NODES, self.args.node)
        report("first")
        close = self.serve_metrics() if self.args.metrics else (lambda: None)
        route_get(ip_address("127.0.0.1"))
        dump_addresses()
        from local_ccm.clock import SystemClock
        from local_ccm.kube.aio import KubeListWatch
        from local_ccm.kube.informer import Informer

        # The informer, as the agent uses it: the apiserver closes a watch that falls behind,
        # and the informer resumes from the last resourceVersion.
        source = KubeListWatch(self.client, NODES, field_selector=f"metadata.name={self.args.node}")
        informer = Informer(source, dict, clock=SystemClock(), rng=random.Random(), name="nodes")
        changes: asyncio.Queue[None] = asyncio.Queue()
        informer.add_handler(lambda _change: changes.put_nowait(None))
        for _ in range(2):
            node = await self.patch(node)
        report("work")
        events = 0
        task = asyncio.ensure_future(informer.run())
        while True:
            await changes.get()
            events += 1
            if self.writes < self.args.patches + 2:
                node = await self.patch(node)
            if events >= self.args.events and self.writes >= self.args.patches + 2:
                break
        informer.stop()
        await task
        route_get(ip_address("127.0.0.1"))
        report("steady", events=events, writes=self.writes)
        close()
        await self.client.close()
        return 0

    def serve_metrics(self) -> Any:
        from local_ccm.runtime.promtext import Counter, Registry
        from local_ccm.runtime.serve import Checks, start_servers

        registry = Registry()
        self.counter = Counter("stack_probe_writes", "patches sent", registry=registry)
        servers = start_servers(
            metrics_address="127.0.0.1:0",
            health_address="127.0.0.1:0",
            registry=registry,
            healthz=Checks(),
            readyz=Checks(),
        )
        return servers.close

    async def patch(self, node: dict[str, Any]) -> dict[str, Any]:
        from local_ccm.kube.errors import Conflict
        from local_ccm.kube.resources import NODES

        name = node["metadata"]["name"]
        while True:
            ops = [
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": node["metadata"]["resourceVersion"]},
                {"op": "add", "path": "/status/addresses",
                 "value": [{"type": "InternalIP", "address": f"192.0.2.{1 + self.writes % 200}"}]},
            ]  # fmt: skip
            try:
                result: dict[str, Any] = await self.client.patch(
                    NODES, name, ops, patch_type="json", subresource="status"
                )
            except (
                Conflict
            ):  # the driver wrote in between: re-read and recompute, as the agent does
                node = await self.client.get(NODES, name)
                continue
            self.writes += 1
            if self.args.metrics:
                self.counter.inc()
            return result


if __name__ == "__main__":
    sys.exit(main())
