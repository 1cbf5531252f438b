"""node-bmc's entry in local-ccm-controller-manager (off by default): its own flags
(`--bmc-poll-interval`, `--bmc-concurrent-polls`, `--bmc-credentials-namespace`) next to the
manager's shared ones, its unit and its permissions."""

from __future__ import annotations

from dataclasses import replace

from local_ccm.bmc.api import KubeBmcApi
from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.bmc.options import FLAGS, NAME, Settings, settings_fields, settings_from
from local_ccm.bmc.run import Controller
from local_ccm.bmc.run import permissions as declared
from local_ccm.cli import central, managed
from local_ccm.cli.central import Place
from local_ccm.clock import SystemClock
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.nodes import Access
from local_ccm.runtime.controller import accesses
from local_ccm.runtime.host import Shared, Unit, kit_unit, write_timeout_of

BmcOptions = managed.Managed[Settings]  # own: node-bmc's flags


def controller() -> central.ControllerSpec[BmcOptions]:
    """node-bmc's row in the controller manager's table."""
    return managed.spec(NAME, FLAGS, settings_from, fields=lambda o: settings_fields(o.own),
                        build=build_unit, permissions=permissions)  # fmt: skip


def permissions(options: BmcOptions) -> list[Access]:
    """The RBAC node-bmc needs (what the chart ships when it is on), nothing more."""
    return accesses(declared(settings_of(options, "-")))


def settings_of(options: BmcOptions, identity: str) -> Settings:
    return replace(options.own, event_namespace=options.shared.event_namespace,
                   instance=identity)  # fmt: skip


def build_unit(options: BmcOptions, shared: Shared, place: Place) -> Unit:
    metrics, settings = BmcMetrics(), settings_of(options, place.identity)
    client = central.client_of(place.cluster, NAME, metrics)
    api = KubeBmcApi(AsyncClient(client), write_timeout=write_timeout_of(shared.lease))
    node_source = managed.nodes_of(place.nodes, client)

    def make() -> Controller:
        return Controller(api, node_source, settings, metrics=metrics, clock=SystemClock())

    return kit_unit(client, metrics, metrics.queue, make, backoff=settings.backoff,
                    workers=settings.concurrent_polls)  # fmt: skip
