"""Where the apiserver is and how to authenticate: kubeconfig, in-cluster, and credentials.

Loaders build a frozen ``ClusterConfig``; ``Authenticator`` turns it into the current
credential at request time (it re-reads token files and runs exec plugins), so rotated
projected tokens and expiring exec credentials keep working in a long-running process.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from local_ccm.records import dataclass

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_REREAD_SECONDS = 60.0  # client-go re-reads projected tokens at most once a minute
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class ConfigError(Exception):
    """The configuration cannot be used; the message says what and where."""


@dataclass(frozen=True)
class ExecConfig:
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = EXEC_API_VERSIONS[0]
    install_hint: str = ""


@dataclass(frozen=True)
class ClusterConfig:
    server: str
    ca_data: bytes | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_data: bytes | None = None
    client_key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    exec: ExecConfig | None = None
    namespace: str | None = None
    source: str = ""  # for messages: "in-cluster", "kubeconfig /path (context x)"

    def __repr__(self) -> str:  # never print a token or a key
        return f"ClusterConfig(server={self.server!r}, source={self.source!r})"


# ----------------------------------------------------------------------------- kubeconfig


# Paths are plain strings (os.path), not pathlib: importing pathlib would cost every agent
# about 170 KiB of memory for nothing it needs.
def _join(base: str, path: str) -> str:
    """``base / path`` as pathlib spells it: empty and "." parts dropped, ".." kept (a
    symlink may make "a/.." differ from "."), an absolute ``path`` replaces ``base``."""
    joined = os.path.join(base, path)
    parts = [part for part in joined.split(os.sep) if part not in ("", ".")]
    root = os.sep if joined.startswith(os.sep) else ""
    return root + os.sep.join(parts) if parts or root else "."


def _read_bytes(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc


def _read_text(path: str | os.PathLike[str]) -> str:
    with open(path, encoding="utf-8") as stream:
        return stream.read()


def _data_or_file(entry: Mapping[str, Any], key: str, base: str, what: str) -> bytes | None:
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError as exc:
            raise ConfigError(f"{key}-data is not valid base64") from exc
    path = entry.get(key)
    return _read_bytes(_join(base, str(path)), what) if path else None


def _named(doc: Mapping[str, Any], section: str, item: str, name: str) -> Mapping[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(item) or {}
            if not isinstance(value, Mapping):
                raise ConfigError(f"{section} entry {name!r} has no {item} mapping")
            return value
    raise ConfigError(f"{item} {name!r} not found in {section}")


def _parse_exec(spec: object, base: str) -> ExecConfig:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"user exec must be a mapping, got {type(spec).__name__}")
    env_entries = spec.get("env") or []
    if not isinstance(env_entries, list) or not all(isinstance(e, Mapping) for e in env_entries):
        raise ConfigError("user exec env must be a list of name/value mappings")
    args = spec.get("args") or []
    if not isinstance(args, list):
        raise ConfigError("user exec args must be a list")
    command = str(spec.get("command") or "")
    if not command:
        raise ConfigError("exec plugin has no command")
    # client-go: a relative command with a path separator is relative to the kubeconfig.
    if os.sep in command and not os.path.isabs(command):
        command = _join(base, command)
    api_version = str(spec.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"exec plugin apiVersion {api_version!r} is not in {EXEC_API_VERSIONS}")
    env = tuple((str(e["name"]), str(e.get("value", ""))) for e in env_entries)
    return ExecConfig(
        command=command,
        args=tuple(str(a) for a in args),
        env=env,
        api_version=api_version,
        install_hint=str(spec.get("installHint") or ""),
    )


def _user_fields(user: Mapping[str, Any], base: str) -> dict[str, Any]:
    # Impersonation is refused rather than dropped: requests would go out as the base identity.
    unsupported = {"auth-provider", "username", "password", "as", "as-uid", "as-groups",
                   "as-user-extra"} & set(user)  # fmt: skip
    if unsupported:
        raise ConfigError(f"unsupported user fields: {', '.join(sorted(unsupported))}")
    token_file = user.get("tokenFile")
    return {
        "client_cert_data": _data_or_file(user, "client-certificate", base, "client certificate"),
        "client_key_data": _data_or_file(user, "client-key", base, "client key"),
        "token": str(user["token"]) if user.get("token") else None,
        "token_file": _join(base, str(token_file)) if token_file else None,
        "exec": _parse_exec(user["exec"], base) if user.get("exec") else None,
    }


def config_from_kubeconfig(
    doc: Mapping[str, Any],
    base: str | os.PathLike[str],
    context: str | None = None,
    source: str = "",
) -> ClusterConfig:
    """Build the config from an already-parsed kubeconfig; paths resolve against ``base``."""
    name = context or doc.get("current-context")
    if not name:
        raise ConfigError("no context given and no current-context set")
    ctx = _named(doc, "contexts", "context", str(name))
    cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster", "")))
    user = _named(doc, "users", "user", str(ctx["user"])) if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    check_server(server)
    if cluster.get("proxy-url"):  # refused rather than dropped: it would connect directly
        raise ConfigError("unsupported cluster field: proxy-url")
    base = os.fspath(base)
    fields = _user_fields(user, base)
    if bool(fields["client_cert_data"]) != bool(fields["client_key_data"]):
        raise ConfigError("a client certificate needs both certificate and key")
    return ClusterConfig(
        server=server,
        ca_data=_data_or_file(cluster, "certificate-authority", base, "certificate authority"),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        namespace=str(ctx["namespace"]) if ctx.get("namespace") else None,
        source=f"{source} (context {name})",
        **fields,
    )


def load_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> ClusterConfig:
    """Read one kubeconfig file (PyYAML is imported only here)."""
    import yaml  # noqa: PLC0415  (lazy: keeps the in-cluster agent's memory small)

    text = _read_bytes(_join("", os.fspath(path)), "kubeconfig")
    # libyaml's safe loader when PyYAML was built with it: 0.24 instead of 2.4 ms CPU for a
    # 2.4 KB kubeconfig, at every start of a process given --kubeconfig.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f"kubeconfig {path} is not a mapping")
    base = os.path.dirname(os.path.realpath(path))
    try:
        return config_from_kubeconfig(doc, base, context, source=f"kubeconfig {path}")
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"kubeconfig {path} is malformed: missing or bad {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"kubeconfig {path}: {exc}") from exc


def check_server(server: str) -> None:
    """An http(s) URL with a host and, if given, a port 1-65535: the clients split it with
    `urlsplit`, which raises on a bad port or an unclosed IPv6 bracket."""
    problem = f"server {server!r} is not an http(s) URL with a host"
    scheme, sep, rest = server.partition("://")
    if not sep or scheme not in {"https", "http"} or not rest.split("/")[0]:
        raise ConfigError(problem)
    if any(c.isspace() or not c.isprintable() for c in server):
        raise ConfigError(f"{problem}: it contains whitespace or a control character")
    try:
        url = urlsplit(server)
        host, port = url.hostname, url.port
    except ValueError as exc:
        raise ConfigError(f"server {server!r} is not a valid URL: {exc}") from exc
    if not host:
        raise ConfigError(problem)
    if port == 0:
        raise ConfigError(f"server {server!r} is not a valid URL: port 0")


# ----------------------------------------------------------------------------- in-cluster


def load_incluster(
    env: Mapping[str, str] | None = None,
    *,
    token_path: str | os.PathLike[str] = SA_DIR + "/token",
    ca_path: str | os.PathLike[str] = SA_DIR + "/ca.crt",
    namespace_path: str | os.PathLike[str] = SA_DIR + "/namespace",
) -> ClusterConfig:
    """The pod's ServiceAccount; the token file is re-read by the Authenticator."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in-cluster: KUBERNETES_SERVICE_HOST and _PORT must both be set")
    if ":" in host:  # an IPv6 service address
        host = f"[{host}]"
    try:  # a bad port or host: named now, not a traceback at the first request
        check_server(f"https://{host}:{port}")
    except ConfigError as exc:
        raise ConfigError(f"in-cluster: KUBERNETES_SERVICE_HOST and _PORT: {exc}") from exc
    token_path, ca_path = os.fspath(token_path), os.fspath(ca_path)
    _read_bytes(token_path, "service account token")  # fail now, not at the first request
    namespace = _read_text(namespace_path).strip() if os.path.isfile(namespace_path) else None
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ca_data=_read_bytes(ca_path, "service account CA"),
        token_file=token_path,
        namespace=namespace,
        source="in-cluster",
    )


