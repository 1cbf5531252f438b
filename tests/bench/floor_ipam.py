"""The least a Python process spends as a node IPAM controller: a floor for the IPAM CPU
benchmark (`tests/bench/test_ipam_cpu.py`, ``BENCH_IPAM_FLOOR``), not a controller.

Started as ours is (the same flags; ``/readyz`` answered on ``--health-probe-address``), it
watches every Node and gives each one without podCIDRs the next IPv4 /24 and IPv6 /120 of the
benchmark's pools by a JSON Patch guarded by ``test /metadata/uid``, within
``--kube-api-qps`` / ``--kube-api-burst``; it reads each answer and each watch event as JSON.
That is the API work a controller cannot avoid per Node. Everything a controller is for is
left out: the informer's cache, pools and the ledger, retries and conflicts, leader election,
Events, log lines, metrics. The benchmark's control plane holds only the run's Nodes.

``--floor-mode`` drives the same requests four ways:

- ``sync``: one thread; a selector waits on the watch socket; each PATCH blocks;
- ``loop``: an asyncio event loop reads the non-blocking watch socket (``add_reader``); each
  PATCH still blocks the loop;
- ``threads``: asyncio, the watch read by a thread and handed over with
  ``call_soon_threadsafe``, each PATCH run by ``asyncio.to_thread``;
- ``coalesce``: ``sync``, but while the next PATCH waits for its token nothing wakes the
  process: the last answer and the watch's events are read when the token is due, so at the
  QPS limit each Node costs one wake-up instead of about two and a half.

A fifth, ``decisions``, is ``loop`` plus what a controller must decide and say for each Node,
done by ours' own pure parts (`Decisions`): every watch event projected into a cache of views,
the watch's echo of a write told apart from news, the CIDRs from the real allocator and its
ledger, the patch as ours builds it, the answer projected and the allocation committed, the
allocation counter and tries histogram, and the ``assigned …`` line through ours' logging. Still
left out: the controller kit (informer, work queue and workers, the client on the event loop
with its retries and deadlines), leader election, the pools' status, Events. So it bounds what
any redesign of ours' per-Node path could reach while keeping those decisions. A sixth,
``coalesce-decisions``, makes the same decisions in the ``coalesce`` loop: the bound for a
design that also wakes only once per Node at the QPS limit.

Standard library and PyYAML only in the first four modes; ``asyncio`` is imported by the modes
that use it, ``local_ccm`` by the two that make decisions. Ends on SIGTERM; any unexpected
answer ends it with a message.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import selectors
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import yaml

POOLS = ("10.128.0.0/9", "fd00:128::/104")  # tests.support.ipam_bench.POOL_V4, POOL_V6
POOL_V4, POOL_V6 = (int(ipaddress.ip_network(p).network_address) for p in POOLS)
HOST_BITS = 8  # tests.support.ipam_bench.BITS (tests/unit/test_bench_floor.py checks both)
MODES = ("sync", "loop", "threads", "decisions", "coalesce", "coalesce-decisions")


class Api:
    """Two TLS connections to the API server: the watch's and the requests'."""

    def __init__(self, kubeconfig: str, decisions: Decisions | None = None) -> None:
        self.decisions = decisions
        with open(kubeconfig, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.url = urlsplit(cluster["server"])
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # the cluster's CA only
        if "certificate-authority-data" in cluster:
            pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
            self.context.load_verify_locations(cadata=pem)
        else:
            self.context.load_verify_locations(cluster["certificate-authority"])
        token = user.get("token")
        if token is None:
            with open(user["tokenFile"], encoding="utf-8") as f:
                token = f.read().strip()
        self.head = f"Host: {self.url.netloc}\r\nAuthorization: Bearer {token}\r\n".encode()
        self.requests = self.connect()

    def connect(self) -> ssl.SSLSocket:
        host = self.url.hostname or "localhost"
        raw = socket.create_connection((host, self.url.port or 443))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # As ours: bytes, or ssl loads the idna codec (stringprep, unicodedata) for the name.
        return self.context.wrap_socket(raw, server_hostname=host.encode("ascii"))

    def open_watch(self) -> tuple[ssl.SSLSocket, bytes]:
        """The watch's socket and the body bytes read with its headers."""
        sock = self.connect()
        sock.sendall(b"GET /api/v1/nodes?watch=1 HTTP/1.1\r\n" + self.head + b"\r\n")
        head, rest = _head(sock)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"watch refused: {head[:200]!r}")
        return sock, rest

    def patch(self, name: str, uid: str, index: int) -> None:
        self.send(name, uid, index)
        self.answer(name)

    def send(self, name: str, uid: str, index: int) -> None:
        if self.decisions is not None:
            body = self.decisions.body(name)
        else:
            v4 = f"{ipaddress.IPv4Address(POOL_V4 + (index << HOST_BITS))}/{32 - HOST_BITS}"
            v6 = f"{ipaddress.IPv6Address(POOL_V6 + (index << HOST_BITS))}/{128 - HOST_BITS}"
            body = json.dumps([
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "add", "path": "/spec/podCIDR", "value": v4},
                {"op": "add", "path": "/spec/podCIDRs", "value": [v4, v6]},
            ]).encode()  # fmt: skip
        self.requests.sendall(
            b"PATCH /api/v1/nodes/" + name.encode() + b" HTTP/1.1\r\n" + self.head
            + b"Content-Type: application/json-patch+json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip

    def answer(self, name: str) -> None:
        head, rest = _head(self.requests)
        lines = head.split(b"\r\n")
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        if b"Content-Length" in fields:
            size = int(fields[b"Content-Length"])
            data = _fill(self.requests, rest, size)[:size]
        else:
            data = _chunked(self.requests, rest)
        answer = json.loads(data)
        if lines[0].split()[1] != b"200":
            raise SystemExit(f"PATCH {name}: {lines[0]!r} {answer}")
        if self.decisions is not None:
            self.decisions.answered(answer)


def _head(sock: ssl.SSLSocket) -> tuple[bytes, bytes]:
    """An answer's status line and headers, and the body bytes read with them."""
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
    """`buf` and what follows it on `sock`, at least `size` bytes."""
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


class Watch:
    """Chunked watch bytes in, Nodes that need CIDRs out (each once)."""

    def __init__(self, buf: bytes, decisions: Decisions | None = None) -> None:
        self.decisions = decisions
        self.buf, self.partial = buf, b""
        self.queue: list[tuple[str, str]] = []  # (name, uid)
        self.queued: set[str] = set()

    def feed(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n")) >= 0:
            size = int(self.buf[:end], 16)
            if len(self.buf) < end + size + 4:
                return
            if size == 0:
                raise SystemExit("the watch ended")
            self.partial += self.buf[end + 2 : end + 2 + size]
            self.buf = self.buf[end + size + 4 :]
            *lines, self.partial = self.partial.split(b"\n")
            for line in lines:
                self._event(json.loads(line))

    def _event(self, event: dict[str, Any]) -> None:
        node = event["object"]
        name = node["metadata"]["name"]
        if self.decisions is not None:
            needs = self.decisions.needs(event["type"], node)
        else:
            needs = event["type"] != "DELETED" and not (node.get("spec") or {}).get("podCIDRs")
        if needs and name not in self.queued:
            self.queued.add(name)
            self.queue.append((name, node["metadata"]["uid"]))


class Decisions:
    """What ``--floor-mode=decisions`` adds per Node, with ours' pure parts (module docstring)."""

    def __init__(self) -> None:
        # Imported here: the other modes start without them.
        import logging  # noqa: PLC0415

        from local_ccm.ipam.core import allocator, model, status  # noqa: PLC0415
        from local_ccm.ipam.metrics import IpamMetrics  # noqa: PLC0415
        from local_ccm.logs import configure_logging, kv  # noqa: PLC0415

        self.configure_logging = configure_logging
        self.log, self.kv = logging.getLogger("floor"), kv
        self.project, self.node_patch = model.project_node, status.node_patch
        self.allocation = allocator.Allocation
        families = tuple(model.PoolFamily(n, n.max_prefixlen - HOST_BITS)
                         for n in map(ipaddress.ip_network, POOLS))  # fmt: skip
        self.pool = model.Pool("floor", families)
        self.allocator = allocator.Allocator()
        self.allocator.set_pool(self.pool, ready=True, uid="floor")
        self.metrics = IpamMetrics()
        self.views: dict[str, Any] = {}  # name -> the Node's view as last seen
        self.written: dict[str, Any] = {}  # uid -> the view our write's answer showed
        self.pending: Any = None  # the Allocation being written

    def log_as_ours(self) -> None:
        """INFO lines on stderr in ours' default format."""
        self.configure_logging(fmt="text", verbosity=0, component="floor", bound={})

    def needs(self, kind: str, node: dict[str, Any]) -> bool:
        """Cache the Node's view; whether it is news that needs CIDRs."""
        view = self.project(node)
        if kind == "DELETED":
            self.views.pop(view.name, None)
            return False
        old, self.views[view.name] = self.views.get(view.name), view
        if view == old or self.written.get(view.uid) == view:
            return False  # no change, or the echo of our own write
        return not view.has_cidrs

    def body(self, name: str) -> bytes:
        result = self.allocator.allocate(self.views[name])
        if not isinstance(result, self.allocation):
            raise SystemExit(f"no CIDRs for Node {name}: {result}")
        self.pending = result
        return json.dumps(self.node_patch(result.uid, result.cidrs)).encode()

    def answered(self, answer: dict[str, Any]) -> None:
        alloc, view = self.pending, self.project(answer)
        self.allocator.commit(alloc.uid)
        self.written[view.uid] = view
        for cidr in alloc.cidrs:
            family = self.pool.family(cidr.version)
            self.metrics.allocations.labels(str(family.network if family else ""), alloc.pool).inc()
        self.metrics.tries.observe(alloc.tries)
        fields = self.kv(node=alloc.node, uid=alloc.uid, clustercidr=alloc.pool)
        texts = ",".join(map(str, alloc.cidrs))
        self.log.info("assigned %s from %s to Node %s", texts, alloc.pool, alloc.node, extra=fields)


class Bucket:
    """`qps` tokens a second, at most `burst` kept."""

    def __init__(self, qps: float, burst: float, now: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self.tokens, self.now = qps, burst, burst, now
        self.stamp = now()

    def wait(self) -> float:
        """0 after taking a token, else the seconds until one is there."""
        now = self.now()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.qps


def serve_health(address: str) -> None:
    """200 to every request, from a thread that blocks in accept()."""
    host, port = address.rsplit(":", 1)
    server = socket.create_server((host, int(port)))

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()


def run_sync(api: Api, sock: ssl.SSLSocket, watch: Watch, bucket: Bucket) -> None:
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    index = 0
    while True:
        wait = None
        while watch.queue and (wait := bucket.wait()) == 0:
            api.patch(*watch.queue.pop(0), index)
            index += 1
        if not watch.queue:
            wait = None
        if sock.pending() or selector.select(wait):
            watch.feed(_recv(sock))


def run_coalesce(api: Api, sock: ssl.SSLSocket, watch: Watch, bucket: Bucket) -> None:
    """`sync`, but while a token is awaited nothing wakes it: the answer and the watch's
    events are read at the next token's time, one wake-up per Node at the QPS limit."""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    sock.setblocking(False)
    index, sent = 0, ""
    while True:
        while True:
            try:
                watch.feed(_recv(sock))
            except ssl.SSLWantReadError:
                break
        if not watch.queue:
            if sent:
                api.answer(sent)
                sent = ""
            else:
                selector.select(None)
            continue
        if (wait := bucket.wait()) > 0:
            time.sleep(wait)
            continue
        if sent:
            api.answer(sent)
        name, uid = watch.queue.pop(0)
        api.send(name, uid, index)
        sent, index = name, index + 1


async def run_async(api: Api, sock: ssl.SSLSocket, watch: Watch, bucket: Bucket, mode: str) -> None:
    import asyncio  # noqa: PLC0415 (the sync mode's start-up does without it)

    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    threaded = mode == "threads"  # else the loop reads the watch and each PATCH blocks it

    def feed(data: bytes) -> None:
        watch.feed(data)
        if watch.queue:
            wake.set()

    if not threaded:
        sock.setblocking(False)

        def readable() -> None:
            while True:
                try:
                    feed(_recv(sock))
                except ssl.SSLWantReadError:
                    return

        loop.add_reader(sock.fileno(), readable)
    else:

        def reader() -> None:
            while True:
                loop.call_soon_threadsafe(feed, _recv(sock))

        threading.Thread(target=reader, daemon=True).start()

    feed(b"")
    index = 0
    while True:
        await wake.wait()
        wake.clear()
        while watch.queue:
            if (wait := bucket.wait()) > 0:
                await asyncio.sleep(wait)
                continue
            name, uid = watch.queue.pop(0)
            if not threaded:
                api.patch(name, uid, index)
            else:
                await asyncio.to_thread(api.patch, name, uid, index)
            index += 1


def main(argv: Sequence[str]) -> int:
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    mode = flags.get("floor-mode", "sync")
    if mode not in MODES:
        print(f"--floor-mode={mode}: one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    decisions = Decisions() if mode in ("decisions", "coalesce-decisions") else None
    if decisions is not None:
        decisions.log_as_ours()
    api = Api(flags["kubeconfig"], decisions)
    bucket = Bucket(float(flags.get("kube-api-qps", "5")), float(flags.get("kube-api-burst", "10")))
    sock, rest = api.open_watch()
    watch = Watch(rest, decisions)
    serve_health(flags["health-probe-address"])
    if mode in ("coalesce", "coalesce-decisions"):
        watch.feed(b"")
        run_coalesce(api, sock, watch, bucket)
    elif mode == "sync":
        watch.feed(b"")
        run_sync(api, sock, watch, bucket)
    else:
        import asyncio  # noqa: PLC0415 (the sync mode's start-up does without it)

        asyncio.run(run_async(api, sock, watch, bucket, mode))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
