"""local_ccm.runtime."""
