"""What the controllers that exist only in local-ccm-controller-manager (kubelet-serving-approver,
service-lb-ipam) share: the process's settings as the manager's shared flags give them (the
lifecycle controller's table: credentials, Lease, servers, logging) plus flags of their own,
their API client and Node source; their unit is `runtime.host.kit_unit`'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from local_ccm import __version__
from local_ccm.cli import central
from local_ccm.cli import lifecycle as base
from local_ccm.cli.central import Place
from local_ccm.flags import Flag, Parsed, Problem, unite
from local_ccm.kube.aio import AsyncClient, KubeListWatch
from local_ccm.kube.client import Client
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.nodes import Access
from local_ccm.kube.resources import NODES
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.lifecycle.options import options_from
from local_ccm.records import dataclass
from local_ccm.runtime.host import Shared, Unit

T = TypeVar("T")


@dataclass(frozen=True)
class Managed(Generic[T]):
    """The process's settings (`shared`, as the manager's shared flags give them) and the
    controller's own options (`own`)."""

    shared: Shared
    own: T


def spec(
    name: str,
    own_flags: Sequence[Flag],
    load_own: Callable[[Parsed], T | list[Problem]],
    *,
    fields: Callable[[Managed[T]], Mapping[str, object]],
    build: Callable[[Managed[T], Shared, Place], Unit],
    permissions: Callable[[Managed[T]], list[Access]],
) -> central.ControllerSpec[Managed[T]]:
    """The controller's row in the manager's table (off unless named in --controllers)."""

    def load(parsed: Parsed, env: central.Env) -> Managed[T] | list[Problem]:
        """Both option sets read; every problem of either listed."""
        shared = options_from(parsed)
        own = load_own(parsed)
        problems = [*(shared if isinstance(shared, list) else ()),
                    *(own if isinstance(own, list) else ())]  # fmt: skip
        if problems or isinstance(shared, list) or isinstance(own, list):
            return problems
        return Managed(base.shared_of(shared), own)

    return central.ControllerSpec(
        name, central.MANAGER,
        lambda: unite(central.MANAGER, [LIFECYCLE_FLAGS.flags, own_flags], version=__version__),
        load, shared_of, fields, build, permissions, default_on=False,
    )  # fmt: skip


def shared_of(options: Managed[T]) -> Shared:
    return options.shared


def nodes_of(shared: ListWatch | None, client: Client) -> ListWatch:
    """The manager's shared Node watch, else one of its own."""
    return shared or KubeListWatch(AsyncClient(client), NODES)
