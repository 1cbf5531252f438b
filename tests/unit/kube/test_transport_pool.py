"""The keep-alive pool of HttpTransport: no I/O, connections are never opened here."""

from __future__ import annotations

import http.client

from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.transport import HttpTransport


class Recording(http.client.HTTPConnection):
    closed_calls = 0

    def close(self) -> None:
        self.closed_calls += 1
        super().close()


def test_a_connection_released_after_close_is_closed_not_pooled() -> None:
    """A request still running at shutdown must not leak its socket into a dead pool."""
    transport = HttpTransport(ClusterConfig(server="http://127.0.0.1:9"), user_agent="t")
    conn = Recording("127.0.0.1", 9)
    transport.close()
    transport._release(conn)
    assert transport._idle == []
    assert conn.closed_calls == 1


def test_a_connection_released_while_open_is_kept_for_reuse() -> None:
    transport = HttpTransport(ClusterConfig(server="http://127.0.0.1:9"), user_agent="t")
    conn = Recording("127.0.0.1", 9)
    transport._release(conn)
    assert transport._idle == [conn]
    assert conn.closed_calls == 0
    transport.close()
    assert conn.closed_calls == 1
