"""kube.loophttp, kube.looptransport and kube.loopclient against a loopback peer that answers
canned bytes: framing, keep-alive, stale connections, timeouts, close, watches, retries."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from local_ccm.kube.backoff import Backoff, RetryPolicy
from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import ApiError, Conflict, Gone, Transient
from local_ccm.kube.loopclient import LoopClient, LoopWatch
from local_ccm.kube.looptransport import LoopTransport
from local_ccm.kube.request import Request
from local_ccm.kube.resources import NODES

T = TypeVar("T")
HANG, CLOSE = "hang", "close"  # in an answer: go silent (keep the connection), hang up
Answer = bytes | Sequence[bytes | str] | None  # whole, in pieces sent apart, or None: hang up


class Peer:
    """Accepts connections one after another; answers each request read with the next canned
    answer: bytes, or pieces sent apart, each piece bytes, `HANG` or `CLOSE`; None hangs up
    instead of answering. Records the requests and how many connections it accepted."""

    def __init__(self, answers: Sequence[Answer]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.accepted = 0
        self._answers = list(answers)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._answers:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        buffer = b""
        while self._answers:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, rest = buffer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + rest[:length])
            buffer = rest[length:]
            answer = self._answers.pop(0)
            for piece in [answer] if isinstance(answer, bytes | None) else answer:
                if piece == HANG:
                    time.sleep(30)
                if piece is None or isinstance(piece, str):
                    return
                conn.sendall(piece)
                time.sleep(0.02)  # its own segment: the reader sees the pieces apart

    def close(self) -> None:
        self.listener.close()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    server = Peer(request.param)
    yield server
    server.close()


def answers(*canned: Answer) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("peer", [canned], indirect=True)


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(make(), 20))


def transport(peer: Peer) -> LoopTransport:
    return LoopTransport(ClusterConfig(server=peer.url(), token="t0k"), user_agent="ua")


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
CHUNKED_OK = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
              b"4;x=1\r\n{\"b\"\r\n", b"3\r\n:2}\r\n0\r\n\r\n")  # fmt: skip


# ---------------------------------------------------------------- requests


@answers(OK, CHUNKED_OK, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
def test_framed_answers_arrive_whole_over_one_kept_alive_connection(peer: Peer) -> None:
    async def scenario() -> list[tuple[int, bytes]]:
        t = transport(peer)
        got = []
        for req in (Request("PATCH", "/api/v1/nodes/a", b'{"x":1}', "application/json"),
                    Request("GET", "/b"), Request("DELETE", "/c")):  # fmt: skip
            answer = await t.send(req, 5)
            got.append((answer.status, answer.body))
        t.close()
        return got

    assert run(scenario) == [(200, b'{"a":1}'), (200, b'{"b":2}'), (204, b"")]
    assert peer.accepted == 1
    head, _, body = peer.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"PATCH /api/v1/nodes/a HTTP/1.1"
    assert f"Host: 127.0.0.1:{peer.port}".encode() in lines
    assert {b"Authorization: Bearer t0k", b"User-Agent: ua", b"Content-Length: 7"} <= set(lines)
    assert body == b'{"x":1}'


@answers([b"HTTP/1.1 200 OK\r\n\r\nto the end", CLOSE], OK)
def test_an_answer_without_length_ends_with_its_connection_which_is_not_reused(
    peer: Peer,
) -> None:
    async def scenario() -> list[bytes]:
        t = transport(peer)
        first = await t.send(Request("GET", "/a"), 5)
        second = await t.send(Request("GET", "/b"), 5)
        t.close()
        return [first.body, second.body]

    assert run(scenario) == [b"to the end", b'{"a":1}']
    assert peer.accepted == 2


@answers(OK, None, OK)
def test_a_stale_keep_alive_connection_is_replaced_once(peer: Peer) -> None:
    """The server hangs up on the reused connection without answering (a restart): the
    request goes again on a fresh one, as Go's net/http does."""

    async def scenario() -> int:
        t = transport(peer)
        await t.send(Request("GET", "/a"), 5)
        answer = await t.send(Request("GET", "/b"), 5)
        t.close()
        return answer.status

    assert run(scenario) == 200
    assert peer.accepted == 2


