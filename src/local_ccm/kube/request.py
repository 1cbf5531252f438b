"""Request building and response parsing for the Kubernetes REST API. Pure, no I/O.

The transport only moves the bytes these functions produce (the lightkube split).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from local_ccm.kube.errors import ApiError, Gone, error_from_response
from local_ccm.kube.resources import Resource
from local_ccm.records import dataclass

Obj = dict[str, Any]
PatchType = Literal["json", "merge", "strategic", "apply"]

JSON = "application/json"
PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    # Server-side apply takes YAML; JSON is YAML, so the body stays json.dumps output.
    "apply": "application/apply-patch+yaml",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # absolute path with query string, relative to the server URL's own path
    body: bytes | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # keys lower-case

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: Obj


def quote(text: str) -> str:
    """Percent-encode everything but RFC 3986 unreserved characters."""
    return _RESERVED.sub(_percent, text)


_RESERVED = re.compile(r"[^A-Za-z0-9._~-]+")  # runs of anything but the unreserved characters


def _percent(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group().encode())


def pointer(*parts: str | int) -> str:
    """RFC 6901 JSON Pointer (for JSON Patch paths): ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def encode_query(params: Iterable[tuple[str, str | None]]) -> str:
    """``?a=1&b=x%3Dy`` from pairs, dropping None values; "" when nothing is left."""
    pairs = [f"{quote(k)}={quote(v)}" for k, v in params if v is not None]
    return "?" + "&".join(pairs) if pairs else ""


def _json_body(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _write_query(field_manager: str, dry_run: bool) -> list[tuple[str, str | None]]:
    return [("fieldManager", field_manager), ("dryRun", "All" if dry_run else None)]


def _number(value: int | None) -> str | None:
    return None if value is None else str(value)


def get_request(
    res: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None
) -> Request:
    return Request("GET", res.path(namespace, name, subresource))


def list_request(
    res: Resource,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = None,
    continue_token: str | None = None,
    resource_version: str | None = None,
    watch: bool = False,
    timeout_seconds: int | None = None,
    allow_bookmarks: bool = True,
    initial_events: bool = False,
) -> Request:
    """A LIST, or with `watch` a WATCH (with bookmarks unless `allow_bookmarks` is False);
    `initial_events`: a watch that starts with the current objects, then a bookmark marked
    `k8s.io/initial-events-end` (a LIST and a WATCH in one request, KEP-3157)."""
    streaming = watch and initial_events
    query = encode_query([
        ("watch", "1" if watch else None),
        ("sendInitialEvents", "true" if streaming else None),
        ("resourceVersionMatch", "NotOlderThan" if streaming else None),
        ("allowWatchBookmarks", "true" if watch and (allow_bookmarks or streaming) else None),
        ("labelSelector", label_selector), ("fieldSelector", field_selector),
        ("limit", _number(limit)), ("continue", continue_token),
        ("resourceVersion", resource_version), ("timeoutSeconds", _number(timeout_seconds)),
    ])  # fmt: skip
    return Request("GET", res.path(namespace) + query)


def watch_request(res: Resource, **kw: Any) -> Request:
    return list_request(res, watch=True, **kw)


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def ends_initial_events(event: WatchEvent) -> bool:
    """The bookmark after the initial events of an `initial_events` watch."""
    meta = event.object.get("metadata") or {}
    return (
        event.type == "BOOKMARK"
        and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true"
    )


def create_request(
    res: Resource,
    body: Obj,
    *,
    field_manager: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    dry_run: bool = False,
    method: Literal["POST", "PUT"] = "POST",
) -> Request:
    """POST `body` (PUT: see update_request)."""
    path = res.path(_namespace_of(res, body, namespace), name, subresource)
    query = encode_query(_write_query(field_manager, dry_run))
    return Request(method, path + query, _json_body(body), JSON)


def update_request(res: Resource, body: Obj, **kw: Any) -> Request:
    """PUT `body` to the object its metadata.name names."""
    name = body.get("metadata", {}).get("name")
    if not name:
        raise ValueError("update needs metadata.name in the body")
    return create_request(res, body, name=name, method="PUT", **kw)


def patch_request(
    res: Resource,
    name: str,
    body: Any,
    *,
    field_manager: str,
    patch_type: PatchType = "json",
    namespace: str | None = None,
    subresource: str | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> Request:
    if patch_type not in PATCH_CONTENT_TYPES:
        raise ValueError(f"unknown patch type {patch_type!r}")
    if force and patch_type != "apply":
        raise ValueError("force is only meaningful for server-side apply")
    params = [*_write_query(field_manager, dry_run), ("force", "true" if force else None)]
    path = res.path(namespace, name, subresource) + encode_query(params)
    return Request("PATCH", path, _json_body(body), PATCH_CONTENT_TYPES[patch_type])


def delete_options(
    *,
    uid: str | None = None,
    resource_version: str | None = None,
    propagation_policy: str | None = None,
    grace_period_seconds: int | None = None,
    dry_run: bool = False,
) -> Obj | None:
    """The DeleteOptions body, or None when every option is at its default."""
    options: Obj = {}
    preconditions = {
        k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None
    }
    if preconditions:
        options["preconditions"] = preconditions
    if propagation_policy is not None:
        options["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if not options:
        return None
    if dry_run:  # with a body, the apiserver ignores the query's dryRun (see delete_request)
        options["dryRun"] = ["All"]
    return {"apiVersion": "v1", "kind": "DeleteOptions", **options}


def delete_request(
    res: Resource, name: str, *, namespace: str | None = None, dry_run: bool = False, **kw: Any
) -> Request:
    """DELETE; `kw` are the options of `delete_options` (preconditions, propagation, grace)."""
    # DeleteOptions has no fieldManager: a delete manages no fields. When a DeleteOptions body
    # is sent, the apiserver takes every option from the body and ignores the query, so dryRun
    # must be in the body too: with it only in the query, a dry-run delete with preconditions
    # deleted the object for real.
    path = res.path(namespace, name) + encode_query([("dryRun", "All" if dry_run else None)])
    options = delete_options(dry_run=dry_run, **kw)
    if options is None:
        return Request("DELETE", path)
    return Request("DELETE", path, _json_body(options), JSON)


def access_review(
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = "",
    subresource: str = "",
    name: str = "",
) -> Obj:
    """The body of a SelfSubjectAccessReview asking whether this client's identity may do
    `verb` on `resource` (empty attributes are left out: empty group is the core group)."""
    attributes = {
        "verb": verb, "group": group, "resource": resource, "namespace": namespace,
        "subresource": subresource, "name": name,
    }  # fmt: skip
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v}},
    }


