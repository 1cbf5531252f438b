"""Kubeconfig files for command-line tests that end before any request: one a process can use
(its server is never asked) and ones it cannot use, each in its own way."""

from __future__ import annotations

import base64
from pathlib import Path

BROKEN = ("missing", "not-yaml", "ca-not-pem", "key-not-pem", "exec-not-mapping", "bad-port",
          "bad-ipv6-host")  # fmt: skip
_GARBAGE = base64.b64encode(b"not PEM").decode()


def _render(cluster: str, user: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{{cluster}}}}}]\n"
        f"users: [{{name: u, user: {{{user}}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )


def unused_kubeconfig(directory: Path) -> Path:
    """Usable credentials for a server on the discard port: nothing may ever reach it."""
    path = directory / "unused.kubeconfig"
    path.write_text(_render("server: 'http://127.0.0.1:9'", "token: t"))
    return path


def credentials_env(directory: Path) -> dict[str, str]:
    """An environment whose only credentials are `unused_kubeconfig`'s, in $KUBECONFIG: a
    command line's own problems, without a missing-credentials one."""
    return {"HOME": str(directory), "KUBECONFIG": str(unused_kubeconfig(directory))}


def broken_kubeconfig(directory: Path, kind: str) -> Path:
    """A kubeconfig that cannot be used: `kind` is one of `BROKEN`."""
    path = directory / f"{kind}.kubeconfig"
    server = "server: 'https://127.0.0.1:9'"
    if kind == "not-yaml":
        path.write_text("clusters: [unclosed\n")
    elif kind == "ca-not-pem":
        path.write_text(_render(f"{server}, certificate-authority-data: {_GARBAGE}", "token: t"))
    elif kind == "key-not-pem":
        user = f"client-certificate-data: {_GARBAGE}, client-key-data: {_GARBAGE}"
        path.write_text(_render(f"{server}, insecure-skip-tls-verify: true", user))
    elif kind == "exec-not-mapping":
        path.write_text(_render(server, "exec: foo"))
    elif kind == "bad-port":
        path.write_text(_render("server: 'https://127.0.0.1:abc'", "token: t"))
    elif kind == "bad-ipv6-host":
        path.write_text(_render("server: 'https://[::1'", "token: t"))
    elif kind != "missing":
        raise ValueError(f"unknown kind {kind!r}; one of {BROKEN}")
    return path
