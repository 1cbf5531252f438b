"""The L2 announcement's API: list+watch of the pools, Services, EndpointSlices, Nodes,
Namespaces and the address Leases; the Lease writes (create, update at a resourceVersion,
delete at a uid and resourceVersion), the announcer annotation on Services, Events. Errors
arrive as `local_ccm.kube.errors`."""

from __future__ import annotations

from typing import Any, Final, Protocol

from local_ccm.kube.aio import KubeListWatch, Observe, ObservedApi, unobserved
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.loopclient import AsyncVerbs
from local_ccm.kube.resources import EVENTS, LEASES, NODES, Resource
from local_ccm.lbpools import GROUP, KIND

Obj = dict[str, Any]
SERVICES: Final = Resource("", "v1", "services", "Service", True)
ENDPOINT_SLICES: Final = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice",
                                  True)  # fmt: skip
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", False)
POOLS: Final = Resource(GROUP, "v1alpha1", "loadbalancerippools", KIND, False)
WATCHED: Final = {
    "pools": POOLS,
    "services": SERVICES,
    "endpointslices": ENDPOINT_SLICES,
    "nodes": NODES,
    "namespaces": NAMESPACES,
}


class AnnounceApi(Protocol):
    def list_watch(self, what: str) -> ListWatch: ...
    async def get_lease(self, name: str) -> Obj: ...
    async def create_lease(self, body: Obj) -> Obj: ...
    async def update_lease(self, body: Obj) -> Obj: ...
    async def delete_lease(self, name: str, *, uid: str | None, resource_version: str) -> None: ...
    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj: ...
    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


class KubeAnnounceApi(ObservedApi):
    """`AnnounceApi` on the project's REST client; the Leases live in `lease_namespace`, each
    write bounded by `write_timeout`."""

    def __init__(
        self,
        client: AsyncVerbs,
        lease_namespace: str,
        observe: Observe = unobserved,
        *,
        write_timeout: float | None = None,
    ) -> None:
        super().__init__(client, observe, write_timeout=write_timeout)
        self.lease_namespace = lease_namespace

    def list_watch(self, what: str) -> ListWatch:
        """`pools`, `services`, `endpointslices`, `nodes`, `namespaces`, or `leases` (every
        Lease of the lease namespace: a watch cannot select names by prefix)."""
        if what == "leases":
            return KubeListWatch(self.client, LEASES, namespace=self.lease_namespace)
        return KubeListWatch(self.client, WATCHED[what])

    async def get_lease(self, name: str) -> Obj:
        request = self.client.get(LEASES, name, namespace=self.lease_namespace,
                                  timeout=self.write_timeout)  # fmt: skip
        return await self._call("GET", LEASES.plural, request)

    async def create_lease(self, body: Obj) -> Obj:
        request = self.client.create(LEASES, body, namespace=self.lease_namespace,
                                     timeout=self.write_timeout)  # fmt: skip
        return await self._call("POST", LEASES.plural, request)

    async def update_lease(self, body: Obj) -> Obj:
        request = self.client.update(LEASES, body, namespace=self.lease_namespace,
                                     timeout=self.write_timeout)  # fmt: skip
        return await self._call("PUT", LEASES.plural, request)

    async def delete_lease(self, name: str, *, uid: str | None, resource_version: str) -> None:
        """DELETE with the uid and resourceVersion preconditions: a write since → Conflict."""
        request = self.client.delete(LEASES, name, namespace=self.lease_namespace, uid=uid,
                                     resource_version=resource_version,
                                     timeout=self.write_timeout)  # fmt: skip
        await self._call("DELETE", LEASES.plural, request)

    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        request = self.client.patch(SERVICES, name, patch, namespace=namespace,
                                    timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", SERVICES.plural, request)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        event = self.client.create(EVENTS, body, namespace=namespace, timeout=self.write_timeout)
        return await self._call("POST", EVENTS.plural, event)
