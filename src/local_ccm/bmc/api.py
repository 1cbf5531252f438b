"""node-bmc's API: the NodeBMCs' list and watch, their status writes, the shutdown taint's
Node patches, one Secret read and Events. Errors arrive as `local_ccm.kube.errors`."""

from __future__ import annotations

from typing import Any, Final, Protocol

from local_ccm.bmc.core.model import GROUP, KIND, PLURAL, VERSION
from local_ccm.kube.aio import KubeListWatch, ObservedApi
from local_ccm.kube.informer import ListWatch
from local_ccm.kube.resources import EVENTS, NODES, Resource

Obj = dict[str, Any]
NODEBMCS: Final = Resource(GROUP, VERSION, PLURAL, KIND, False)
SECRETS: Final = Resource("", "v1", "secrets", "Secret", True)


class BmcApi(Protocol):
    def list_watch(self) -> ListWatch: ...
    async def write_status(self, name: str, status: Obj) -> Obj: ...
    async def write_power_off(self, name: str, record: Obj, resource_version: str) -> Obj: ...
    async def patch_node(self, name: str, patch: list[Obj]) -> Obj: ...
    async def get_secret(self, namespace: str, name: str) -> Obj: ...
    async def create_event(self, namespace: str, body: Obj) -> Obj: ...


class KubeBmcApi(ObservedApi):
    """`BmcApi` on the project's REST client (`ObservedApi`: request counting, write timeout)."""

    def list_watch(self) -> ListWatch:
        return KubeListWatch(self.client, NODEBMCS)

    async def write_status(self, name: str, status: Obj) -> Obj:
        """A merge patch of the whole status: the controller is its only writer."""
        request = self.client.patch(NODEBMCS, name, {"status": status}, patch_type="merge",
                                    subresource="status", timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", f"{PLURAL}/status", request)

    async def write_power_off(self, name: str, record: Obj, resource_version: str) -> Obj:
        """`status.powerOff`, only onto the NodeBMC version it was decided on (a merge patch
        with a resourceVersion is refused with 409 by any other): a power-off request is
        recorded once, before it is acted on (`core.poweroff`)."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": {"powerOff": record}}
        request = self.client.patch(NODEBMCS, name, body, patch_type="merge",
                                    subresource="status", timeout=self.write_timeout)  # fmt: skip
        return await self._call("PATCH", f"{PLURAL}/status", request)

    async def patch_node(self, name: str, patch: list[Obj]) -> Obj:
        request = self.client.patch(NODES, name, patch, timeout=self.write_timeout)
        return await self._call("PATCH", NODES.plural, request)

    async def get_secret(self, namespace: str, name: str) -> Obj:
        request = self.client.get(SECRETS, name, namespace=namespace)
        return await self._call("GET", SECRETS.plural, request)

    async def create_event(self, namespace: str, body: Obj) -> Obj:
        event = self.client.create(EVENTS, body, namespace=namespace, timeout=self.write_timeout)
        return await self._call("POST", EVENTS.plural, event)
