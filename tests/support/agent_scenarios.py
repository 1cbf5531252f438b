"""Topologies, Node set-ups and observers shared by the agent's acceptance scenarios; the agent
itself runs through agent_harness (pattern 3 in docs/testing.md) or
agent_process (pattern 1 in docs/testing.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from local_ccm import names
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError
from tests.support import resources as r
from tests.support.agent_harness import taint_keys
from tests.support.netns import Namespace, NetnsFactory

Pair = tuple[str, str]
A01_ARGS = ("--internal-ip-target=192.0.2.1", "--external-ip-target=203.0.113.1")
A01_ADDRESSES = [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.10")]


def a01_network(netns: NetnsFactory) -> Namespace:
    """eth1 192.0.2.10/24 (route 192.0.2.0/24), eth0 198.51.100.10/24 with the default route."""
    eth1 = netns.uplink(
        node_if="eth1",
        gateway_if="gw1",
        v4=("192.0.2.10/24", "192.0.2.1/24"),
        v6=None,
        default_routes=False,
    )
    netns.uplink(
        eth1.node,
        node_if="eth0",
        gateway_if="gw0",
        v4=("198.51.100.10/24", "198.51.100.1/24"),
        v6=None,
    )
    return eth1.node


def pairs(node: Mapping[str, Any]) -> list[Pair]:
    return [(a["type"], a["address"]) for a in (node.get("status") or {}).get("addresses") or []]


def is_untainted(node: Mapping[str, Any]) -> bool:
    return names.UNINITIALIZED_TAINT not in taint_keys(node)


def initialised(kube: Client, name: str) -> Obj | None:
    """The Node once the uninitialized taint is gone, else None (for ``eventually``)."""
    node = kube.get(r.NODES, name)
    return node if is_untainted(node) else None


def set_addresses(kube: Client, name: str, entries: Sequence[Pair]) -> Obj:
    """Write ``status.addresses`` as another writer would: the full list in a merge patch,
    under ``kube``'s field manager."""
    body = {"status": {"addresses": [{"type": t, "address": a} for t, a in entries]}}
    return kube.patch(r.NODES, name, body, patch_type="merge", subresource="status")


def kubelet_seed(kube: Client, name: str, internal: str = "192.0.2.10") -> Obj:
    """What a kubelet with ``--node-ip=<internal>`` writes: ``[InternalIP, Hostname]``."""
    return set_addresses(kube, name, [("InternalIP", internal), ("Hostname", name)])


def events(kube: Client, node: str, namespace: str = "default") -> list[Obj]:
    try:
        found = kube.list(
            r.EVENTS, namespace=namespace, field_selector=f"involvedObject.name={node}"
        )
    except ApiError:
        return []
    return list(found.get("items") or [])


def events_with(kube: Client, node: str, reason: str) -> list[Obj]:
    return [e for e in events(kube, node) if e.get("reason") == reason]


def reasons(kube: Client, node: str) -> set[str]:
    return {str(e.get("reason")) for e in events(kube, node)}


def condition_of(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == names.ADDRESSES_SYNCED_CONDITION:
            return dict(c)
    return None


def condition_is(kube: Client, name: str, status: str, reason: str) -> Obj | None:
    node = kube.get(r.NODES, name)
    c = condition_of(node)
    return node if c and (c.get("status"), c.get("reason")) == (status, reason) else None


class NodeRecorder:
    """Records every version of one Node from a watch, from ``resource_version`` on.

    ``with NodeRecorder(kube, name, rv) as rec: ...`` then ``rec.versions``; used to prove that
    something never happened (no address change, taint never removed early).
    """

    def __init__(self, kube: Client, name: str, resource_version: str) -> None:
        self.versions: list[Obj] = []
        self.deleted = 0
        self._lock = threading.Lock()
        self._stream = kube.watch(
            r.NODES,
            field_selector=f"metadata.name={name}",
            resource_version=resource_version,
            timeout_seconds=600,
        )
        self._thread = threading.Thread(target=self._read, name=f"recorder:{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                if event.type == "BOOKMARK":
                    continue
                with self._lock:
                    if event.type == "DELETED":
                        self.deleted += 1
                    else:
                        self.versions.append(event.object)
        except (ApiError, OSError, ValueError):
            return  # closed by close()

    def snapshot(self) -> list[Obj]:
        with self._lock:
            return list(self.versions)

    def address_lists(self) -> list[list[Pair]]:
        """Distinct consecutive ``status.addresses`` values seen."""
        seen: list[list[Pair]] = []
        for node in self.snapshot():
            if not seen or seen[-1] != pairs(node):
                seen.append(pairs(node))
        return seen

    def close(self) -> None:
        self._stream.close()
        self._thread.join(5)

    def __enter__(self) -> NodeRecorder:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def hold(
    seconds: float, check: Callable[[], object], *, interval: float = 0.5, what: str = ""
) -> int:
    """Assert that ``check()`` stays truthy for ``seconds`` (a deadline, not a blind sleep:
    every poll is an assertion). Returns the number of polls."""
    deadline = time.monotonic() + seconds
    polls = 0
    while True:
        value = check()
        polls += 1
        if not value:
            raise AssertionError(
                f"{what or 'condition'} stopped holding after {polls} polls: {value!r}"
            )
        if time.monotonic() >= deadline:
            return polls
        time.sleep(interval)


def move_address(ns: Namespace, dev: str, old: str, new: str, gateway: str) -> None:
    """Replace ``old`` by ``new`` (both CIDRs) on ``dev`` keeping the default route via
    ``gateway``: ``new`` is added as a secondary and promoted when ``old`` goes."""
    ns.sysctl(f"net.ipv4.conf.{dev}.promote_secondaries=1")
    ns.batch(
        f"addr add {new} dev {dev}",
        f"addr del {old} dev {dev}",
        f"route replace default via {gateway} dev {dev}",
    )


def metric_total(agent: Any, name: str, **match: str) -> float:
    """Sum of an in-process agent's samples of ``name`` whose labels include ``match``."""
    total = 0.0
    for family in agent.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and set(match.items()) <= set(sample.labels.items()):
                total += sample.value
    return total


def patches(agent: Any) -> float:
    """PATCH requests the in-process agent sent (any resource, any outcome)."""
    return metric_total(agent, "rest_client_requests_total", method="PATCH")
