"""The agent component."""
