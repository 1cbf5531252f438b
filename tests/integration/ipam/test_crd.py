"""The ClusterCIDR CRD against a real apiserver (I07, I08, I29's columns).

No controller runs here: these tests are about what the apiserver accepts and stores.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError, Invalid
from tests.integration.ipam.objects import FINALIZER, cluster_cidr
from tests.support import resources as r
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane

pytestmark = pytest.mark.usefixtures("crds")
CC = r.CLUSTER_CIDRS
MakePool = Callable[..., Obj]

UPSTREAM_MESSAGES = (
    "IPv4 cannot be changed.",
    "IPv6 cannot be changed.",
    "PerNodeHostBits cannot be changed.",
    "NodeSelector cannot be changed.",
)
IMMUTABLE = "ClusterCIDR spec is immutable; create a new ClusterCIDR instead."


@pytest.fixture
def make_pool(
    kube: Client, track: Tracker, unique_name: str, test_labels: dict[str, str]
) -> MakePool:
    """`make_pool(suffix, **cluster_cidr kwargs)` creates a tracked ClusterCIDR."""

    def make(suffix: str, **kw: Any) -> Obj:
        name = f"{unique_name[:50]}-{suffix}"
        created = kube.create(CC, cluster_cidr(name, test_labels, **kw))
        track(CC, name)
        return created

    return make


def rejected(kube: Client, body: Obj) -> str:
    """Create `body`, expecting a 422; the error message."""
    with pytest.raises(Invalid) as info:
        kube.create(CC, body)
    return info.value.message


def _spec(**spec: Any) -> Obj:
    return {
        "apiVersion": "networking.x-k8s.io/v1",
        "kind": "ClusterCIDR",
        "metadata": {"generateName": "t-crd-invalid-"},
        "spec": spec,
    }


SEL = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}]
}


# ---------------------------------------------------------------- identity


def test_crd_identity_short_name_status_subresource_and_columns(kube: Client) -> None:
    listing = kube.request("GET", "/apis/networking.x-k8s.io/v1")
    by_name = {res["name"]: res for res in listing["resources"]}
    main = by_name["clustercidrs"]
    assert (main["kind"], main["namespaced"], main["singularName"]) == (
        "ClusterCIDR",
        False,
        "clustercidr",
    )
    assert main["shortNames"] == ["cc"]
    assert "clustercidrs/status" in by_name
    crd = kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, "clustercidrs.networking.x-k8s.io")
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    columns = [(c["name"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("PerNodeHostBits", 0),
        ("IPv4", 0),
        ("IPv6", 0),
        ("Nodes", 0),
        ("Ready", 0),
        ("Free-IPv4", 1),
        ("Free-IPv6", 1),
        ("Age", 0),
    ]


def _table(control_plane: ControlPlane, path: str) -> Any:
    """GET as a server-side Table: what `kubectl get` prints."""
    http = control_plane.http
    ctx = ssl.create_default_context(cafile=str(http.ca_file))
    ctx.load_cert_chain(str(http.cert_file), str(http.key_file))
    conn = http_client(http.port, ctx)
    try:
        accept = "application/json;as=Table;g=meta.k8s.io;v=v1"
        conn.request("GET", path, headers={"Accept": accept})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body[:500]
        return json.loads(body)
    finally:
        conn.close()


def http_client(port: int, ctx: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)


def test_crd_printer_columns_show_spec_and_status(
    kube: Client, control_plane: ControlPlane, make_pool: MakePool
) -> None:
    """I29 (columns): `kubectl get cc` and `-o wide` read these from the server's Table."""
    pool = make_pool("cols", bits=8, ipv4="10.81.0.0/22", ipv6="fd00:81::/118", sel={"s": "1"})
    name = pool["metadata"]["name"]
    status = {
        "nodes": 3,
        "ipv4": {"free": 1},
        "ipv6": {"free": 1},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "used for new allocations",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    kube.patch(CC, name, {"status": status}, patch_type="merge", subresource="status")
    table = _table(control_plane, f"/apis/networking.x-k8s.io/v1/clustercidrs/{name}")
    heads = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
    default = [n.upper() for n, p in heads if p == 0]
    wide = [n.upper() for n, p in heads]
    assert default == ["NAME", "PERNODEHOSTBITS", "IPV4", "IPV6", "NODES", "READY", "AGE"]
    assert wide[-3:-1] == ["FREE-IPV4", "FREE-IPV6"]
    (row,) = table["rows"]
    assert row["cells"][:8] == [name, 8, "10.81.0.0/22", "fd00:81::/118", 3, "True", 1, 1]


def test_crd_status_subresource_separates_spec_and_status(
    kube: Client, make_pool: MakePool
) -> None:
    pool = make_pool("status", bits=8, ipv4="10.90.0.0/24", sel={"a": "1"})
    name = pool["metadata"]["name"]
    assert pool["metadata"]["generation"] == 1
    body = {**pool, "status": {"nodes": 7}}
    updated = kube.update(CC, body)
    assert "status" not in updated  # the main resource ignores status
    patched = kube.patch(
        CC, name, {"status": {"nodes": 2, "observedGeneration": 1}}, patch_type="merge",
        subresource="status",
    )  # fmt: skip
    assert patched["status"] == {"nodes": 2, "observedGeneration": 1}
    finalized = kube.patch(
        CC, name, [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}],
        patch_type="json",
    )  # fmt: skip
    # Neither a status write nor a metadata-only write counts as a spec change.
    assert finalized["metadata"]["generation"] == 1
    assert finalized["status"]["nodes"] == 2


# ---------------------------------------------------------------- I07 immutability


