"""The API resources local-ccm talks to, and their REST paths. Pure, no I/O."""

from __future__ import annotations

import re

from local_ccm.records import dataclass

# A path segment name may not contain "/" or "%" and may not be "." or ".."
# (apimachinery's path segment name validation); we also refuse "?" and "#".
_BAD_SEGMENT = re.compile(r"[/%?#]")


def _check_segment(what: str, value: str) -> str:
    if not value or value in {".", ".."} or _BAD_SEGMENT.search(value):
        raise ValueError(f"invalid {what} for a Kubernetes path: {value!r}")
    return value


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """``/api/v1/namespaces/<ns>/pods/<name>/<sub>``; without a namespace a namespaced
        resource lists across all namespaces."""
        parts = [self.prefix]
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.kind} is cluster-scoped; namespace {namespace!r} given")
            parts.append(f"/namespaces/{_check_segment('namespace', namespace)}")
        parts.append(f"/{self.plural}")
        if name is not None:
            parts.append(f"/{_check_segment('name', name)}")
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs a name")
            parts.append(f"/{_check_segment('subresource', subresource)}")
        return "".join(parts)


_AUTHZ = "authorization.k8s.io"

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CLUSTER_CIDRS = Resource(
    "networking.x-k8s.io", "v1", "clustercidrs", "ClusterCIDR", namespaced=False
)
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    _AUTHZ, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)
SUBJECT_ACCESS_REVIEWS = Resource(
    _AUTHZ, "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
TOKEN_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
