"""Which Nodes show each address and name: the index the approver keeps from its Node watch,
so that a SAN another Node also shows is found without a scan of every Node per CSR. A plain
data structure, fed `put` and `drop` by the loop. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable

from local_ccm.csr.core.model import IPAddress, Node, dns_key, mapped_ipv4

San = IPAddress | str  # an address (InternalIP/ExternalIP) or a name (Hostname, *DNS)


def key_of(san: San) -> San:
    """A SAN as a certificate's user compares it: a name case-insensitively without a trailing
    dot, an IPv4-mapped IPv6 address as its IPv4 address."""
    return dns_key(san) if isinstance(san, str) else mapped_ipv4(san) or san


class Claims:
    """Node names by every address and name their status shows."""

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self._holders: dict[San, set[str]] = {}
        self._shown: dict[str, frozenset[San]] = {}
        for node in nodes:
            self.put(node)

    def __len__(self) -> int:
        """How many distinct addresses and names some Node shows."""
        return len(self._holders)

    def put(self, node: Node) -> None:
        """`node` as it is now: what it showed before and no longer shows is forgotten."""
        self.drop(node.name)
        shown: frozenset[San] = frozenset(map(key_of, node.ips | node.dns_names))
        self._shown[node.name] = shown
        for san in shown:
            self._holders.setdefault(san, set()).add(node.name)

    def drop(self, name: str) -> None:
        """Node `name` is gone (or never was)."""
        for san in self._shown.pop(name, ()):
            holders = self._holders[san]
            holders.discard(name)
            if not holders:
                del self._holders[san]

    def others(self, san: San, name: str) -> tuple[str, ...]:
        """The Nodes other than `name` that show `san`, sorted."""
        return tuple(sorted(self._holders.get(key_of(san), set()) - {name}))
