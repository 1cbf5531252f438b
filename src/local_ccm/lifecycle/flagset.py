"""The node-lifecycle-controller's flags, the original's [compat] and the new ones [beyond]:
names, types, defaults and help. `local_ccm.lifecycle.options` validates what they parse to.

Pure, no I/O.
"""

from __future__ import annotations

from typing import Final

from local_ccm import __version__, names
from local_ccm.flags import Flag, FlagSet
from local_ccm.lifecycle.core.state import DEFAULT_MAX_UNHEALTHY

PROG: Final = names.LIFECYCLE
MINUTE: Final = 60.0

FLAGS = FlagSet(
    PROG,
    [
        # Flags of the original [compat]
        Flag("kubeconfig", "string", "", "Kubeconfig file. Empty: in-cluster config, else "
             "$KUBECONFIG, else ~/.kube/config.", metavar="path"),
        Flag("node-selector", "string", "", "Label selector of the managed Nodes; when set, "
             "the autoscaler-taint filter is ignored.", metavar="selector"),
        Flag("watch-autoscaler-taint", "bool", True, "Without a selector, manage only Nodes "
             "tainted ToBeDeletedByClusterAutoscaler:NoSchedule."),
        Flag("protected-labels", "string", "", "Comma-separated key or key=value; a matching "
             "label or annotation protects a Node.", metavar="list"),
        Flag("not-ready-timeout", "duration", 5 * MINUTE, "Minimum NotReady age (since the "
             "Ready condition's lastTransitionTime) before probing."),
        Flag("ping-timeout", "duration", 5.0, "Upper bound of one probe of one address."),
        Flag("ping-count", "int", 3, "ICMP echo requests per address; 0 = no ICMP probe "
             "(without --probe: delete on NotReady alone)."),
        Flag("reconcile-interval", "duration", 30.0, "Re-evaluation period, probe gap and "
             "rate-limit window."),
        Flag("leader-elect", "bool", True, "Lease-based leader election."),
        # The original's --leader-elect-id (Lease name) and --namespace (Lease namespace) are
        # aliases of kube-controller-manager's names, which every binary of this image accepts.
        Flag("leader-elect-resource-name", "string", names.LIFECYCLE, "Lease name.",
             aliases=("leader-elect-id",), metavar="name"),
        Flag("leader-elect-resource-namespace", "string", "kube-system", "Lease namespace.",
             env=("POD_NAMESPACE",), aliases=("namespace",), metavar="namespace"),
        Flag("dry-run", "bool", False, "Decide and log, never delete Nodes."),
        Flag("v", "int", 0, "Log verbosity 0-5."),
        # New flags [beyond]
        Flag("leader-elect-lease-duration", "duration", 15.0, "Lease duration."),
        Flag("leader-elect-renew-deadline", "duration", 10.0, "Stop acting when the lease "
             "could not be renewed for this long."),
        Flag("leader-elect-retry-period", "duration", 2.0, "Interval between lease attempts."),
        Flag("leader-elect-resource-lock", "string", "leases", "Lock type; only leases.",
             metavar="type"),
        Flag("leader-elect-identity", "string", "", "Holder identity; empty: POD_NAME or "
             "hostname plus a random suffix.", metavar="id"),
        Flag("max-unhealthy", "string", str(DEFAULT_MAX_UNHEALTHY), "Circuit breaker: N or P% "
             "unhealthy Nodes above which nothing is deleted.", metavar="N|P%"),
        Flag("max-deletions-per-interval", "int", 1, "Deletions allowed per "
             "--reconcile-interval."),
        Flag("probe", "string", "icmp", "Probe kinds: icmp, tcp:<port>, or none.",
             metavar="kinds"),
        Flag("probe-all-addresses", "bool", False, "Probe every InternalIP and ExternalIP "
             "(default: InternalIPs, else ExternalIPs)."),
        Flag("probe-families", "string", "ipv4,ipv6", "Address families probed.",
             metavar="families"),
        Flag("ping-interval", "duration", 1.0, "Gap between ICMP echoes of one probe."),
        Flag("icmp-mode", "string", "auto", "raw, datagram or auto.", metavar="mode"),
        Flag("probe-concurrency", "int", 64, "Maximum concurrently running probes."),
        Flag("self-check", "bool", True, "Probe Ready peers before deleting (self-partition "
             "check)."),
        Flag("self-check-sample", "int", 3, "Ready peer Nodes probed by the self-check."),
        Flag("node-name", "string", "", "The Node this controller runs on: never deleted, "
             "never a self-check peer.", env=("NODE_NAME",), metavar="name"),
        Flag("out-of-service-taint", "bool", False, "Taint node.kubernetes.io/out-of-service "
             "before deleting."),
        Flag("out-of-service-timeout", "duration", 5 * MINUTE, "Longest wait for "
             "VolumeAttachments after tainting."),
        Flag("metrics-bind-address", "string", ":8090", "Address of /metrics; 0 disables.",
             metavar="host:port"),
        Flag("metrics-secure", "bool", True, "Serve /metrics over HTTPS, only to bearer tokens "
             "allowed to get /metrics (TokenReview, SubjectAccessReview); false: plain HTTP, "
             "no authentication."),
        Flag("metrics-cert-dir", "string", "", "Directory holding tls.crt and tls.key for "
             "/metrics; empty: a self-signed certificate made at start-up.", metavar="dir"),
        Flag("health-probe-bind-address", "string", ":8091", "Address of /healthz and "
             "/readyz; 0 disables.", metavar="host:port"),
        Flag("log-format", "string", "text", "text or json.", metavar="format"),
        Flag("event-namespace", "string", "default", "Namespace of Events about Nodes.",
             metavar="namespace"),
    ],
    # [beyond] The original had no --version; every binary of this image prints one (deploy D12).
    version=__version__,
)  # fmt: skip
