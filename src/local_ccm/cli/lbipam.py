"""service-lb-ipam's entry in local-ccm-controller-manager (off by default): its flags next to
the manager's shared ones (credentials, Lease, servers: the process's `Shared`), its unit and
its permissions."""

from __future__ import annotations

from dataclasses import replace

from local_ccm.cli import central, managed
from local_ccm.cli.central import Place
from local_ccm.clock import SystemClock
from local_ccm.kube.nodes import Access
from local_ccm.lbipam.api import KubeLbApi
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lbipam.options import FLAGS, NAME, Settings, settings_from
from local_ccm.lbipam.run import Controller
from local_ccm.lbipam.run import permissions as declared
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.host import Shared, Unit, kit_unit, write_timeout_of

LbOptions = managed.Managed[Settings]


def controller() -> central.ControllerSpec[LbOptions]:
    """The allocator's row in the controller manager's table."""
    return managed.spec(
        NAME, FLAGS, settings_from, fields=fields, build=build_unit, permissions=permissions
    )


def fields(options: LbOptions) -> dict[str, object]:
    s = options.own
    kubevip = "/".join(s.kubevip) if s.kubevip else ""
    return {"lb_class": s.lb_class, "lb_classless": s.classless, "lb_kubevip": kubevip}


def permissions(options: LbOptions) -> list[Access]:
    """The RBAC the allocator needs (what the chart ships when it is on), nothing more."""
    return accesses(declared(settings_of(options, "-")))


def settings_of(options: LbOptions, identity: str) -> Settings:
    return replace(options.own, instance=identity,
                   event_namespace=options.shared.event_namespace)  # fmt: skip


def build_unit(options: LbOptions, shared: Shared, place: Place) -> Unit:
    metrics = LbMetrics()
    client = central.client_of(place.cluster, NAME, metrics)
    writes, write_timeout = metrics.writes, write_timeout_of(shared.lease)
    settings = settings_of(options, place.identity)
    # on the event loop: every worker's write in flight at once, no thread per request
    api = KubeLbApi(central.loop_client_of(place.cluster, NAME, metrics), options.own.kubevip,
                    observe=lambda verb, res, code: writes.labels(res, code).inc(),
                    write_timeout=write_timeout)  # fmt: skip
    node_source = managed.nodes_of(place.nodes, client)

    def make() -> Controller:
        return Controller(api, node_source, settings, metrics=metrics, clock=SystemClock())

    return kit_unit(client, metrics, metrics.queue, make, backoff=settings.backoff,
                    workers=settings.workers)  # fmt: skip
