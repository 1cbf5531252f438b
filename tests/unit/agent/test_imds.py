"""The instance-metadata fetcher (``local_ccm.kube.imds``) and the agent's adapter over it, against
a loopback HTTP server standing in for Azure IMDS.

Nothing here contacts 169.254.169.254: every request goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from local_ccm.agent.providerid import AzureImds, ProviderIdError
from local_ccm.kube import imds

RESOURCE_ID = "/subscriptions/s-1/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/n1"
QUERY = "?api-version=2021-02-01&format=text"


@dataclass
class Answer:
    """What the stand-in IMDS answers, and what it was asked."""

    status: int = 200
    body: str = RESOURCE_ID
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Metadata header)


@pytest.fixture
def metadata() -> Iterator[tuple[str, Answer]]:
    """A loopback HTTP server; yields its base URL and its :class:`Answer`."""
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer.seen.append((self.path, self.headers.get("Metadata")))
            data = answer.body.encode()
            self.send_response(answer.status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_the_default_url_is_the_azure_resource_id_endpoint_of_the_spec() -> None:
    assert imds.AZURE_RESOURCE_ID_URL == (
        "http://169.254.169.254/metadata/instance/compute/resourceId" + QUERY
    )
    assert imds.AZURE_TIMEOUT == 2.0


def test_provider_id_is_azure_scheme_and_the_request_carries_the_metadata_header(
    metadata: tuple[str, Answer],
) -> None:
    base, answer = metadata
    url = base + "/metadata/instance/compute/resourceId" + QUERY
    assert imds.azure_provider_id(url, timeout=2.0) == f"azure://{RESOURCE_ID}"
    assert answer.seen == [("/metadata/instance/compute/resourceId" + QUERY, "true")]


@pytest.mark.parametrize(("status", "body"), [(500, "busy"), (404, "no"), (200, "  \n")])
def test_an_error_answer_or_empty_id_is_not_a_transport_error(
    metadata: tuple[str, Answer], status: int, body: str
) -> None:
    base, answer = metadata
    answer.status, answer.body = status, body
    with pytest.raises(imds.MetadataError) as caught:
        imds.azure_provider_id(base + "/x", timeout=2.0)
    assert not caught.value.transport


def test_an_answer_longer_than_a_resource_id_can_be_is_refused_unread(
    metadata: tuple[str, Answer],
) -> None:
    base, answer = metadata
    answer.body = "x" * (imds.MAX_BODY + 1)
    with pytest.raises(imds.MetadataError, match="too long") as caught:
        imds.azure_provider_id(base + "/x", timeout=2.0)
    assert not caught.value.transport  # something answered: not "off Azure"


def test_nothing_listening_is_a_transport_error() -> None:
    with pytest.raises(imds.MetadataError) as caught:
        imds.azure_provider_id(f"http://127.0.0.1:{closed_port()}/x", timeout=2.0)
    assert caught.value.transport


def test_no_answer_within_the_timeout_is_a_transport_error() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/x"
        with pytest.raises(imds.MetadataError) as caught:
            imds.azure_provider_id(url, timeout=0.2)
    assert caught.value.transport


def test_only_plain_http_urls_are_fetched() -> None:
    with pytest.raises(ValueError, match="plain http"):
        imds.get_text("https://127.0.0.1/x", headers={}, timeout=1.0)


def test_the_agent_adapter_returns_the_value_and_translates_errors(
    metadata: tuple[str, Answer],
) -> None:
    base, answer = metadata
    assert asyncio.run(AzureImds(base + "/x", timeout=2.0).fetch()) == f"azure://{RESOURCE_ID}"
    answer.status = 503
    with pytest.raises(ProviderIdError) as http_error:
        asyncio.run(AzureImds(base + "/x", timeout=2.0).fetch())
    assert not http_error.value.transport
    with pytest.raises(ProviderIdError) as transport:
        asyncio.run(AzureImds(f"http://127.0.0.1:{closed_port()}/x", timeout=2.0).fetch())
    assert transport.value.transport