def resolve_config(kubeconfig: str, apiserver: str, env: Mapping[str, str]) -> ClusterConfig:
    """Explicit --kubeconfig, else in-cluster, else $KUBECONFIG, else ~/.kube/config;
    a non-empty ``apiserver`` replaces the server URL and keeps the credentials."""
    if kubeconfig:
        config = load_kubeconfig(kubeconfig)
    elif env.get("KUBERNETES_SERVICE_HOST"):
        config = load_incluster(env)
    else:
        config = _load_default_kubeconfig(env, apiserver)
    if apiserver:
        check_server(apiserver)
        config = dataclasses.replace(config, server=apiserver)
    return config


def _load_default_kubeconfig(env: Mapping[str, str], apiserver: str) -> ClusterConfig:
    candidates = [_join("", p) for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not candidates:
        home = env.get("HOME") or os.path.expanduser("~")
        candidates = [_join(home, ".kube/config")]
    # A multi-file $KUBECONFIG is not merged: the first existing file is used.
    for candidate in candidates:
        if os.path.isfile(candidate):
            return load_kubeconfig(candidate)
    if apiserver:
        log.warning("no kubeconfig found; talking to %s without credentials", apiserver)
        return ClusterConfig(server=apiserver, source="--apiserver only")
    tried = ", ".join(candidates)
    raise ConfigError(
        f"no Kubernetes configuration: not in a cluster, no --kubeconfig, none of {tried} exists"
    )


# ----------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credential:
    token: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None


Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]


