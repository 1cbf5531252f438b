"""L2 announcement's pure decisions: packets (ARP and NDP frames), choice (eligible Nodes and
their order per address) and hold (the per-address Lease and when to answer). Pure, no I/O."""
