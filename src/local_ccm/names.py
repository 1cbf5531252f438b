"""Every label, annotation, taint key, condition type, field manager and component name.

Pure, no I/O. Nothing else in the package spells these strings.
"""

from __future__ import annotations

from typing import Final

# Components: binary names double as field managers and Event reporting components.
AGENT: Final = "local-ccm"
LIFECYCLE: Final = "node-lifecycle-controller"
IPAM: Final = "node-ipam-controller"

# Prefix of every annotation the product owns (shared by the agent and the lifecycle controller).
ANNOTATION_PREFIX: Final = "local-ccm.io/"
OWNED_ADDRESSES_ANNOTATION: Final = ANNOTATION_PREFIX + "owned-addresses"
OWNED_LABELS_ANNOTATION: Final = ANNOTATION_PREFIX + "owned-labels"

# Written by the kubelet, read (never written) by the agent.
PROVIDED_NODE_IP_ANNOTATION: Final = "alpha.kubernetes.io/provided-node-ip"

# Taints.
UNINITIALIZED_TAINT: Final = "node.cloudprovider.kubernetes.io/uninitialized"
# The cloud node lifecycle controller's (k8s.io/cloud-provider, ShutdownTaint): the machine is off.
SHUTDOWN_TAINT: Final = "node.cloudprovider.kubernetes.io/shutdown"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE_TAINT: Final = "node.kubernetes.io/out-of-service"
AUTOSCALER_TAINT: Final = "ToBeDeletedByClusterAutoscaler"

# Node conditions.
ADDRESSES_SYNCED_CONDITION: Final = "LocalCCMAddressesSynced"

# Labels.
CONTROL_PLANE_LABEL: Final = "node-role.kubernetes.io/control-plane"

# NodeBMC (docs/bmc.md): node-bmc's custom resource, which the lifecycle controller reads and on
# which it requests a power-off (fencing) that node-bmc executes.
BMC_GROUP: Final = "bmc.local-ccm.io"
BMC_VERSION: Final = "v1alpha1"
NODEBMC_KIND: Final = "NodeBMC"
NODEBMC_PLURAL: Final = "nodebmcs"
POWER_OFF_ANNOTATION: Final = BMC_GROUP + "/power-off"
