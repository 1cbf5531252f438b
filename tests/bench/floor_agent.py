"""The least a Python process spends as the node agent from its start to the taint removed: a
floor for `make bench-compare`'s agent start-up row (tests/bench/compare_agent.py), not an agent.

Started as ours is (``--kubeconfig``, ``--node-name``, in the bench's network namespace), it
makes the requests ours makes at start-up, in the same order: one watch of its Node that starts
with the Node's current state (``sendInitialEvents``, read up to the bookmark that ends the
initial events), the route lookup to 8.8.8.8 over netlink (the source address it names is the
ExternalIP, as ours' default flags decide), the status PATCH (addresses), the taint PATCH, and
the two Events. Each answer is read and parsed as JSON. Everything an agent is for is left out:
flags and their validation, rules, labels, retries, conflicts, the condition, metrics, health,
logs. Then it waits on the watch until SIGTERM ends it.

``--floor-mode``: ``sync`` (blocking sockets, no asyncio) or ``loop`` (the same blocking steps
run inside ``asyncio.run``: what importing and starting an event loop adds, the shape every
component of ours has). Standard library and PyYAML only (the kubeconfig is YAML).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

MODES = ("sync", "loop")
TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
TARGET = bytes((8, 8, 8, 8))  # ours' default --external-ip-target; a lookup, no packet sent
RTM_NEWROUTE, RTM_GETROUTE, RTA_DST, RTA_PREFSRC, NLM_F_REQUEST = 24, 26, 1, 7, 1


def _memfd(name: str, data: bytes) -> str:
    """A path to `data` that never touches a disk (what ssl's file-only loaders need)."""
    fd = os.memfd_create(name)
    os.write(fd, data)
    return f"/proc/self/fd/{fd}"


class Api:
    """One TLS connection for the requests, one for the watch (as ours has)."""

    def __init__(self, kubeconfig: str) -> None:
        with open(kubeconfig, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.url = urlsplit(cluster["server"])
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.load_verify_locations(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        head = f"Host: {self.url.netloc}\r\n"
        if "client-certificate-data" in user:
            cert = _memfd("cert", base64.b64decode(user["client-certificate-data"]))
            key = _memfd("key", base64.b64decode(user["client-key-data"]))
            self.context.load_cert_chain(cert, key)
        else:
            head += f"Authorization: Bearer {user['token']}\r\n"
        self.head = head.encode()
        self.requests: ssl.SSLSocket | None = None

    def connect(self) -> ssl.SSLSocket:
        host = self.url.hostname or "localhost"
        raw = socket.create_connection((host, self.url.port or 443))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # As ours: bytes, or ssl loads the idna codec (stringprep, unicodedata) for the name.
        return self.context.wrap_socket(raw, server_hostname=host.encode("ascii"))

    def call(self, method: str, path: str, body: Any, content_type: str) -> Any:
        if self.requests is None:
            self.requests = self.connect()
        data = json.dumps(body).encode()
        self.requests.sendall(
            f"{method} {path} HTTP/1.1\r\n".encode() + self.head
            + f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )  # fmt: skip
        head, rest = _head(self.requests)
        lines = head.split(b"\r\n")
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        if b"Content-Length" in fields:
            size = int(fields[b"Content-Length"])
            answer = json.loads(_fill(self.requests, rest, size)[:size])
        else:
            answer = json.loads(_chunked(self.requests, rest))
        if not lines[0].split()[1].startswith(b"2"):
            raise SystemExit(f"{method} {path}: {lines[0]!r} {answer}")
        return answer

    def watch_own_node(self, name: str) -> tuple[ssl.SSLSocket, dict[str, Any]]:
        """The watch's socket and the Node as its initial events gave it."""
        sock = self.connect()
        selector = quote(f"metadata.name={name}")
        query = ("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                 f"&allowWatchBookmarks=true&fieldSelector={selector}")  # fmt: skip
        sock.sendall(f"GET /api/v1/nodes?{query} HTTP/1.1\r\n".encode() + self.head + b"\r\n")
        head, buf = _head(sock)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"watch refused: {head[:200]!r}")
        node: dict[str, Any] | None = None
        for event in _events(sock, buf):
            obj = event["object"]
            if event["type"] == "ADDED":
                node = obj
            ends = (obj["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end")
            if event["type"] == "BOOKMARK" and ends == "true":
                break
        if node is None:
            raise SystemExit(f"node {name} not found")
        return sock, node


def _head(sock: ssl.SSLSocket) -> tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += _recv(sock)
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def _recv(sock: ssl.SSLSocket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise SystemExit("the API server closed a connection")
    return data


def _fill(sock: ssl.SSLSocket, buf: bytes, size: int) -> bytes:
    while len(buf) < size:
        buf += _recv(sock)
    return buf


def _chunked(sock: ssl.SSLSocket, buf: bytes) -> bytes:
    data = b""
    while True:
        while b"\r\n" not in buf:
            buf += _recv(sock)
        line, buf = buf.split(b"\r\n", 1)
        size = int(line, 16)
        buf = _fill(sock, buf, size + 2)
        data, buf = data + buf[:size], buf[size + 2 :]
        if size == 0:
            return data


def _events(sock: ssl.SSLSocket, buf: bytes) -> Any:
    """Watch events from the chunked stream, one JSON object per line."""
    partial = b""
    while True:
        while (end := buf.find(b"\r\n")) < 0 or len(buf) < end + 4 + int(buf[:end], 16):
            buf += _recv(sock)
        size = int(buf[:end], 16)
        partial += buf[end + 2 : end + 2 + size]
        buf = buf[end + size + 4 :]
        *lines, partial = partial.split(b"\n")
        for line in lines:
            yield json.loads(line)


def external_ip() -> str:
    """The source address of the route to 8.8.8.8: one RTM_GETROUTE over netlink."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
        rtmsg = struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 0, 0, 0, 0, 0)
        attr = struct.pack("=HH", 8, RTA_DST) + TARGET
        body = rtmsg + attr
        nl.send(struct.pack("=IHHII", 16 + len(body), RTM_GETROUTE, NLM_F_REQUEST, 1, 0) + body)
        data = nl.recv(65536)
    _, kind = struct.unpack_from("=IH", data)
    if kind != RTM_NEWROUTE:
        raise SystemExit(f"no route to 8.8.8.8 (netlink message type {kind})")
    at = 16 + 12
    while at + 4 <= len(data):
        size, attr_type = struct.unpack_from("=HH", data, at)
        if attr_type == RTA_PREFSRC:
            return socket.inet_ntop(socket.AF_INET, data[at + 4 : at + size])
        at += (size + 3) & ~3
    raise SystemExit("the route to 8.8.8.8 names no source address")


def event(node: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    meta = node["metadata"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                           "uid": meta["uid"]},
        "reason": reason, "message": message, "type": "Normal", "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": "floor-agent"},
    }  # fmt: skip


def initialise(api: Api, name: str) -> ssl.SSLSocket:
    """ours' start-up requests, in its order; the watch's socket to wait on afterwards."""
    sock, node = api.watch_own_node(name)
    address = external_ip()
    rv = {"op": "test", "path": "/metadata/resourceVersion",
          "value": node["metadata"]["resourceVersion"]}  # fmt: skip
    addresses = [{"type": "ExternalIP", "address": address}, {"type": "Hostname", "address": name}]
    patch = "application/json-patch+json"
    write = [rv, {"op": "add", "path": "/status/addresses", "value": addresses}]
    node = api.call("PATCH", f"/api/v1/nodes/{name}/status", write, patch)
    taints = [t for t in node["spec"].get("taints") or () if t["key"] != TAINT]
    rv["value"] = node["metadata"]["resourceVersion"]
    api.call("PATCH", f"/api/v1/nodes/{name}",
             [rv, {"op": "add", "path": "/spec/taints", "value": taints}], patch)  # fmt: skip
    for reason, message in (("AddressesUpdated", f"addresses: {address}"),
                            ("NodeInitialized", "the uninitialized taint removed")):  # fmt: skip
        api.call("POST", "/api/v1/namespaces/default/events", event(node, reason, message),
                 "application/json")  # fmt: skip
    return sock


def wait_forever(sock: ssl.SSLSocket) -> None:
    while True:
        _recv(sock)


async def run_loop(api: Api, name: str) -> None:
    wait_forever(initialise(api, name))


def main(argv: Sequence[str]) -> int:
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    mode = flags.get("floor-mode", "sync")
    if mode not in MODES:
        print(f"--floor-mode={mode}: one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    api = Api(flags["kubeconfig"])
    if mode == "sync":
        wait_forever(initialise(api, flags["node-name"]))
    else:
        import asyncio  # noqa: PLC0415 (the sync mode's start-up does without it)

        asyncio.run(run_loop(api, flags["node-name"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
