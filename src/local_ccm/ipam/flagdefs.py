"""The flags and environment variables of node-ipam-controller.

Pure, no I/O: the table, and the `IPAM_RESOURCE_LOCK` rule, applied to the
environment *before* parsing because that one variable may mean either the retry period or
the lock type. Validation lives in `ipam.options`.
"""

from __future__ import annotations

from collections.abc import Mapping

from local_ccm import __version__, names
from local_ccm.flags import (
    Flag,
    FlagSet,
    GoSyntaxError,
    Problem,
    go_quote,
    invalid_env,
    parse_go_duration,
)

PROG = names.IPAM
LOCK_TYPES = ("leases", "endpointsleases", "configmapsleases", "endpoints", "configmaps")

FLAGS = FlagSet(
    PROG,
    [
        # Upstream's flags and variables [compat]
        Flag("apiserver", "string", "", "API server URL; overrides the kubeconfig's server "
             "(also with in-cluster credentials).", env=("IPAM_API_SERVER_URL",), metavar="URL"),
        Flag("kubeconfig", "string", "", "Kubeconfig path; empty: in-cluster config.",
             env=("IPAM_KUBECONFIG",), metavar="path"),
        Flag("health-probe-address", "string", ":8081", "Listen address of the web server "
             "(health, readiness; metrics with --metrics-secure=false); deprecated alias of "
             "--webserver-bind-address, wins when set.", env=("IPAM_HEALTH_PROBE_ADDR",),
             metavar="host:port"),
        Flag("webserver-bind-address", "string", ":8081", "Listen address of the web server.",
             env=("IPAM_WEBSERVER_BIND_ADDR",), metavar="host:port"),
        # Upstream's --enable-leader-election, --leader-elect-namespace and --leader-elect-id
        # (the holder identity) are aliases of kube-controller-manager's names, which every
        # binary of this image accepts.
        Flag("leader-elect", "bool", True, "Lease-based leader election.",
             env=("IPAM_ENABLE_LEADER_ELECTION",), aliases=("enable-leader-election",)),
        Flag("leader-elect-lease-duration", "duration", 15, "Lease duration.",
             env=("IPAM_LEASE_DURATION",)),
        Flag("leader-elect-renew-deadline", "duration", 10, "Renew deadline.",
             env=("IPAM_RENEW_DEADLINE",)),
        # IPAM_RESOURCE_LOCK (legacy) is folded in by resolve_resource_lock_env.
        Flag("leader-elect-retry-period", "duration", 2, "Retry period.",
             env=("IPAM_LEADER_ELECT_RETRY_PERIOD",)),
        Flag("leader-elect-resource-lock", "string", "leases", "Lock type; only leases works.",
             env=("IPAM_RESOURCE_LOCK_NAME",), metavar="type"),
        Flag("leader-elect-resource-name", "string", "node-ipam-controller", "Lease name.",
             env=("IPAM_RESOURCE_NAME",), metavar="name"),
        Flag("leader-elect-identity", "string", "", "Holder identity; empty: POD_NAME or "
             "hostname plus a random suffix.", env=("IPAM_LEADER_ELECT_ID",),
             aliases=("leader-elect-id",), metavar="id"),
        Flag("leader-elect-resource-namespace", "string", "", "Lease namespace; empty: "
             "POD_NAMESPACE.", env=("IPAM_LEADER_ELECT_NAMESPACE",),
             aliases=("leader-elect-namespace",), metavar="namespace"),
        # New flags [beyond]
        Flag("metrics-bind-address", "string", "", "Empty: with --metrics-secure :8094, else "
             "/metrics on the web server; an address: a separate server; 0: off.",
             env=("IPAM_METRICS_BIND_ADDR",), metavar="host:port"),
        Flag("metrics-secure", "bool", True, "Serve /metrics over HTTPS on its own address, only "
             "to bearer tokens allowed to get /metrics (TokenReview, SubjectAccessReview); "
             "false: plain HTTP, no authentication.", env=("IPAM_METRICS_SECURE",)),
        Flag("metrics-cert-dir", "string", "", "Directory holding tls.crt and tls.key for "
             "/metrics; empty: a self-signed certificate made at start-up.",
             env=("IPAM_METRICS_CERT_DIR",), metavar="dir"),
        Flag("v", "int", 0, "Log verbosity: 0-1 INFO, 2-3 more INFO, >= 4 DEBUG.",
             env=("IPAM_LOG_VERBOSITY",)),
        Flag("log-format", "string", "text", "text or json.", env=("IPAM_LOG_FORMAT",),
             aliases=("logging-format",), metavar="format"),
        Flag("cluster-cidr", "string", "", "Default pool: at most one IPv4 and one IPv6 CIDR.",
             env=("IPAM_CLUSTER_CIDR",), metavar="CIDRs"),
        Flag("node-cidr-mask-size", "int", None, "Mask of a single-stack --cluster-cidr.",
             env=("IPAM_NODE_CIDR_MASK_SIZE",)),
        Flag("node-cidr-mask-size-ipv4", "int", 24, "Per-Node IPv4 mask of the default pool.",
             env=("IPAM_NODE_CIDR_MASK_SIZE_IPV4",)),
        Flag("node-cidr-mask-size-ipv6", "int", 64, "Per-Node IPv6 mask of the default pool.",
             env=("IPAM_NODE_CIDR_MASK_SIZE_IPV6",)),
        Flag("service-cluster-ip-range", "string", "", "Reserved: at most one CIDR per family.",
             env=("IPAM_SERVICE_CLUSTER_IP_RANGE",), metavar="CIDRs"),
        Flag("reserved-cidrs", "string", "", "Reserved CIDRs, comma-separated.",
             env=("IPAM_RESERVED_CIDRS",), metavar="CIDRs"),
        Flag("legacy-and-selector-terms", "bool", False, "Deprecated: AND the terms of a "
             "nodeSelector as upstream did.", env=("IPAM_LEGACY_AND_SELECTOR_TERMS",)),
        Flag("cidr-reuse-delay", "duration", 0, "Quarantine of released blocks.",
             env=("IPAM_CIDR_REUSE_DELAY",)),
        Flag("concurrent-node-syncs", "int", 20, "Concurrent Node writes.",
             env=("IPAM_CONCURRENT_NODE_SYNCS",)),
        Flag("status-update-interval", "duration", 5, "Minimum gap between status writes of "
             "one pool.", env=("IPAM_STATUS_UPDATE_INTERVAL",)),
        Flag("kube-api-qps", "float", 50, "Client-side request rate.",
             env=("IPAM_KUBE_API_QPS",)),
        Flag("kube-api-burst", "int", 100, "Client-side burst.", env=("IPAM_KUBE_API_BURST",)),
        Flag("event-namespace", "string", "default", "Namespace of Events about Nodes and "
             "ClusterCIDRs; the API server accepts only default.", env=("IPAM_EVENT_NAMESPACE",),
             metavar="namespace"),
    ],
    version=__version__,
)  # fmt: skip


