"""What the controllers that exist only in local-ccm-controller-manager (kubelet-serving-approver,
service-lb-ipam) share: the manager's options as the lifecycle controller reads them
(credentials, Lease, servers) plus flags of their own, their API client and Node source; their
unit is `cli.kit.kit_unit`'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from local_ccm import __version__
from local_ccm.cli import central
from local_ccm.cli import lifecycle as base
from local_ccm.cli.common import Unit
from local_ccm.flags import Flag, Parsed, Problem, unite
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.resources import NODES
from local_ccm.lease.options import Election
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.lifecycle.options import LifecycleOptions, options_from
from local_ccm.records import dataclass
from local_ccm.runtime.metrics import ControllerMetrics

T = TypeVar("T")


@dataclass(frozen=True)
class Managed(Generic[T]):
    """The shared options and the controller's own (`own`)."""

    shared: LifecycleOptions
    own: T

    def __getattr__(self, name: str) -> Any:
        """The settings the process reads from its first controller's options (credentials,
        logging) are the lifecycle controller's."""
        return getattr(self.shared, name)


def entry(
    name: str,
    own_flags: Sequence[Flag],
    load_own: Callable[[Parsed], T | list[Problem]],
    fields: Callable[[Managed[T]], dict[str, object]],
    build: Callable[..., Unit],
) -> central.Controller:
    """The controller's row in the manager's table (off unless named in --controllers)."""

    def load(parsed: Parsed, env: central.Env) -> Managed[T] | list[Problem]:
        """Both option sets read; every problem of either listed."""
        shared = options_from(parsed)
        own = load_own(parsed)
        problems = [*(shared if isinstance(shared, list) else ()),
                    *(own if isinstance(own, list) else ())]  # fmt: skip
        if problems or isinstance(shared, list) or isinstance(own, list):
            return problems
        return Managed(shared, own)

    return central.Controller(
        name, central.MANAGER,
        lambda: unite(central.MANAGER, [LIFECYCLE_FLAGS.flags, own_flags], version=__version__),
        load, fields, lease_of, lambda o: base.serving_of(o.shared), build, default_on=False,
    )  # fmt: skip


def lease_of(options: Managed[Any]) -> Election | None:
    """The manager's Lease (the lifecycle controller's options), None without election."""
    return base.lease_of(options.shared)


def client_of(cluster: ClusterConfig, name: str, metrics: ControllerMetrics) -> Client:
    """The controller's own API client: its field manager and user agent, its REST series."""
    return Client(cluster, field_manager=name, user_agent=f"{name}/{__version__}",
                  on_response=metrics.observe_response)  # fmt: skip


def nodes_of(shared: ListWatch | None, client: Client) -> ListWatch:
    """The manager's shared Node watch, else one of its own."""
    return shared or KubeListWatch(AsyncClient(client), NODES)