def test_i07_immutability(kube: Client, make_pool: MakePool) -> None:
    pool = make_pool(
        "dual", bits=8, ipv4="10.91.0.0/23", ipv6="fd00:91::/119", sel={"ipv4": "true"}
    )
    name = pool["metadata"]["name"]
    pool = kube.patch(
        CC, name, [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}],
        patch_type="json",
    )  # fmt: skip
    changed = json.loads(json.dumps(pool))
    changed["spec"].update(
        perNodeHostBits=9,
        ipv4="10.92.0.0/23",
        ipv6="fd00:92::/119",
        nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "other", "operator": "Exists"}]}]},
    )  # fmt: skip
    with pytest.raises(Invalid) as info:
        kube.update(CC, changed)
    for message in UPSTREAM_MESSAGES:
        assert message in info.value.message, info.value.message

    v4only = make_pool("v4", bits=8, ipv4="10.93.0.0/23", sel={"ipv4": "true"})
    v4name = v4only["metadata"]["name"]
    add_v6 = [{"op": "add", "path": "/spec/ipv6", "value": "fd00:93::/119"}]
    with pytest.raises(Invalid) as info:
        kube.patch(CC, v4name, add_v6, patch_type="json")
    assert IMMUTABLE in info.value.message
    drop_selector = [{"op": "remove", "path": "/spec/nodeSelector"}]
    with pytest.raises(Invalid) as info:
        kube.patch(CC, v4name, drop_selector, patch_type="json")
    assert IMMUTABLE in info.value.message
    assert kube.get(CC, v4name)["spec"] == v4only["spec"]


# ---------------------------------------------------------------- I08 invalid objects


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"perNodeHostBits": 8}, "A CIDR must be specified for ipv4 or ipv6."),
        ({"perNodeHostBits": 8, "ipv4": "", "ipv6": ""},
         "A CIDR must be specified for ipv4 or ipv6."),
        ({"perNodeHostBits": 8, "ipv4": "256.256.256.256/33"}, "IPv4 must be a valid IPv4 CIDR."),
        ({"perNodeHostBits": 8, "ipv4": "fd00::/64"}, "IPv4 must be a valid IPv4 CIDR."),
        ({"perNodeHostBits": 8, "ipv6": "::/129"}, "IPv6 must be a valid IPv6 CIDR."),
        ({"perNodeHostBits": 8, "ipv6": "10.0.0.0/8"}, "IPv6 must be a valid IPv6 CIDR."),
        # [beyond] A4, A6, A8
        ({"perNodeHostBits": 10, "ipv4": "10.0.0.0/24"},
         "perNodeHostBits must not exceed the host bits of ipv4."),
        ({"perNodeHostBits": 8, "ipv6": "fd00::/126"},
         "perNodeHostBits must not exceed the host bits of ipv6."),
        ({"perNodeHostBits": 64, "ipv6": "fd00::/32"},
         "ipv6 may hold at most 65536 per-node blocks: (128 - perNodeHostBits) - prefix length "
         "must be at most 16."),
        ({"perNodeHostBits": 8, "ipv4": "10.0.0.0/16", "nodeSelector": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In"}]}]}},
         "values must be non-empty for In and NotIn, empty for Exists and DoesNotExist, and a "
         "single integer for Gt and Lt."),
        ({"perNodeHostBits": 8, "ipv4": "10.0.0.0/16", "nodeSelector": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}},
         "values must be non-empty for In and NotIn, empty for Exists and DoesNotExist, and a "
         "single integer for Gt and Lt."),
        ({"perNodeHostBits": 8, "ipv4": "10.0.0.0/16", "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "team", "operator": "In", "values": ["a"]}]}]}},
         "matchFields supports only key metadata.name with operator In or NotIn and exactly one "
         "value."),
        # A3, A7: standard schema errors
        ({"perNodeHostBits": -1, "ipv4": "10.0.0.0/16"}, "spec.perNodeHostBits"),
        ({"perNodeHostBits": 8, "ipv4": "10.0.0.0/16", "nodeSelector": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["1"]}]}]}},
         "Unsupported value: \"Equals\""),
    ],
)  # fmt: skip
def test_i08_invalid_objects(kube: Client, spec: dict[str, Any], message: str) -> None:
    assert message in rejected(kube, _spec(**spec))


def test_i08_spec_is_required(kube: Client) -> None:
    body = _spec()
    del body["spec"]
    assert "spec: Required value" in rejected(kube, body)


def test_crd_accepts_upstream_shapes(kube: Client, make_pool: MakePool) -> None:
    """Well-formed objects of upstream's examples are accepted unchanged."""
    pools = [
        make_pool("dual", bits=8, ipv4="10.94.0.0/16", ipv6="fd00:94::/112", sel={"a": "1"}),
        make_pool("v6", bits=8, ipv6="fd00:95::/112", node_selector={"nodeSelectorTerms": []}),
        make_pool("catch", bits=8, ipv4="10.96.0.0/16"),
        make_pool("fields", bits=4, ipv4="10.97.0.0/24", node_selector={"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}),
    ]  # fmt: skip
    assert [p["metadata"]["generation"] for p in pools] == [1, 1, 1, 1]
    assert "nodeSelector" not in pools[2]["spec"]


def test_crd_finalizer_blocks_deletion(kube: Client, make_pool: MakePool) -> None:
    pool = make_pool("fin", bits=8, ipv4="10.98.0.0/24", sel={"a": "1"})
    name = pool["metadata"]["name"]
    kube.patch(
        CC, name, [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}],
        patch_type="json",
    )  # fmt: skip
    kube.delete(CC, name)
    terminating = kube.get(CC, name)
    assert terminating["metadata"]["deletionTimestamp"]
    remove = [
        {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    kube.patch(CC, name, remove, patch_type="json")
    with pytest.raises(ApiError) as info:
        kube.get(CC, name)
    assert info.value.status == 404
