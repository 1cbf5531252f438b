"""The agent's command line: every flag of the original agent (with its names, types and
defaults, so existing manifests keep working) and the new ones, declared once.

Pure, no I/O. Validation of the values lives in ``agent.options``.
"""

from __future__ import annotations

from local_ccm import __version__, names
from local_ccm.agent.core.config import DEFAULT_INTERFACE_EXCLUDE
from local_ccm.flags import Flag, FlagSet

PROG = names.AGENT
DETECT = "detect"
MINUTE = 60.0

FLAGS = FlagSet(
    PROG,
    [
        # Flags of the original [compat]
        Flag("node-name", "string", "", "Node to manage (required except in detect mode).",
             env=("NODE_NAME",)),
        Flag("kubeconfig", "string", "", "Kubeconfig file. Empty: in-cluster config, else "
             "$KUBECONFIG, else ~/.kube/config.", metavar="path"),
        Flag("internal-ip-target", "string", "", "Route-lookup targets for InternalIP, at most "
             "one per family. Empty: no route-based InternalIP detection.", metavar="IPs"),
        Flag("external-ip-target", "string", "8.8.8.8", "Route-lookup targets for ExternalIP, "
             "at most one per family. Empty: no route-based ExternalIP detection.",
             metavar="IPs"),
        Flag("remove-taint", "bool", True, "Remove the node.cloudprovider.kubernetes.io/"
             "uninitialized taint."),
        Flag("reconcile-interval", "duration", 10, "Period of local re-detection (>= 1s)."),
        Flag("run-once", "bool", False, "One pass, then exit 0 (done) or 1."),
        Flag("enable-azure-provider-id", "bool", False, "Set spec.providerID from Azure IMDS."),
        Flag("v", "int", 0, "Log verbosity 0-5."),
        # New flags [beyond]
        Flag("internal-ip-cidrs", "string", "", "Allowed ranges for InternalIP; a '!' prefix "
             "excludes (e.g. 10.0.0.0/8,!10.96.0.0/12).", metavar="CIDRs"),
        Flag("external-ip-cidrs", "string", "", "Allowed ranges for ExternalIP; a '!' prefix "
             "excludes.", metavar="CIDRs"),
        Flag("external-ip-subnet", "string", "", "Alias appended to --external-ip-cidrs.",
             metavar="CIDR"),
        Flag("internal-ip-interfaces", "string", "", "Interface globs allowed for InternalIP "
             "(empty: all).", metavar="globs"),
        Flag("external-ip-interfaces", "string", "", "Interface globs allowed for ExternalIP "
             "(empty: all).", metavar="globs"),
        Flag("interface-exclude", "string", ",".join(DEFAULT_INTERFACE_EXCLUDE),
             "Interface globs never used; setting it replaces the default list.",
             metavar="globs"),
        Flag("include-vips", "bool", False, "Allow host-prefix VIPs and IPv4 secondary "
             "addresses as candidates."),
        Flag("ip-family-order", "string", "", "ipv4,ipv6 or ipv6,ipv4. Empty: the order of "
             "the provided-node-ip annotation, else ipv4 first.", metavar="families"),
        Flag("provided-node-ip-policy", "string", "prefer", "prefer, strict or ignore.",
             metavar="policy"),
        Flag("dedupe-external-ip", "bool", True, "Do not write an ExternalIP equal to an "
             "InternalIP."),
        Flag("require-internal-ip", "bool", False, "Taint removal needs an InternalIP."),
        Flag("provider-id", "string", "", "spec.providerID template with {node_name}, "
             "{system_uuid}, {machine_id} (e.g. local://{system_uuid}).", metavar="template"),
        Flag("report-condition", "bool", True, "Maintain the LocalCCMAddressesSynced "
             "condition."),
        Flag("resync-interval", "duration", 30 * MINUTE, "Full resync against the API "
             "(>= 1m, >= --reconcile-interval)."),
        Flag("settle-time", "duration", 5, "A changed address must be stable this long "
             "(0-5m)."),
        Flag("api-timeout", "duration", 15, "Timeout of one API request (>= 1s)."),
        Flag("event-namespace", "string", "default", "Namespace for Events about the Node.",
             metavar="namespace"),
        Flag("metrics-bind-address", "string", "127.0.0.1:8092", "Address of /metrics; 0 "
             "disables.", metavar="host:port"),
        Flag("health-probe-bind-address", "string", "127.0.0.1:8093", "Address of /healthz "
             "and /readyz; 0 disables.", metavar="host:port"),
        Flag("log-format", "string", "text", "text or json.", metavar="format"),
        Flag("detect-only", "bool", False, "Same as the detect sub-command: print what would "
             "be written, write nothing."),
        Flag("output", "string", "text", "Detect mode output: text or json.",
             metavar="format"),
    ],
    subcommands=frozenset({DETECT}),
    version=__version__,
)  # fmt: skip
