"""The ipam component."""
