"""The HTTP server under /metrics, /healthz and /readyz (local_ccm.runtime.httpd): the request
head parser, and the server's edges against real sockets on 127.0.0.1 (oversized or malformed
heads, silent clients, concurrent scrapes, a broken handler, close while a client waits).

These tests bind loopback ports, as tests/unit/test_serve.py does.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from ipaddress import ip_address

import pytest

from local_ccm.runtime.httpd import (
    MAX_HEAD,
    Request,
    RequestError,
    Response,
    Server,
    encode_response,
    head_end,
    parse_head,
)
from local_ccm.runtime.promtext import Counter, Registry
from local_ccm.runtime.serve import Checks, HttpServer, Routes
from local_ccm.validate import BindAddress

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ parsing (pure)


def test_a_request_head_is_parsed_with_case_insensitive_headers() -> None:
    head = b"GET /readyz?verbose HTTP/1.1\r\nHost: x\r\nACCEPT: text/plain\r\naccept: other\r\n\r\n"
    request = parse_head(head)
    assert (request.method, request.target, request.version) == (
        "GET",
        "/readyz?verbose",
        "HTTP/1.1",
    )
    assert request.header("Accept") == "text/plain", "the first of repeated headers wins"
    assert request.header("host") == "x"
    assert request.header("Authorization") is None


def test_no_headers_at_all_is_a_request_too() -> None:
    assert parse_head(b"GET /healthz HTTP/1.0\r\n\r\n") == Request(
        "GET", "/healthz", "HTTP/1.0", {}
    )
    assert parse_head(b"GET /healthz HTTP/1.0\n\n").target == "/healthz"


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /healthz\r\n\r\n", 400),
        (b"GET /a b HTTP/1.1\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello
        (b"GET / FTP/1.0\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / HTTP/0.9\r\n\r\n", 400),
        (b"GET / HTTP/.1\r\n\r\n", 400),
        (b"GET / HTTP/1\r\n\r\n", 400),
        (b"GET / HTTP/\xb2.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: b\r\n folded: line\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n: no name\r\n\r\n", 400),
    ],
)
def test_a_malformed_head_is_refused(head: bytes, status: int) -> None:
    with pytest.raises(RequestError) as raised:
        parse_head(head)
    assert raised.value.status == status


def test_a_later_minor_version_and_any_byte_in_a_value_are_accepted() -> None:
    request = parse_head(b"GET / HTTP/1.2\r\nX-A: a\x85b\r\n\r\n")
    assert (request.version, request.header("x-a")) == ("HTTP/1.2", "a\x85b")


def test_the_head_ends_at_the_first_blank_line() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nA: b\r\n") == -1
    assert head_end(b"GET / HTTP/1.1\r\n\r\nbody") == len(b"GET / HTTP/1.1\r\n\r\n")
    assert head_end(b"GET / HTTP/1.0\n\nbody\r\n\r\n") == len(b"GET / HTTP/1.0\n\n")


def test_a_response_says_its_length_and_closes() -> None:
    assert encode_response(Response(404, "text/plain", b"no\n")) == (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
        b"Connection: close\r\n\r\nno\n"
    )


# ------------------------------------------------------------------ serving (loopback)


def echo(request: Request) -> Response:
    if request.target == "/boom":
        raise RuntimeError("a bug in a handler")
    return Response(200, "text/plain", f"{request.target} {request.header('x-a')}\n".encode())


@pytest.fixture
def server() -> Iterator[Server]:
    started = Server(socket.create_server(("127.0.0.1", 0)), echo, head_timeout=0.2)
    yield started
    started.close()


def exchange(port: int, raw: bytes) -> bytes:
    """Everything the server answers to `raw` before it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        return receive_all(sock)


def receive_all(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"X-A": "b"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_a_get_is_answered_and_the_connection_closed(server: Server) -> None:
    answer = exchange(server.port, b"GET /x HTTP/1.1\r\nHost: h\r\nx-A: 1\r\n\r\n")
    assert answer == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
        b"Connection: close\r\n\r\n/x 1\n"
    )


