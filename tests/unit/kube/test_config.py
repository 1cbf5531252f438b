"""Kubeconfig, in-cluster config, resolution order and credentials (local_ccm.kube.config)."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
from pathlib import Path

import pytest

from local_ccm.kube.config import (
    Authenticator,
    ClusterConfig,
    ConfigError,
    ExecConfig,
    check_server,
    load_incluster,
    load_kubeconfig,
    parse_exec_credential,
    resolve_config,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(path: Path, users: str, clusters: str = "", extra: str = "") -> Path:
    clusters = clusters or textwrap.dedent("""\
        - name: k
          cluster:
            server: https://127.0.0.1:6443
            certificate-authority-data: %s
        - name: other
          cluster:
            server: https://192.0.2.9:443
            insecure-skip-tls-verify: true
            tls-server-name: kubernetes
        """) % b64(b"CA-PEM")
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: main\n"
        "contexts:\n"
        "- {name: main, context: {cluster: k, user: u, namespace: ns1}}\n"
        "- {name: second, context: {cluster: other, user: t}}\n"
        f"clusters:\n{textwrap.indent(clusters, '')}"
        f"users:\n{users}{extra}"
    )
    return path


CERT_USERS = textwrap.dedent("""\
    - name: u
      user:
        client-certificate-data: %s
        client-key-data: %s
    - name: t
      user:
        token: secret-token
    """) % (b64(b"CERT"), b64(b"KEY"))


def test_current_context_with_embedded_data(tmp_path: Path) -> None:
    cfg = load_kubeconfig(write_kubeconfig(tmp_path / "kc", CERT_USERS))
    assert cfg.server == "https://127.0.0.1:6443"
    assert (cfg.ca_data, cfg.client_cert_data, cfg.client_key_data) == (b"CA-PEM", b"CERT", b"KEY")
    assert cfg.namespace == "ns1"
    assert cfg.token is None


def test_named_context(tmp_path: Path) -> None:
    cfg = load_kubeconfig(write_kubeconfig(tmp_path / "kc", CERT_USERS), context="second")
    assert cfg.server == "https://192.0.2.9:443"
    assert cfg.insecure_skip_tls_verify
    assert cfg.tls_server_name == "kubernetes"
    assert cfg.token == "secret-token"
    assert "secret-token" not in repr(cfg)


def test_file_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    d = tmp_path / "conf"
    (d / "pki").mkdir(parents=True)
    (d / "pki" / "ca.crt").write_bytes(b"CA-FILE")
    (d / "pki" / "c.crt").write_bytes(b"CERT-FILE")
    (d / "pki" / "c.key").write_bytes(b"KEY-FILE")
    (d / "tok").write_text("file-token\n")
    clusters = (
        "- {name: k, cluster: {server: 'https://127.0.0.1:1', certificate-authority: pki/ca.crt}}\n"
    )
    users = (
        "- {name: u, user: {client-certificate: pki/c.crt, client-key: pki/c.key}}\n"
        "- {name: t, user: {tokenFile: tok}}\n"
    )
    kc = write_kubeconfig(d / "kc", users, clusters)
    cfg = load_kubeconfig(kc)
    assert (cfg.ca_data, cfg.client_cert_data, cfg.client_key_data) == (
        b"CA-FILE",
        b"CERT-FILE",
        b"KEY-FILE",
    )
    with pytest.raises(ConfigError, match="cluster 'other' not found"):
        load_kubeconfig(kc, context="second")


def test_token_file_is_read_by_the_authenticator(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("file-token\n")
    cfg = ClusterConfig(server="https://x", token_file=str(tmp_path / "tok"))
    assert Authenticator(cfg).credential().token == "file-token"


@pytest.mark.parametrize(
    ("users", "message"),
    [
        (f"- {{name: u, user: {{client-certificate-data: {b64(b'C')}}}}}\n", "both"),
        ("- {name: u, user: {auth-provider: {name: gcp}}}\n", "unsupported"),
        ("- {name: u, user: {client-certificate-data: '!!notb64'}}\n", "base64"),
        ("- {name: u, user: {exec: {apiVersion: x/v9, command: p}}}\n", "apiVersion"),
        ("- {name: u, user: {exec: foo}}\n", "exec must be a mapping, got str"),
        ("- {name: u, user: {token: t, as: admin}}\n", "unsupported user fields: as"),
        ("- {name: u, user: {token: t, as-groups: [a]}}\n", "unsupported user fields: as-groups"),
        ("- {name: u, user: {exec: [1, 2]}}\n", "exec must be a mapping, got list"),
        ("- {name: u, user: {exec: {command: p, env: [x]}}}\n", "env must be a list"),
        ("- {name: u, user: {exec: {command: p, args: x}}}\n", "args must be a list"),
    ],
)
def test_bad_user_entries_give_clear_errors(tmp_path: Path, users: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_kubeconfig(write_kubeconfig(tmp_path / "kc", users))


def test_missing_context_and_file_errors(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", CERT_USERS)
    with pytest.raises(ConfigError, match="context 'nope' not found"):
        load_kubeconfig(kc, context="nope")
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(tmp_path / "absent")
    (tmp_path / "bad").write_text("a: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_kubeconfig(tmp_path / "bad")


# ------------------------------------------------------------------ exec plugins

PLUGIN = textwrap.dedent("""\
    import json, os, sys
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    count = os.path.join(os.path.dirname(sys.argv[0]), "count")
    n = int(open(count).read()) + 1 if os.path.exists(count) else 1
    open(count, "w").write(str(n))
    status = {"token": os.environ["PLUGIN_PREFIX"] + "-" + sys.argv[1] + "-" + str(n)}
    if os.environ.get("EXPIRES"):
        status["expirationTimestamp"] = os.environ["EXPIRES"]
    doc = {"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}
    print(json.dumps(doc))
    """)


@pytest.mark.parametrize("api_version", ["v1", "v1beta1"])
def test_exec_plugin_token_is_cached_and_rerun_after_401(tmp_path: Path, api_version: str) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    users = textwrap.dedent(f"""\
        - name: u
          user:
            exec:
              apiVersion: client.authentication.k8s.io/{api_version}
              command: {sys.executable}
              args: [plugin.py, arg]
              env: [{{name: PLUGIN_PREFIX, value: tok}}]
        """)
    cfg = load_kubeconfig(write_kubeconfig(tmp_path / "kc", users))
    assert cfg.exec is not None
    # The relative argument is the plugin's business; run it from the kubeconfig's dir.
    cfg = ClusterConfig(
        server=cfg.server,
        exec=ExecConfig(
            cfg.exec.command,
            (str(tmp_path / "plugin.py"), "arg"),
            cfg.exec.env,
            cfg.exec.api_version,
        ),
    )
    auth = Authenticator(cfg, environ={})
    assert auth.credential().token == "tok-arg-1"
    assert auth.credential().token == "tok-arg-1"  # cached: no expiry given
    auth.invalidate()
    assert auth.credential().token == "tok-arg-2"


def test_exec_plugin_rerun_after_expiry(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    spec = ExecConfig(
        sys.executable,
        (str(tmp_path / "plugin.py"), "a"),
        (("PLUGIN_PREFIX", "p"), ("EXPIRES", "2030-01-01T00:00:00Z")),
    )
    now = [1_800_000_000.0]  # 2027
    auth = Authenticator(
        ClusterConfig("https://x", exec=spec), wall_clock=lambda: now[0], environ={}
    )
    assert auth.credential().token == "p-a-1"
    assert auth.credential().token == "p-a-1"
    now[0] = 1_900_000_000.0  # 2030-03: expired
    assert auth.credential().token == "p-a-2"


def test_failing_exec_plugin_is_a_config_error(tmp_path: Path) -> None:
    spec = ExecConfig(
        sys.executable, ("-c", "import sys; sys.exit('no login')"), install_hint="install it"
    )
    with pytest.raises(ConfigError, match="no login"):
        Authenticator(ClusterConfig("https://x", exec=spec), environ={}).credential()
    missing = ExecConfig(str(tmp_path / "absent"), install_hint="install it")
    with pytest.raises(ConfigError, match="install it"):
        Authenticator(ClusterConfig("https://x", exec=missing), environ={}).credential()


def test_exec_relative_command_resolves_against_kubeconfig_dir(tmp_path: Path) -> None:
    users = (
        "- {name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1,"
        " command: ./bin/plugin}}}\n- {name: t, user: {exec: {apiVersion:"
        " client.authentication.k8s.io/v1, command: plugin-on-path}}}\n"
    )
    kc = write_kubeconfig(tmp_path / "kc", users)
    main = load_kubeconfig(kc).exec
    assert main is not None
    assert Path(main.command) == tmp_path.resolve() / "bin" / "plugin"


def test_exec_credential_parsing() -> None:
    spec = ExecConfig("p", api_version="client.authentication.k8s.io/v1")
    doc = {
        "apiVersion": spec.api_version,
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": "C",
            "clientKeyData": "K",
            "expirationTimestamp": "2030-01-01T00:00:00Z",
        },
    }
    cred, expiry = parse_exec_credential(json.dumps(doc).encode(), spec)
    assert (cred.cert_data, cred.key_data, cred.token) == (b"C", b"K", None)
    assert expiry == 1893456000.0
    doc["apiVersion"] = "client.authentication.k8s.io/v1beta1"
    with pytest.raises(ConfigError, match="want"):
        parse_exec_credential(json.dumps(doc).encode(), spec)


# ------------------------------------------------------------------ in-cluster


def sa_dir(tmp_path: Path, token: str = "t1") -> Path:
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(b"SA-CA")
    (tmp_path / "namespace").write_text("kube-system\n")
    return tmp_path


def incluster(d: Path, env: dict[str, str]) -> ClusterConfig:
    return load_incluster(
        env, token_path=d / "token", ca_path=d / "ca.crt", namespace_path=d / "namespace"
    )


def test_incluster_config(tmp_path: Path) -> None:
    d = sa_dir(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "203.0.113.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = incluster(d, env)
    assert (cfg.server, cfg.ca_data, cfg.namespace) == (
        "https://203.0.113.1:443",
        b"SA-CA",
        "kube-system",
    )
    assert cfg.token_file == str(d / "token")
    env6 = {"KUBERNETES_SERVICE_HOST": "2001:db8::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert incluster(d, env6).server == "https://[2001:db8::1]:6443"


@pytest.mark.parametrize(
    "server",
    ["https://127.0.0.1:abc", "https://127.0.0.1:99999", "https://127.0.0.1:0", "https://[::1",
     "https://:1", "http://a b:1", "ftp://h", "https://", "h:443"],
)  # fmt: skip
def test_a_server_url_the_clients_cannot_split_is_a_config_error(
    tmp_path: Path, server: str
) -> None:
    with pytest.raises(ConfigError, match="server"):
        check_server(server)
    clusters = f"- name: k\n  cluster:\n    server: '{server}'\n"
    with pytest.raises(ConfigError, match="kubeconfig"):
        load_kubeconfig(write_kubeconfig(tmp_path / "kc", CERT_USERS, clusters))


def test_a_proxy_is_refused_not_bypassed(tmp_path: Path) -> None:
    clusters = "- name: k\n  cluster:\n    server: https://h:1\n    proxy-url: http://p:3128\n"
    with pytest.raises(ConfigError, match="proxy-url"):
        load_kubeconfig(write_kubeconfig(tmp_path / "kc", CERT_USERS, clusters))


def test_incluster_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        incluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "h"})
    (tmp_path / "sa").mkdir()
    sa = sa_dir(tmp_path / "sa")
    for port in ("abc", "99999", "-1"):
        env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": port}
        with pytest.raises(ConfigError, match="in-cluster: KUBERNETES_SERVICE_HOST and _PORT"):
            incluster(sa, env)
    env = {"KUBERNETES_SERVICE_HOST": "has space", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="whitespace"):
        incluster(sa, env)
    with pytest.raises(ConfigError, match="service account token"):
        incluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"})


def test_incluster_token_is_reread_after_a_minute_and_after_401(tmp_path: Path) -> None:
    d = sa_dir(tmp_path, "t1")
    cfg = incluster(d, {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"})
    now = [100.0]
    auth = Authenticator(cfg, clock=lambda: now[0])
    assert auth.credential().token == "t1"
    (d / "token").write_text("t2")
    now[0] = 159.0
    assert auth.credential().token == "t1"  # cached for up to 60 s
    now[0] = 160.0
    assert auth.credential().token == "t2"
    (d / "token").write_text("t3")
    auth.invalidate()  # what the transport does after a 401
    assert auth.credential().token == "t3"
    assert auth.refreshable


def test_token_reread_failure_keeps_last_good_token(tmp_path: Path) -> None:
    d = sa_dir(tmp_path, "t1")
    now = [0.0]
    auth = Authenticator(
        ClusterConfig("https://h", token_file=str(d / "token")), clock=lambda: now[0]
    )
    assert auth.credential().token == "t1"
    (d / "token").unlink()
    now[0] = 61.0
    assert auth.credential().token == "t1"


# ------------------------------------------------------------------ resolution order


def test_explicit_kubeconfig_wins_over_incluster(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", CERT_USERS)
    env = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1", "KUBECONFIG": "/nope"}
    assert resolve_config(str(kc), "", env).server == "https://127.0.0.1:6443"


def test_incluster_wins_over_kubeconfig_env(tmp_path: Path) -> None:
    # The real in-cluster paths do not exist here: the error proves in-cluster was chosen.
    env = {
        "KUBERNETES_SERVICE_HOST": "h",
        "KUBERNETES_SERVICE_PORT": "1",
        "KUBECONFIG": str(write_kubeconfig(tmp_path / "kc", CERT_USERS)),
    }
    with pytest.raises(ConfigError, match="service account token"):
        resolve_config("", "", env)


def test_kubeconfig_env_then_home(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", CERT_USERS)
    assert resolve_config("", "", {"KUBECONFIG": f"/absent:{kc}"}).source.startswith("kubeconfig")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    write_kubeconfig(home / ".kube" / "config", CERT_USERS)
    cfg = resolve_config("", "", {"HOME": str(home)})
    assert str(home) in cfg.source


def test_apiserver_overrides_the_url_and_keeps_credentials(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", CERT_USERS)
    cfg = resolve_config(str(kc), "https://192.0.2.1:8443", {})
    assert cfg.server == "https://192.0.2.1:8443"
    assert cfg.client_cert_data == b"CERT"
    with pytest.raises(ConfigError, match="not an http"):
        resolve_config(str(kc), "192.0.2.1:8443", {})


def test_nothing_found_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no Kubernetes configuration"):
        resolve_config("", "", {"HOME": str(tmp_path)})
    assert resolve_config("", "https://192.0.2.1", {"HOME": str(tmp_path)}).token is None
