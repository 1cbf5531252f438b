"""service-lb-ipam's API: list+watch of Services, pools, Namespaces and the kube-vip ConfigMap;
Service finalizer and status writes (JSON Patch guarded by resourceVersion), pool status
writes, Events. Errors arrive as `local_ccm.kube.errors`."""

from __future__ import annotations

from typing import Any, Final, Protocol

from local_ccm.kube.aio import KubeListWatch, Observe, ObservedApi, unobserved
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.loopclient import AsyncVerbs
from local_ccm.kube.resources import EVENTS, Resource
from local_ccm.lbipam.core.pools import GROUP, KIND

Obj = dict[str, Any]
SERVICES: Final = Resource("", "v1", "services", "Service", True)
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", False)
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap", True)
POOLS: Final = Resource(GROUP, "v1alpha1", "loadbalancerippools", KIND, False)


class LbApi(Protocol):
    def list_watch(self, what: str) -> ListWatch: ...
    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj: ...
    async def patch_service_status(self, namespace: str, name: str, patch: list[Obj]) -> Obj: ...
    async def write_pool_status(self, name: str, status: Obj) -> Obj: ...
    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


class KubeLbApi(ObservedApi):
    """`LbApi` on the project's REST client (`ObservedApi`: request counting, write timeout).
    `kubevip` is the ConfigMap's (namespace, name), None: not read."""

    def __init__(
        self,
        client: AsyncVerbs,
        kubevip: tuple[str, str] | None,
        observe: Observe = unobserved,
        *,
        write_timeout: float | None = None,
    ) -> None:
        super().__init__(client, observe, write_timeout=write_timeout)
        self.kubevip = kubevip

    def list_watch(self, what: str) -> ListWatch:
        """`services`, `pools`, `namespaces` or `kubevip` (the one ConfigMap, by name)."""
        if what == "kubevip":
            namespace, name = self.kubevip or ("", "")
            return KubeListWatch(self.client, CONFIGMAPS, namespace=namespace,
                                 field_selector=f"metadata.name={name}")  # fmt: skip
        resource = {"services": SERVICES, "pools": POOLS, "namespaces": NAMESPACES}[what]
        return KubeListWatch(self.client, resource)

    async def patch_service(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        request = self.client.patch(SERVICES, name, patch, namespace=namespace,
                                    timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", "services", request)

    async def patch_service_status(self, namespace: str, name: str, patch: list[Obj]) -> Obj:
        request = self.client.patch(SERVICES, name, patch, namespace=namespace,
                                    subresource="status", timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", "services/status", request)

    async def write_pool_status(self, name: str, status: Obj) -> Obj:
        request = self.client.patch(POOLS, name, {"status": status}, patch_type="merge",
                                    subresource="status", timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", "loadbalancerippools/status", request)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        event = self.client.create(EVENTS, body, namespace=namespace, timeout=self.write_timeout)
        return await self._call("POST", EVENTS.plural, event)
