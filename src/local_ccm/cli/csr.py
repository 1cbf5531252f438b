"""kubelet-serving-approver's entry in local-ccm-controller-manager (off by default): its one
flag (`--csr-deny`) next to the manager's shared ones, which it reads through the lifecycle
controller's options (credentials, Lease, servers), its unit and its permissions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from local_ccm import __version__
from local_ccm.cli import central
from local_ccm.cli import lifecycle as base
from local_ccm.cli.common import Serving, Unit
from local_ccm.clock import SystemClock
from local_ccm.csr.csrapi import CSRS, KubeCsrApi
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.csr.options import DENY_FLAG, FLAGS, NAME, Settings
from local_ccm.csr.run import Controller
from local_ccm.flags import FlagSet, Parsed, unite
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.nodes import Access
from local_ccm.kube.resources import NODES
from local_ccm.lease.elector import LeaderContext
from local_ccm.lease.options import Election
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.lifecycle.options import LifecycleOptions, options_from
from local_ccm.runtime.serve import Checks

SIGNER_NAME = "kubernetes.io/kubelet-serving"


@dataclass(frozen=True)
class CsrOptions:
    """The manager's shared options (as the lifecycle controller reads them) and `--csr-deny`."""

    shared: LifecycleOptions
    deny: bool

    def __getattr__(self, name: str) -> Any:
        """The shared settings the process reads from its first controller's options
        (credentials, logging) are the lifecycle controller's."""
        return getattr(self.shared, name)


def controller() -> central.Controller:
    """The approver's entry in the controller manager's table."""
    return central.Controller(
        NAME, central.MANAGER, flags, load, lambda o: {DENY_FLAG: str(o.deny).lower()},
        lease_of, serving_of, build_unit,
        default_on=False,
    )  # fmt: skip


def flags() -> FlagSet:
    return unite(central.MANAGER, [LIFECYCLE_FLAGS.flags, FLAGS], version=__version__)


def load(parsed: Parsed, env: central.Env) -> Any:
    shared = options_from(parsed)
    if isinstance(shared, list):
        return shared
    return CsrOptions(shared, parsed.get_bool(DENY_FLAG))


def lease_of(options: CsrOptions) -> Election | None:
    return base.lease_of(options.shared)


def serving_of(options: CsrOptions) -> Serving:
    return base.serving_of(options.shared)


def permissions(options: CsrOptions) -> list[Access]:
    """The RBAC the approver needs (what the chart ships when it is on), nothing more."""
    group = CSRS.group
    return [
        *(Access(verb, CSRS.plural, group) for verb in ("get", "list", "watch")),
        Access("update", CSRS.plural, group, subresource="approval"),
        Access("approve", "signers", group, name=SIGNER_NAME),
        Access("create", "events", namespace=options.shared.event_namespace),
    ]


def build_unit(
    options: CsrOptions, cluster: ClusterConfig, identity: str, nodes: ListWatch | None = None
) -> Unit:
    metrics = CsrMetrics()
    client = Client(cluster, field_manager=NAME, user_agent=f"{NAME}/{__version__}")
    api = KubeCsrApi(AsyncClient(client), observe=metrics.observe_request)
    node_source = nodes or KubeListWatch(AsyncClient(client), NODES)
    settings = Settings(deny=options.deny, event_namespace=options.shared.event_namespace,
                        instance=identity)  # fmt: skip
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
        readyz.add("kubelet-serving-approver", lambda: running[0].ready() if running
                   else (True, "standby"))  # fmt: skip

    def leading(value: bool) -> None:
        metrics.leader.set(1 if value else 0)

    return Unit(NAME, client, permissions(options), metrics.registry, work, checks, leading)
