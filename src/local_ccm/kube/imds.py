"""Instance metadata over plain HTTP: one GET with a timeout.

Only the agent's ``--enable-azure-provider-id`` uses it. Blocking (the caller runs it in a
thread); no proxy, no retries: the caller's policy decides what a failure means. Errors say
whether anything answered: a transport error (nothing listening, no route, timeout, not
HTTP) on the link-local address means "not on Azure".
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from local_ccm.kube.http1 import BodyTooLongError, Connection

AZURE_RESOURCE_ID_URL = (
    "http://169.254.169.254/metadata/instance/compute/resourceId?api-version=2021-02-01&format=text"
)
AZURE_TIMEOUT = 2.0
MAX_BODY = 64 * 1024  # a resource ID is a few hundred bytes


class MetadataError(Exception):
    """The metadata request failed; ``transport`` is True when nothing answered in HTTP."""

    def __init__(self, message: str, *, transport: bool) -> None:
        super().__init__(message)
        self.transport = transport


def get_text(url: str, *, headers: Mapping[str, str], timeout: float) -> str:
    """GET ``url`` (plain http) and return the body of a 200 answer, stripped."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a plain http URL: {url}")
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = Connection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", target, None, headers)
        response = conn.getresponse()
        body = response.read(MAX_BODY)
    except BodyTooLongError as exc:  # an answer, though not a resource ID
        raise MetadataError(f"answer is too long: {exc}", transport=False) from exc
    except OSError as exc:  # includes socket timeouts and answers that are not HTTP
        raise MetadataError(f"{type(exc).__name__}: {exc}", transport=True) from exc
    finally:
        conn.close()
    if response.status != 200:
        raise MetadataError(f"HTTP {response.status} {response.reason}", transport=False)
    return body.decode("utf-8", errors="replace").strip()


def azure_provider_id(url: str = AZURE_RESOURCE_ID_URL, timeout: float = AZURE_TIMEOUT) -> str:
    """``azure://<resourceId>`` from Azure IMDS (header ``Metadata: true``, as IMDS requires)."""
    resource_id = get_text(url, headers={"Metadata": "true"}, timeout=timeout)
    if not resource_id:
        raise MetadataError("empty resourceId", transport=False)
    return f"azure://{resource_id}"
