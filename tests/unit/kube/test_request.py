"""Request building and response parsing (local_ccm.kube.request)."""

from __future__ import annotations

import json

import pytest

from local_ccm.kube import request as rq
from local_ccm.kube.errors import Conflict, Gone, Invalid, NotFound
from local_ccm.kube.request import Response, WatchEvent
from tests.support.resources import CLUSTER_CIDRS, LEASES, NODES, PODS, SERVICE_ACCOUNTS


def test_core_and_group_paths() -> None:
    assert NODES.path() == "/api/v1/nodes"
    assert NODES.path(name="n1", subresource="status") == "/api/v1/nodes/n1/status"
    assert LEASES.path("kube-system", "l") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
    )
    assert CLUSTER_CIDRS.path(name="c") == "/apis/networking.x-k8s.io/v1/clustercidrs/c"
    assert PODS.path() == "/api/v1/pods"  # all namespaces
    assert LEASES.api_version == "coordination.k8s.io/v1"
    assert NODES.api_version == "v1"


@pytest.mark.parametrize("name", ["a/b", "..", "", "x%2F", "a?b"])
def test_path_rejects_unsafe_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        NODES.path(name=name)


def test_path_rejects_namespace_for_cluster_scoped() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.path("default", "n1")


def test_quote_encodes_selector_characters() -> None:
    assert rq.quote("metadata.name=n1,a!=b") == "metadata.name%3Dn1%2Ca%21%3Db"
    assert rq.encode_query([("a", None)]) == ""


def test_list_query_has_selectors_limit_and_continue() -> None:
    req = rq.list_request(
        NODES,
        label_selector="a=b",
        field_selector="metadata.name=n1",
        limit=500,
        continue_token="tok=",
        resource_version="0",
    )
    assert req.method == "GET"
    assert req.path == (
        "/api/v1/nodes?labelSelector=a%3Db&fieldSelector=metadata.name%3Dn1"
        "&limit=500&continue=tok%3D&resourceVersion=0"
    )


def test_watch_query_asks_for_bookmarks() -> None:
    req = rq.watch_request(
        NODES, field_selector="metadata.name=n1", resource_version="42", timeout_seconds=300
    )
    assert req.path == (
        "/api/v1/nodes?watch=1&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dn1"
        "&resourceVersion=42&timeoutSeconds=300"
    )


def test_a_watch_with_initial_events_is_one_request_for_the_current_state() -> None:
    req = rq.watch_request(NODES, field_selector="metadata.name=n1", initial_events=True)
    assert req.path == (
        "/api/v1/nodes?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&fieldSelector=metadata.name%3Dn1"
    )
    end = {"metadata": {"resourceVersion": "9", "annotations": {rq.INITIAL_EVENTS_END: "true"}}}
    assert rq.ends_initial_events(rq.WatchEvent("BOOKMARK", end))
    assert not rq.ends_initial_events(rq.WatchEvent("BOOKMARK", {"metadata": {}}))
    assert not rq.ends_initial_events(rq.WatchEvent("ADDED", end))


def test_create_carries_field_manager_and_dry_run() -> None:
    body = {"metadata": {"name": "sa", "namespace": "ns"}}
    req = rq.create_request(SERVICE_ACCOUNTS, body, field_manager="fm", dry_run=True)
    assert req.method == "POST"
    assert req.path == "/api/v1/namespaces/ns/serviceaccounts?fieldManager=fm&dryRun=All"
    assert req.content_type == "application/json"
    assert req.body is not None
    assert json.loads(req.body) == body


def test_create_subresource_token_request() -> None:
    req = rq.create_request(
        SERVICE_ACCOUNTS, {}, field_manager="fm", namespace="ns", name="sa", subresource="token"
    )
    assert req.path == "/api/v1/namespaces/ns/serviceaccounts/sa/token?fieldManager=fm"


def test_namespaced_create_needs_a_namespace() -> None:
    with pytest.raises(ValueError, match="namespaced"):
        rq.create_request(LEASES, {"metadata": {"name": "x"}}, field_manager="fm")


def test_update_takes_name_from_body() -> None:
    body = {"metadata": {"name": "n1", "resourceVersion": "7"}}
    req = rq.update_request(NODES, body, field_manager="fm", subresource="status")
    assert (req.method, req.path) == ("PUT", "/api/v1/nodes/n1/status?fieldManager=fm")


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        ("json", "application/json-patch+json"),
        ("merge", "application/merge-patch+json"),
        ("strategic", "application/strategic-merge-patch+json"),
        ("apply", "application/apply-patch+yaml"),
    ],
)
def test_patch_content_types(patch_type: rq.PatchType, content_type: str) -> None:
    req = rq.patch_request(NODES, "n1", {}, field_manager="fm", patch_type=patch_type)
    assert req.method == "PATCH"
    assert req.content_type == content_type
    assert req.path == "/api/v1/nodes/n1?fieldManager=fm"


