"""The LoadBalancer address component (not wired into a binary yet)."""