def review_allowed(review: Obj) -> bool:
    """The verdict of an answered SelfSubjectAccessReview."""
    return bool((review.get("status") or {}).get("allowed"))


def raw_request(
    method: str,
    path: str,
    *,
    query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> Request:
    """The escape hatch: any path; a non-bytes body is sent as JSON."""
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute: {path!r}")
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query or [])
    data = body if isinstance(body, bytes) or body is None else _json_body(body)
    ctype = content_type or (JSON if data is not None else None)
    return Request(method.upper(), path + encode_query(pairs), data, ctype)


def _namespace_of(res: Resource, body: Obj, namespace: str | None) -> str | None:
    if not res.namespaced:
        return None
    found = namespace or body.get("metadata", {}).get("namespace")
    if not found:
        raise ValueError(f"{res.kind} is namespaced: give namespace= or metadata.namespace")
    return str(found)


def parse_response(response: Response, request: Request | None = None) -> Any:
    """The decoded body of a 2xx answer; raises the translated ApiError otherwise.

    JSON bodies become dicts; other bodies (``/readyz`` → ``ok``) come back as text.
    The request, when given, tells a JSON Patch's 422 apart (see errors.py).
    """
    if not 200 <= response.status < 300:
        json_patch = request is not None and request.content_type == PATCH_CONTENT_TYPES["json"]
        raise error_from_response(
            response.status, response.body, response.header("retry-after"), json_patch=json_patch
        )
    if not response.body:
        return {}
    ctype = response.header("content-type") or JSON
    if "json" in ctype:
        return json.loads(response.body)
    return response.body.decode("utf-8", "replace")


def parse_watch_line(line: bytes) -> WatchEvent | None:
    """One line of a watch stream; None for a blank keep-alive line."""
    line = line.strip()
    if not line:
        return None
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ApiError(0, "BadWatchEvent", f"undecodable watch line: {line[:200]!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ApiError(0, "BadWatchEvent", f"unexpected watch line: {line[:200]!r}")
    obj = data.get("object")
    return WatchEvent(data["type"], obj if isinstance(obj, dict) else {})


def watch_error(event: WatchEvent) -> ApiError:
    """The exception an ERROR event stands for (410/Expired → Gone)."""
    status = event.object
    code = status.get("code")
    if status.get("reason") in {"Expired", "Gone"} and code in (None, 410):
        code = 410
    if not isinstance(code, int):
        code = 500
    error = error_from_response(code, status)
    if code == 410 and not isinstance(error, Gone):
        return Gone(410, error.reason, error.message, body=error.body)
    return error