@answers(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", b"garbage\r\n\r\n")
def test_a_malformed_answer_is_transient(peer: Peer) -> None:
    async def scenario() -> list[str]:
        t = transport(peer)
        reasons = []
        for _ in range(2):
            with pytest.raises(Transient) as caught:
                await t.send(Request("GET", "/"), 5)
            reasons.append(caught.value.reason)
        return reasons

    assert run(scenario) == ["ConnectionError", "ConnectionError"]


@answers([HANG])
def test_a_server_that_never_answers_times_out_as_transient(peer: Peer) -> None:
    async def scenario() -> Transient:
        with pytest.raises(Transient) as caught:
            await transport(peer).send(Request("GET", "/"), 0.3)
        return caught.value

    error = run(scenario)
    assert (error.reason, error.request_sent) == ("Timeout", True)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_close_ends_a_request_waiting_for_a_server_that_never_answers(scheme: str) -> None:
    """Over HTTPS the listener never answers the client's hello: the request is still in its
    TLS handshake. Either way it fails at once with ClientClosed (never retried)."""
    listener = socket.create_server(("127.0.0.1", 0))  # accepted by the kernel, never answered
    url = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}"
    t = LoopTransport(ClusterConfig(server=url, insecure_skip_tls_verify=True), user_agent="t")

    async def scenario() -> ApiError:
        sent = asyncio.ensure_future(t.send(Request("GET", "/version"), 60))
        for _ in range(200):
            if t._busy:
                break
            await asyncio.sleep(0.01)
        t.close()
        with pytest.raises(ApiError) as caught:
            await sent
        with pytest.raises(ApiError, match="closed"):
            await t.send(Request("GET", "/version"), 60)
        return caught.value

    try:
        error = run(scenario)
    finally:
        listener.close()
    assert type(error) is ApiError
    assert error.reason == "ClientClosed"


def test_a_refused_connection_is_transient_and_known_unsent() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    t = LoopTransport(ClusterConfig(server=f"http://127.0.0.1:{port}"), user_agent="t")

    async def scenario() -> Transient:
        with pytest.raises(Transient) as caught:
            await t.send(Request("POST", "/x", b"{}"), 5)
        return caught.value

    assert run(scenario).request_sent is False


UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"


@answers(UNAUTHORIZED, OK)
def test_a_401_rereads_the_token_file_and_tries_once_more(peer: Peer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    config = ClusterConfig(server=peer.url(), token_file=str(token))
    t = LoopTransport(config, user_agent="t")

    async def scenario() -> int:
        t._auth.credential()  # read and kept (for a minute): the first request sends "old"
        token.write_text("new")  # rotated meanwhile
        answer = await t.send(Request("GET", "/"), 5)
        t.close()
        return answer.status

    assert run(scenario) == 200
    assert b"Authorization: Bearer old" in peer.requests[0]
    assert b"Authorization: Bearer new" in peer.requests[1]


# ---------------------------------------------------------------- the client and its watches


def client(peer: Peer, sleeps: list[float], attempts: int = 3) -> LoopClient:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    class Half:
        def random(self) -> float:
            return 0.5

    policy = RetryPolicy(max_attempts=attempts, backoff=Backoff(initial=1.0, cap=10.0, jitter=0.0),
                         rng=Half())  # fmt: skip
    return LoopClient(ClusterConfig(server=peer.url()), field_manager="fm", retry=policy,
                      sleep=sleep, watch_silence=0.5)  # fmt: skip


UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
CONFLICT = (b'HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 43\r\n'
            b'\r\n{"kind":"Status","reason":"Conflict","code":409}')  # fmt: skip


@answers(UNAVAILABLE, UNAVAILABLE, OK, OK, UNAVAILABLE, CONFLICT)
def test_reads_are_retried_with_backoff_and_writes_carry_the_field_manager(peer: Peer) -> None:
    sleeps: list[float] = []
    c = client(peer, sleeps)

    async def scenario() -> list[Any]:
        got: list[Any] = [await c.get(NODES, "n1")]
        got.append(await c.patch(NODES, "n1", [{"op": "add"}], patch_type="json"))
        for _ in range(2):  # a write answered 503 was sent: not sent again
            with pytest.raises((Transient, Conflict)) as caught:
                await c.patch(NODES, "n1", [], patch_type="json")
            got.append(type(caught.value))
        await c.close()
        return got

    assert run(scenario) == [{"a": 1}, {"a": 1}, Transient, Conflict]
    assert sleeps == [1.0, 2.0]
    assert b"PATCH /api/v1/nodes/n1?fieldManager=fm HTTP/1.1" in peer.requests[3]
    assert b"Content-Type: application/json-patch+json" in peer.requests[3]


def watch_answer(*events: dict[str, Any], end: bool = True) -> list[bytes | str]:
    """A chunked watch answer whose lines are cut across chunks, one piece per chunk; without
    `end` the stream then goes silent."""
    data = b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"\n"  # a blank line too
    cut = [data[i : i + 17] for i in range(0, len(data), 17)]
    pieces: list[bytes | str] = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    pieces += [f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in cut]
    return [*pieces, b"0\r\n\r\n" if end else HANG]


NODE = {"metadata": {"name": "n", "resourceVersion": "5"}}


async def collect(watch: LoopWatch, kinds: list[str]) -> None:
    async for event in watch:
        kinds.append(event.type)


@answers(watch_answer({"type": "ADDED", "object": NODE}, {"type": "MODIFIED", "object": NODE}))
def test_a_watch_yields_its_events_until_the_server_ends_it(peer: Peer) -> None:
    async def scenario() -> tuple[list[str], bool]:
        watch = client(peer, []).watch(NODES, resource_version="4")
        kinds = [event.type async for event in watch]
        return kinds, watch.is_open

    assert run(scenario) == (["ADDED", "MODIFIED"], False)
    assert (
        b"GET /api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=4"
        in (peer.requests[0])
    )


GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}


