"""L2 announcement's pure decisions: packets (ARP and NDP frames), targets (the addresses to
announce, from the pools and the Services), interfaces (on which of the Node's interfaces),
choice (eligible Nodes and their order per address), hold (the per-address Lease and when
to answer) and wire (the packet adapter's rate limit, takeover rounds and groups). Pure, no
I/O."""
