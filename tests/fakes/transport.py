"""In-memory stand-ins for the kube layer's seams (Transport, Stream, ListWatchApi)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from local_ccm.kube.errors import ApiError
from local_ccm.kube.request import Obj, Request, Response


def json_response(status: int, body: Any, **headers: str) -> Response:
    hdrs = {
        "content-type": "application/json",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    return Response(status, json.dumps(body).encode(), hdrs)


def text_response(body: str) -> Response:
    return Response(200, body.encode(), {"content-type": "text/plain"})


class FakeStream:
    def __init__(self, lines: list[bytes], error: ApiError | None = None) -> None:
        self._lines, self._error = lines, error
        self.closed = False

    def lines(self) -> Iterator[bytes]:
        for line in self._lines:
            if self.closed:
                return
            yield line
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeTransport:
    """Answers requests from a script; each entry is a Response or an ApiError to raise."""

    script: list[Response | ApiError] = field(default_factory=list)
    streams: list[FakeStream | ApiError] = field(default_factory=list)
    sent: list[Request] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)
    closed: bool = False

    def send(self, req: Request, timeout: float) -> Response:
        self.sent.append(req)
        self.timeouts.append(timeout)
        item = self.script.pop(0)
        if isinstance(item, ApiError):
            raise item
        return item

    def stream(self, req: Request, timeout: float) -> FakeStream:
        self.sent.append(req)
        self.timeouts.append(timeout)
        item = self.streams.pop(0)
        if isinstance(item, ApiError):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


def node(name: str, rv: str, uid: str | None = None, **labels: str) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": rv, "uid": uid or f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    return {"kind": "Node", "metadata": meta}


def page(items: list[Obj], rv: str, cont: str | None = None) -> Obj:
    meta: Obj = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "NodeList", "metadata": meta, "items": items}