@answers(watch_answer({"type": "ADDED", "object": NODE}, GONE))
def test_an_error_event_raises_gone(peer: Peer) -> None:
    async def scenario() -> list[str]:
        kinds: list[str] = []
        with pytest.raises(Gone):
            await collect(client(peer, []).watch(NODES), kinds)
        return kinds

    assert run(scenario) == ["ADDED"]


@answers(watch_answer({"type": "ADDED", "object": NODE}, end=False))
def test_a_silent_watch_is_a_broken_stream(peer: Peer) -> None:
    """No byte for `watch_silence` (0.5 s here): the connection is taken for dead."""

    async def scenario() -> tuple[list[str], str, bool]:
        kinds: list[str] = []
        watch = client(peer, []).watch(NODES)
        with pytest.raises(Transient) as caught:
            await collect(watch, kinds)
        return kinds, caught.value.reason, watch.is_open

    assert run(scenario) == (["ADDED"], "StreamBroken", False)


@answers(watch_answer({"type": "ADDED", "object": NODE}, end=False))
def test_cancelling_the_consumer_closes_the_watch(peer: Peer) -> None:
    async def scenario() -> bool:
        watch = client(peer, []).watch(NODES)

        async def consume() -> None:
            async for _ in watch:
                pass

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.2)
        assert watch.is_open
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return watch.is_open

    assert run(scenario) is False


def test_requests_at_once_each_get_a_connection_none_waits_for_another() -> None:
    """As many requests in flight as callers (service-lb-ipam's workers, beyond any thread
    count): the peer answers only once all of them are waiting, each on its own connection."""
    count = 24
    listener = socket.create_server(("127.0.0.1", 0), backlog=count)
    conns: list[socket.socket] = []

    def serve() -> None:
        while len(conns) < count:
            conn, _ = listener.accept()
            conn.recv(65536)  # one GET: its head fits
            conns.append(conn)
        for conn in conns:
            conn.sendall(OK)

    server = threading.Thread(target=serve, daemon=True)
    server.start()

    async def scenario() -> list[Any]:
        client = LoopClient(ClusterConfig(server=f"http://127.0.0.1:{listener.getsockname()[1]}",
                                          token="t"), field_manager="fm")  # fmt: skip
        try:
            return await asyncio.gather(*(client.request("GET", f"/r{i}") for i in range(count)))
        finally:
            await client.close()

    try:
        assert run(scenario) == [{"a": 1}] * count
        assert len(conns) == count
    finally:
        for conn in conns:
            conn.close()
        listener.close()