def resolve_resource_lock_env(
    env: Mapping[str, str],
) -> tuple[dict[str, str], list[str], list[Problem]]:
    """Upstream's README bound the retry period to `IPAM_RESOURCE_LOCK`, a name that reads
    like the lock type: IPAM_LEADER_ELECT_RETRY_PERIOD wins, else a duration is the retry
    period, else a lock name is the lock type (with a WARNING), else exit 2.
    Returns (rewritten env, warnings, problems)."""
    out = dict(env)
    value = out.pop("IPAM_RESOURCE_LOCK", "")
    if not value or out.get("IPAM_LEADER_ELECT_RETRY_PERIOD"):
        return out, [], []
    try:
        parse_go_duration(value)
    except GoSyntaxError:
        pass
    else:
        out["IPAM_LEADER_ELECT_RETRY_PERIOD"] = value
        note = (
            "IPAM_RESOURCE_LOCK is deprecated for the retry period; "
            "use IPAM_LEADER_ELECT_RETRY_PERIOD"
        )
        return out, [note], []
    if value in LOCK_TYPES:
        out.setdefault("IPAM_RESOURCE_LOCK_NAME", value)
        note = f"IPAM_RESOURCE_LOCK={value} read as the lock type; use IPAM_RESOURCE_LOCK_NAME"
        return out, [note], []
    reason = (
        f"{go_quote(value)} is neither a duration (retry period) nor a lock type "
        f"({', '.join(LOCK_TYPES)})"
    )
    return out, [], [invalid_env("IPAM_RESOURCE_LOCK", reason)]
