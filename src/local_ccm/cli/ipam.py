"""`node-ipam-controller`: the controller manager with the node-ipam controller alone.

Exit codes: 0 graceful stop or --help; 1 internal error; 2 invalid flags or environment (an
unusable kubeconfig too); 3 leadership lost; 4 start-up precondition failed (credentials
rejected, RBAC).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from local_ccm import names
from local_ccm.cli import central
from local_ccm.cli.central import Place
from local_ccm.clock import SystemClock
from local_ccm.flags import Parsed, Problem
from local_ccm.ipam import options as ipam_options
from local_ccm.ipam.api import KubeIpamApi, TokenBucket
from local_ccm.ipam.core.model import default_pool
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.options import FLAGS, PROG, IpamOptions
from local_ccm.ipam.run import Controller, Settings
from local_ccm.ipam.run import permissions as declared
from local_ccm.kube.nodes import Access
from local_ccm.kube.transport import MAX_IDLE
from local_ccm.lease.options import Election
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.host import Serving, Shared, Unit, kit_unit, write_timeout_of

# Requests held at the rate limit go in groups this large (`kube.nodes.TokenBucket`): one
# wake-up for a group instead of one per Node; as many as the client keeps idle connections, so
# a group's requests find a connection each without a new TLS handshake (docs/ipam.md).
PACED_GROUP = MAX_IDLE


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run node-ipam-controller: `argv` without the program name; the exit status."""
    return central.run_one(controller(), argv, env)


def controller() -> central.ControllerSpec[IpamOptions]:
    """The IPAM controller's row in the controller manager's table."""

    def load(parsed: Parsed, env: central.Env) -> IpamOptions | list[Problem]:
        return ipam_options.options_from(parsed, env[0], warnings=env[1], problems=env[2])

    return central.ControllerSpec(
        "node-ipam", PROG, lambda: FLAGS, load, shared_of, ipam_options.startup_fields,
        build_unit, permissions, fix_env=ipam_options.resolve_resource_lock_env,
        servers=frozenset({"web", "metrics", "metrics_secure"}),
    )  # fmt: skip


def lease_of(options: IpamOptions) -> Election | None:
    return options.election if options.election.enabled else None


def serving_of(options: IpamOptions) -> Serving:
    """Health on the web server; metrics there too, on their own address, or nowhere."""
    web = str(options.web_bind) if options.web_bind else "0"
    metrics = {"web": web, "off": "0"}.get(options.metrics_mode, str(options.metrics_bind))
    separate = options.metrics_mode == "separate"
    secure, flag = options.metrics_secure and separate, options.web_flag
    return Serving(web, metrics, secure, options.metrics_cert_dir, health_flag=flag,
                   metrics_flag="metrics-bind-address" if separate else flag)  # fmt: skip


def shared_of(options: IpamOptions) -> Shared:
    """The process's settings as node-ipam-controller's flags give them."""
    return Shared(serving_of(options), lease_of(options), options.log_format, options.verbosity,
                  options.event_namespace, options.ignored_klog, options.warnings)  # fmt: skip


def permissions(options: IpamOptions) -> list[Access]:
    """The RBAC the controller needs with this configuration (what the chart ships)."""
    return accesses(declared(event_namespace=options.event_namespace))


def settings_from(options: IpamOptions, identity: str) -> Settings:
    pool = None
    if options.cluster_cidrs:
        pool = default_pool(options.cluster_cidrs, options.mask_v4, options.mask_v6)
    return Settings(
        event_namespace=options.event_namespace,
        concurrent_node_syncs=options.concurrent_node_syncs,
        status_interval=options.status_interval,
        default_pool=pool,
        reserved=options.reserved,
        legacy_and_terms=options.legacy_and_terms,
        reuse_delay=options.reuse_delay,
        instance=identity,
    )


def build_unit(options: IpamOptions, shared: Shared, place: Place) -> Unit:
    metrics = IpamMetrics()
    client = central.client_of(place.cluster, names.IPAM, metrics)

    def count(verb: str, resource: str, code: str) -> None:
        if (verb, resource) == ("patch", "nodes"):
            metrics.node_writes.labels(code).inc()

    write_timeout = write_timeout_of(shared.lease)
    limiter = TokenBucket(options.qps, options.burst, group=PACED_GROUP)
    api = KubeIpamApi(central.loop_client_of(place.cluster, names.IPAM, metrics), count=count,
                      write_timeout=write_timeout, limiter=limiter)  # fmt: skip

    settings = settings_from(options, place.identity)

    def make() -> Controller:
        return Controller(api, settings, metrics, SystemClock(), nodes=place.nodes)

    return kit_unit(client, metrics, metrics.queue, make, backoff=settings.backoff,
                    workers=options.concurrent_node_syncs, check="controller")  # fmt: skip
