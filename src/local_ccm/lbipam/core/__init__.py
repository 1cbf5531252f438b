"""Pure decisions of the LoadBalancer address component."""
