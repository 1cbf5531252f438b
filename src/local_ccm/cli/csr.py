"""kubelet-serving-approver's entry in local-ccm-controller-manager (off by default): its own
flags (`--csr-deny`, `--csr-ip-prefixes`, `--csr-max-expiration`) next to the manager's shared
ones, its unit and its permissions."""

from __future__ import annotations

from dataclasses import replace

from local_ccm.cli import central, managed
from local_ccm.cli.central import Place
from local_ccm.clock import SystemClock
from local_ccm.csr.api import KubeCsrApi
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.csr.options import FLAGS, NAME, Settings, settings_fields, settings_from
from local_ccm.csr.run import Controller
from local_ccm.csr.run import permissions as declared
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.nodes import Access
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.host import Shared, Unit, kit_unit, write_timeout_of

CsrOptions = managed.Managed[Settings]  # own: the approver's flags


def controller() -> central.ControllerSpec[CsrOptions]:
    """The approver's row in the controller manager's table."""
    return managed.spec(NAME, FLAGS, settings_from, fields=lambda o: settings_fields(o.own),
                        build=build_unit, permissions=permissions)  # fmt: skip


def permissions(options: CsrOptions) -> list[Access]:
    """The RBAC the approver needs (what the chart ships when it is on), nothing more."""
    return accesses(declared(settings_of(options, "-")))


def settings_of(options: CsrOptions, identity: str) -> Settings:
    return replace(options.own, event_namespace=options.shared.event_namespace,
                   instance=identity)  # fmt: skip


def build_unit(options: CsrOptions, shared: Shared, place: Place) -> Unit:
    metrics, settings = CsrMetrics(), settings_of(options, place.identity)
    client = central.client_of(place.cluster, NAME, metrics)
    api = KubeCsrApi(AsyncClient(client), write_timeout=write_timeout_of(shared.lease))
    node_source = managed.nodes_of(place.nodes, client)

    def make() -> Controller:
        return Controller(api, node_source, settings, metrics=metrics, clock=SystemClock())

    return kit_unit(client, metrics, metrics.queue, make, backoff=settings.backoff)
