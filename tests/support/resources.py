"""The API resources local-ccm uses, plus the ones only tests create or read."""

from __future__ import annotations

from local_ccm.kube.resources import (
    CLUSTER_CIDRS,
    EVENTS,
    LEASES,
    NODES,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    Resource,
)

__all__ = [
    "CLUSTER_CIDRS",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIG_MAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "ROLES",
    "ROLE_BINDINGS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "SERVICE_ACCOUNTS",
    "SUBJECT_ACCESS_REVIEWS",
    "TOKEN_REVIEWS",
    "VALIDATING_ADMISSION_POLICIES",
    "VALIDATING_ADMISSION_POLICY_BINDINGS",
    "Resource",
]

_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    _RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
ROLES = Resource(_RBAC, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
VALIDATING_ADMISSION_POLICIES = Resource(
    _ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False
)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource(
    _ADMISSION,
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
