"""local-ccm: a small cloud controller for bare-metal Kubernetes.

Three components share this package: the node agent (`local_ccm.agent`), the
node-lifecycle controller (`local_ccm.lifecycle`) and the node IPAM controller
(`local_ccm.ipam`). Wiring lives in `local_ccm.cli`.
"""

__version__ = "0.4.0"
