"""The approver's decisions: pure, no I/O."""
