"""local_ccm.lifecycle.core."""
