"""The lifecycle component."""
