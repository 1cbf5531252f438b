"""local_ccm.lease."""
