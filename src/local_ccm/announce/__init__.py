"""Layer-2 announcement of LoadBalancer addresses (ARP for IPv4, NDP for IPv6) by the agent.

The pure decisions are `core`: the frames, what is announced and where, who may announce an
address and in which order Nodes try, the per-address Lease decision with its self-fencing, and
what the packet adapter sends and how fast. The packet adapter is `speaker` (on the event loop)
over `packetsocket` (one AF_PACKET socket per interface). The Lease loop that drives it is not
written yet; docs/l2-announcement.md tells the design.
"""