def test_a_head_sent_in_pieces_is_put_together(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        for piece in (b"GET /pie", b"ces HTTP/1.1\r\nX-A: ", b"2\r\n", b"\r\n"):
            sock.sendall(piece)
        assert receive_all(sock).endswith(b"\r\n\r\n/pieces 2\n")


def test_an_oversized_head_is_431(server: Server) -> None:
    filler = b"X-Filler: " + b"a" * (MAX_HEAD + 1024) + b"\r\n"
    answer = exchange(server.port, b"GET / HTTP/1.1\r\n" + filler + b"\r\n")
    assert status_of(answer) == 431


def test_an_unterminated_oversized_head_is_431(server: Server) -> None:
    answer = exchange(server.port, b"GET / HTTP/1.1\r\nX: " + b"a" * (2 * MAX_HEAD))
    assert status_of(answer) == 431


def test_a_bad_request_line_is_400(server: Server) -> None:
    answer = exchange(server.port, b"HELLO\r\n\r\n")
    assert status_of(answer) == 400
    assert answer.endswith(b"bad request line 'HELLO'\n")


@pytest.mark.parametrize("method", ["HEAD", "POST", "DELETE"])
def test_only_get_is_implemented(server: Server, method: str) -> None:
    answer = exchange(server.port, f"{method} / HTTP/1.1\r\n\r\n".encode())
    assert status_of(answer) == 501


def test_a_handler_that_raises_is_500_and_the_server_goes_on(server: Server) -> None:
    assert get(server.port, "/boom") == (500, "internal server error\n")
    assert get(server.port, "/after") == (200, "/after b\n")


def test_a_client_that_connects_and_hangs_up_gets_nothing(server: Server) -> None:
    assert exchange(server.port, b"") == b""
    assert get(server.port, "/after") == (200, "/after b\n")


def test_a_silent_client_is_dropped_without_holding_the_server(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as silent:
        silent.sendall(b"GET /never-fin")
        assert get(server.port, "/others") == (200, "/others b\n")
        assert receive_all(silent) == b"", "dropped after head_timeout, without an answer"


def test_concurrent_scrapes_all_get_their_answer(server: Server) -> None:
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def scrape(n: int) -> None:
        for i in range(5):
            answer = get(server.port, f"/{n}/{i}")
            with lock:
                results.append(answer)

    with socket.create_connection(("127.0.0.1", server.port), timeout=5):  # one silent client
        threads = [threading.Thread(target=scrape, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(results) == sorted((200, f"/{n}/{i} b\n") for n in range(8) for i in range(5))


def test_close_returns_while_a_client_is_connected() -> None:
    server = Server(socket.create_server(("127.0.0.1", 0)), echo)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        server.close()
    with pytest.raises(ConnectionRefusedError):
        get(server.port, "/x")


def test_metrics_follow_a_lower_case_accept_header() -> None:
    registry = Registry()
    Counter("local_ccm_test_things", "things counted", registry=registry).inc(3)
    server = HttpServer(BindAddress(ip_address("127.0.0.1"), 0), Routes(registry=registry))
    try:
        openmetrics = b"accept: application/openmetrics-text; version=1.0.0\r\n"
        answer = exchange(server.port, b"GET /metrics HTTP/1.1\r\n" + openmetrics + b"\r\n")
        assert b"Content-Type: application/openmetrics-text" in answer
        assert answer.endswith(b"# EOF\n")
    finally:
        server.close()


def test_health_ignores_what_the_query_does_not_ask() -> None:
    checks = Checks()
    checks.add("loop", lambda: (True, ""))
    server = HttpServer(BindAddress(ip_address("127.0.0.1"), 0), Routes(healthz=checks))
    try:
        assert get(server.port, "/healthz?verbose=1&x") == (
            200,
            "[+]loop ok\nhealthz check passed\n",
        )
        assert get(server.port, "/healthz?verbosely") == (200, "ok\n")
        assert get(server.port, "/healthz/") == (404, "404 page not found\n")
    finally:
        server.close()
