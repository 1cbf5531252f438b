"""local_ccm.agent.core."""
