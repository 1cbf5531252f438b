"""service-lb-ipam's entry in local-ccm-controller-manager (off by default): its flags next to
the manager's shared ones, which it reads through the lifecycle controller's options
(credentials, Lease, servers), its unit and its permissions."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from local_ccm import __version__
from local_ccm.cli import central
from local_ccm.cli import lifecycle as base
from local_ccm.cli.common import Serving, Unit
from local_ccm.clock import SystemClock
from local_ccm.flags import FlagSet, Parsed, unite
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.nodes import Access
from local_ccm.kube.resources import NODES
from local_ccm.lbipam.lbapi import CONFIGMAPS, NAMESPACES, POOLS, SERVICES, KubeLbApi
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lbipam.options import FLAGS, NAME, Settings, settings_from
from local_ccm.lbipam.run import Controller
from local_ccm.lease.elector import LeaderContext
from local_ccm.lease.options import Election
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.lifecycle.options import LifecycleOptions, options_from
from local_ccm.runtime.serve import Checks


@dataclass(frozen=True)
class LbOptions:
    """The manager's shared options (as the lifecycle controller reads them) and ours."""

    shared: LifecycleOptions
    settings: Settings

    def __getattr__(self, name: str) -> Any:
        """The shared settings the process reads from its first controller's options
        (credentials, logging) are the lifecycle controller's."""
        return getattr(self.shared, name)


def controller() -> central.Controller:
    """The allocator's entry in the controller manager's table."""
    return central.Controller(
        NAME, central.MANAGER, flags, load, fields, lease_of, serving_of, build_unit,
        default_on=False,
    )  # fmt: skip


def flags() -> FlagSet:
    return unite(central.MANAGER, [LIFECYCLE_FLAGS.flags, FLAGS], version=__version__)


def load(parsed: Parsed, env: central.Env) -> Any:
    shared, own = options_from(parsed), settings_from(parsed)
    problems = [*(shared if isinstance(shared, list) else ()),
                *(own if isinstance(own, list) else ())]  # fmt: skip
    if problems or isinstance(shared, list) or isinstance(own, list):
        return problems
    return LbOptions(shared, replace(own, event_namespace=shared.event_namespace))


def fields(options: LbOptions) -> dict[str, object]:
    s = options.settings
    kubevip = "/".join(s.kubevip) if s.kubevip else ""
    return {"lb_class": s.lb_class, "lb_classless": s.classless, "lb_kubevip": kubevip}


def lease_of(options: LbOptions) -> Election | None:
    return base.lease_of(options.shared)


def serving_of(options: LbOptions) -> Serving:
    return base.serving_of(options.shared)


def permissions(options: LbOptions) -> list[Access]:
    """The RBAC the allocator needs (what the chart ships when it is on), nothing more."""
    s = options.settings
    reads = [SERVICES, POOLS, NAMESPACES]
    found = [Access(verb, r.plural, r.group) for r in reads for verb in ("list", "watch")]
    found += [
        Access("patch", SERVICES.plural),
        Access("patch", SERVICES.plural, subresource="status"),
        Access("patch", POOLS.plural, POOLS.group, subresource="status"),
        Access("create", "events"),  # about a Service: in its own namespace
    ]
    if s.kubevip:
        namespace, name = s.kubevip
        found += [
            Access(v, CONFIGMAPS.plural, namespace=namespace, name=name) for v in ("list", "watch")
        ]
    return found


def build_unit(
    options: LbOptions, cluster: ClusterConfig, identity: str, nodes: ListWatch | None = None
) -> Unit:
    metrics = LbMetrics()
    client = Client(cluster, field_manager=NAME, user_agent=f"{NAME}/{__version__}")
    api = KubeLbApi(AsyncClient(client), options.settings.kubevip, observe=metrics.observe_request)
    node_source = nodes or KubeListWatch(AsyncClient(client), NODES)
    settings = replace(options.settings, instance=identity)
    running: list[Controller] = []

    async def work(context: LeaderContext | None) -> None:
        may_write = context.may_write if context else lambda: True
        controller = Controller(api, node_source, settings, metrics=metrics,
                                clock=SystemClock(), may_write=may_write)  # fmt: skip
        running.append(controller)
        try:
            await controller.run()
        finally:
            running.remove(controller)

    def checks(healthz: Checks, readyz: Checks) -> None:
        readyz.add(NAME, lambda: running[0].ready() if running else (True, "standby"))

    def leading(value: bool) -> None:
        metrics.leader.set(1 if value else 0)

    return Unit(NAME, client, permissions(options), metrics.registry, work, checks, leading)
