"""Layer-2 announcement of LoadBalancer addresses (ARP for IPv4, NDP for IPv6) by the agent.

Only the pure decisions exist so far (`core`): the frames, who may announce an address and in
which order Nodes try, and the per-address Lease decision with its self-fencing. The agent's
adapter (packet socket, Lease loop) is not written yet; docs/l2-announcement.md tells the design.
"""
