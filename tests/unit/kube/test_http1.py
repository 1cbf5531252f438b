"""kube.http1 against a loopback peer that answers canned bytes: framing, reuse, errors."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence

import pytest

from local_ccm.kube import http1
from local_ccm.kube.http1 import (
    BodyTooLongError,
    Connection,
    ProtocolError,
    RemoteDisconnectedError,
)


class Peer:
    """Accepts one connection; for each request read, sends the next canned answer (None:
    close the connection instead). Records the raw requests."""

    def __init__(self, answers: Sequence[bytes | None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self._answers = list(answers)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            buffer = b""
            for answer in self._answers:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                if answer is None:
                    return
                conn.sendall(answer)

    def close(self) -> None:
        self.listener.close()
        self._thread.join(5)


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    server = Peer(request.param)
    yield server
    server.close()


def answers(*canned: bytes | None) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("peer", [canned], indirect=True)


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'


@answers(OK, b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
def test_a_length_framed_answer_and_the_same_connection_again(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("PATCH", "/api/v1/nodes/a", b'{"x":1}', {"Content-Type": "application/json"})
    first = conn.getresponse()
    assert (first.status, first.reason, first.read()) == (200, "OK", b'{"a":1}')
    assert first.headers["content-type"] == "application/json"
    assert not first.will_close
    sock = conn.sock
    conn.request("POST", "/x", None, {})
    second = conn.getresponse()
    assert (second.status, second.read()) == (201, b"{}")
    assert conn.sock is sock  # one connection, kept alive
    conn.close()
    assert conn.sock is None
    head, _, body = peer.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"PATCH /api/v1/nodes/a HTTP/1.1"
    assert f"Host: 127.0.0.1:{peer.port}".encode() in lines
    assert b"Content-Length: 7" in lines
    assert body == b'{"x":1}'
    assert b"Content-Length: 0" in peer.requests[1].split(b"\r\n")  # a POST always says it


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nab\ncd\r\n"  # a line and the start of the next
    b"3\r\nef\n\r\n"
    b"8\r\nline3\nxy\r\n"  # a line ending inside a chunk, then an unfinished one
    b"0\r\nX-Trailer: t\r\n\r\n"
)


@answers(CHUNKED, CHUNKED)
def test_chunked_answers_are_read_whole_or_line_by_line(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("GET", "/a", None, {})
    assert conn.getresponse().read() == b"ab\ncdef\nline3\nxy"
    conn.request("GET", "/b", None, {})
    stream = conn.getresponse()
    lines = [stream.readline() for _ in range(5)]
    assert lines == [b"ab\n", b"cdef\n", b"line3\n", b"xy", b""]
    conn.close()


@answers(b"HTTP/1.1 200 OK\r\n\r\nline1\nline2\n")
def test_an_answer_without_length_ends_with_the_connection(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("GET", "/", None, {})
    answer = conn.getresponse()
    assert answer.will_close
    peer.close()  # the peer hangs up after its answer
    lines = [answer.readline(), answer.readline(), answer.readline()]
    assert lines == [b"line1\n", b"line2\n", b""]
    conn.close()


@answers(
    b"HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n"
    b"HTTP/1.1 204 No Content\r\nConnection: close\r\nWarning: a\r\nWarning: b\r\n\r\n"
)
def test_interim_answers_are_skipped_and_repeated_headers_joined(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("DELETE", "/", None, {})
    answer = conn.getresponse()
    assert (answer.status, answer.read()) == (204, b"")
    assert answer.will_close
    assert answer.getheader("Warning") == "a, b"
    conn.close()


@answers(None)
def test_a_peer_that_hangs_up_without_answering_is_a_remote_disconnect(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("GET", "/", None, {})
    with pytest.raises(RemoteDisconnectedError):
        conn.getresponse()
    assert issubclass(RemoteDisconnectedError, ConnectionResetError)
    conn.close()


@pytest.mark.parametrize(
    ("peer", "match"),
    [
        ((b"SSH-2.0-OpenSSH\r\n\r\n",), "status line"),
        ((b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",), "header line"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",), "Content-Length"),
        ((b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",), "chunk size"),
    ],
    indirect=["peer"],
)
def test_answers_that_are_not_http_are_protocol_errors(peer: Peer, match: str) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("GET", "/", None, {})
    with pytest.raises(ProtocolError, match=match):
        conn.getresponse().read()
    assert issubclass(ProtocolError, OSError)
    conn.close()


@answers(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
def test_a_body_shorter_than_its_length_is_a_protocol_error(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    conn.request("GET", "/", None, {})
    answer = conn.getresponse()
    peer.close()
    with pytest.raises(ProtocolError, match="5 of 10"):
        answer.read()
    conn.close()


LONG_BODY = b"x" * 40
LIMITED = [
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + LONG_BODY, id="length"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"14\r\n" + LONG_BODY[:20] + b"\r\n14\r\n" + LONG_BODY[20:] + b"\r\n0\r\n\r\n",
        id="chunked",
    ),
    pytest.param(b"HTTP/1.1 200 OK\r\n\r\n" + LONG_BODY, id="until-close"),
]


@pytest.mark.parametrize("canned", LIMITED)
@pytest.mark.parametrize(("limit", "fits"), [(40, True), (39, False), (10, False)])
def test_read_stops_past_its_limit_whatever_the_framing(
    canned: bytes, limit: int, fits: bool
) -> None:
    server = Peer([canned])
    conn = Connection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", "/", None, {})
        answer = conn.getresponse()
        if fits:
            assert answer.read(limit) == LONG_BODY
        else:
            with pytest.raises(BodyTooLongError, match=f"longer than {limit} bytes"):
                answer.read(limit)
            assert issubclass(BodyTooLongError, ProtocolError)
    finally:
        conn.close()
        server.close()


@answers(OK)
def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(peer: Peer) -> None:
    conn = Connection("127.0.0.1", peer.port, timeout=5)
    with pytest.raises(ValueError, match="line break"):
        conn.request("GET", "/", None, {"Authorization": "Bearer x\r\nX-Evil: 1"})
    assert conn.sock is None  # refused before connecting
    conn.request("GET", "/", None, {"Authorization": "Bearer x"})
    assert conn.getresponse().status == 200
    conn.close()


def test_the_host_header_leaves_out_the_default_port_and_brackets_ipv6() -> None:
    assert Connection("h", 80, timeout=1)._host_header == "h"
    assert Connection("h", None, timeout=1).port == 80
    assert Connection("::1", 6443, timeout=1)._host_header == "[::1]:6443"


def test_an_ascii_host_goes_to_socket_and_ssl_as_bytes_any_other_as_text() -> None:
    assert http1.wire_host("127.0.0.1") == b"127.0.0.1"
    assert http1.wire_host("::1") == b"::1"
    assert http1.wire_host("kubernetes.default.svc") == b"kubernetes.default.svc"
    assert http1.wire_host("bücher.example") == "bücher.example"  # the idna codec encodes it
