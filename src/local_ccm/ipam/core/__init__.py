"""local_ccm.ipam.core."""
