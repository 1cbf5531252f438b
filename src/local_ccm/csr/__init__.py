"""kubelet-serving-approver: approves the kubelet serving certificates whose names and
addresses are exactly those of their Node, and denies the rest (`docs/csr.md`)."""