def test_apply_patch_force() -> None:
    req = rq.patch_request(NODES, "n1", {}, field_manager="fm", patch_type="apply", force=True)
    assert req.path == "/api/v1/nodes/n1?fieldManager=fm&force=true"
    with pytest.raises(ValueError, match="force"):
        rq.patch_request(NODES, "n1", [], field_manager="fm", force=True)


def test_patch_status_dry_run() -> None:
    req = rq.patch_request(NODES, "n1", [], field_manager="fm", subresource="status", dry_run=True)
    assert req.path == "/api/v1/nodes/n1/status?fieldManager=fm&dryRun=All"


def test_delete_with_preconditions_sends_delete_options() -> None:
    req = rq.delete_request(
        NODES, "n1", uid="u-1", resource_version="9", propagation_policy="Background"
    )
    assert req.method == "DELETE"
    assert req.path == "/api/v1/nodes/n1"
    assert req.body is not None
    assert json.loads(req.body) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u-1", "resourceVersion": "9"},
        "propagationPolicy": "Background",
    }


def test_plain_delete_has_no_body() -> None:
    req = rq.delete_request(PODS, "p", namespace="ns", dry_run=True)
    assert req.body is None
    assert req.path == "/api/v1/namespaces/ns/pods/p?dryRun=All"


def test_dry_run_delete_with_preconditions_carries_dry_run_in_the_body() -> None:
    req = rq.delete_request(NODES, "n1", uid="u1", dry_run=True)
    assert req.body is not None
    assert json.loads(req.body)["dryRun"] == ["All"]
    assert json.loads(req.body)["preconditions"] == {"uid": "u1"}


def test_raw_request_encodes_json_and_query() -> None:
    req = rq.raw_request("post", "/apis/x", query={"a": "b c"}, body={"k": 1})
    assert (req.method, req.path, req.content_type) == (
        "POST",
        "/apis/x?a=b%20c",
        "application/json",
    )
    assert req.body == b'{"k":1}'


def test_parse_response_decodes_json_and_text() -> None:
    assert rq.parse_response(Response(200, b'{"a":1}', {"content-type": "application/json"})) == {
        "a": 1
    }
    assert rq.parse_response(Response(200, b"ok", {"content-type": "text/plain"})) == "ok"
    assert rq.parse_response(Response(201, b"", {})) == {}


def test_parse_response_raises_translated_error() -> None:
    body = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"})
    with pytest.raises(NotFound) as info:
        rq.parse_response(Response(404, body.encode(), {}))
    assert info.value.message == "gone"


def test_parse_response_maps_unapplied_json_patch_to_conflict() -> None:
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": "the server rejected our request due to an error in our request",
        "details": {},
    }
    answer = Response(422, json.dumps(body).encode(), {})
    patch = rq.patch_request(NODES, "n1", [], field_manager="fm")
    merge = rq.patch_request(NODES, "n1", {}, field_manager="fm", patch_type="merge")
    with pytest.raises(Conflict):
        rq.parse_response(answer, patch)
    with pytest.raises(Invalid):
        rq.parse_response(answer, merge)


def test_parse_watch_line() -> None:
    line = b'{"type":"ADDED","object":{"metadata":{"name":"n1"}}}\n'
    assert rq.parse_watch_line(line) == WatchEvent("ADDED", {"metadata": {"name": "n1"}})
    assert rq.parse_watch_line(b"\n") is None


def test_parse_watch_line_rejects_garbage() -> None:
    with pytest.raises(Exception, match="undecodable"):
        rq.parse_watch_line(b"{nope")


def test_watch_error_410_is_gone() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    assert isinstance(rq.watch_error(WatchEvent("ERROR", status)), Gone)
    # Some servers put the reason without a code.
    assert isinstance(rq.watch_error(WatchEvent("ERROR", {"reason": "Expired"})), Gone)


def test_watch_error_other_codes() -> None:
    assert isinstance(rq.watch_error(WatchEvent("ERROR", {"code": 409})), Conflict)
    assert isinstance(rq.watch_error(WatchEvent("ERROR", {"code": 422})), Invalid)


def test_access_review_leaves_out_empty_attributes_and_reads_the_verdict() -> None:
    body = rq.access_review("patch", "nodes", subresource="status", namespace="")
    assert body == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {"verb": "patch", "resource": "nodes", "subresource": "status"}
        },
    }
    assert rq.review_allowed({"status": {"allowed": True}}) is True
    assert rq.review_allowed({"status": {}}) is False
    assert rq.review_allowed({}) is False
