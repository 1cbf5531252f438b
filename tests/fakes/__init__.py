"""In-memory fakes behind the project's Protocols, shared by the unit tests.

They stand in for our own seams, never for Kubernetes semantics (the integration tier proves
those); the Lease API fake has a contract test (tests/contracts/) that also runs against the
real adapter. One module per seam: clock, lease, informer, transport, nodes, netlink,
reviewer; and the per-component scenario helpers built on them (agent, lifecycle, ipam).
"""