class Authenticator:
    """The credential for the next request; thread-safe.

    - a static token or client certificate never changes;
    - a token file is re-read at most every ``TOKEN_REREAD_SECONDS`` and after a 401;
    - an exec plugin's credential is cached until its expirationTimestamp, and the
      plugin runs again after a 401.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        run: Runner = subprocess.run,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._config = config
        self._clock, self._wall, self._run = clock, wall_clock, run
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._cached: Credential | None = None
        self._valid_until = 0.0  # monotonic for token files, wall clock for exec

    @property
    def refreshable(self) -> bool:
        """True when a 401 might be cured by asking again."""
        return self._config.token_file is not None or self._config.exec is not None

    def credential(self) -> Credential:
        with self._lock:
            if self._config.exec is not None:
                return self._exec_credential()
            if self._config.token_file is not None:
                return self._file_credential(self._config.token_file)
            return Credential(
                self._config.token, self._config.client_cert_data, self._config.client_key_data
            )

    def invalidate(self) -> None:
        with self._lock:
            self._cached = None

    def _file_credential(self, path: str) -> Credential:
        now = self._clock()
        if self._cached is None or now >= self._valid_until:
            try:
                token = _read_text(path).strip()
            except OSError as exc:
                if self._cached is not None:  # keep the last good token over a rotation race
                    log.warning("cannot re-read token file %s: %s", path, exc.strerror)
                    return self._cached
                raise ConfigError(f"cannot read token file {path}: {exc.strerror}") from exc
            self._cached = Credential(
                token, self._config.client_cert_data, self._config.client_key_data
            )
            self._valid_until = now + TOKEN_REREAD_SECONDS
        return self._cached

    def _exec_credential(self) -> Credential:
        fresh = self._valid_until == 0 or self._wall() < self._valid_until
        if self._cached is not None and fresh:
            return self._cached
        assert self._config.exec is not None
        self._cached, self._valid_until = run_exec_plugin(
            self._config.exec, self._run, self._environ
        )
        return self._cached


def run_exec_plugin(
    spec: ExecConfig, run: Runner, environ: Mapping[str, str]
) -> tuple[Credential, float]:
    """Run the plugin; (credential, expiry as wall-clock seconds or 0 for "never")."""
    info: dict[str, Any] = {"apiVersion": spec.api_version, "kind": "ExecCredential"}
    info["spec"] = {"interactive": False}
    env = {**environ, **dict(spec.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    try:
        done = run(
            [spec.command, *spec.args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        hint = f" ({spec.install_hint})" if spec.install_hint else ""
        raise ConfigError(f"exec plugin {spec.command} failed to run: {exc}{hint}") from exc
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise ConfigError(f"exec plugin {spec.command} exited {done.returncode}: {stderr}")
    return parse_exec_credential(done.stdout, spec)


def parse_exec_credential(output: bytes, spec: ExecConfig) -> tuple[Credential, float]:
    try:
        doc = json.loads(output)
        status = doc["status"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"exec plugin {spec.command} printed no ExecCredential status") from exc
    if doc.get("apiVersion") != spec.api_version or doc.get("kind") != "ExecCredential":
        raise ConfigError(
            f"exec plugin {spec.command} answered {doc.get('apiVersion')}/{doc.get('kind')}, "
            f"want {spec.api_version}/ExecCredential"
        )
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if not status.get("token") and not (cert and key):
        raise ConfigError(f"exec plugin {spec.command} returned neither token nor certificate")
    expiry = 0.0
    if status.get("expirationTimestamp"):
        try:
            expiry = datetime.fromisoformat(str(status["expirationTimestamp"])).timestamp()
        except ValueError as exc:
            raise ConfigError(f"exec plugin {spec.command}: bad expirationTimestamp") from exc
    credential = Credential(
        token=status.get("token") or None,
        cert_data=cert.encode() if cert else None,
        key_data=key.encode() if key else None,
    )
    return credential, expiry
