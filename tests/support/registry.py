"""A real OCI registry on loopback: Debian's ``docker-registry`` (distribution 2.8), storage in
a directory of the test's, for `make publish`'s tests (docs/testing.md, "Publishing").

With ``tls=True`` it serves HTTPS with a certificate of a CA made for it (``ca_file``; SANs
127.0.0.1, ::1 and localhost), the path `make publish` takes by default (REGISTRY_CA); with
``tls=False`` plain HTTP (REGISTRY_INSECURE). Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_ccm import __version__
from tests.support.pki import issue_serving, new_ca
from tests.support.processes import StartupError, free_port, spawn, tail

REPO = Path(__file__).resolve().parents[2]
BINARY = "docker-registry"
KEY_PASSWORD = "local-ccm-test-key-password"
START_TIMEOUT = 20.0
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
ACCEPT = ", ".join((*INDEX_TYPES, "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json"))  # fmt: skip


def config(storage: Path, port: int, tls: tuple[Path, Path] | None) -> str:
    """The registry's configuration (YAML is a superset of JSON)."""
    http: dict[str, Any] = {"addr": f"127.0.0.1:{port}", "secret": "local-ccm-test"}
    if tls:
        http["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
    document = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": http,
    }
    return json.dumps(document, indent=2) + "\n"


@dataclass(frozen=True)
class Manifest:
    digest: str  # what the registry reports (Docker-Content-Digest)
    media_type: str
    body: Mapping[str, Any]

    @property
    def platforms(self) -> set[str]:
        """os/arch of every manifest of an index (empty for a single manifest)."""
        if self.media_type not in INDEX_TYPES:
            return set()
        return {f"{m['platform']['os']}/{m['platform']['architecture']}"
                for m in self.body["manifests"]}  # fmt: skip


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:<port>
    ca_file: Path | None
    log: Path

    @property
    def scheme(self) -> str:
        return "https" if self.ca_file else "http"

    def _context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None

    def get(self, path: str, accept: str = "*/*") -> tuple[bytes, Mapping[str, str]]:
        request = urllib.request.Request(f"{self.scheme}://{self.host}{path}",
                                         headers={"Accept": accept})  # fmt: skip
        with urllib.request.urlopen(request, timeout=10, context=self._context()) as response:
            return response.read(), dict(response.headers)

    def manifest(self, repository: str, reference: str) -> Manifest:
        body, headers = self.get(f"/v2/{repository}/manifests/{reference}", ACCEPT)
        media_type = headers["Content-Type"].split(";")[0]
        return Manifest(headers["Docker-Content-Digest"], media_type, json.loads(body))

    def tags(self, repository: str) -> list[str]:
        body, _ = self.get(f"/v2/{repository}/tags/list")
        return list(json.loads(body)["tags"] or [])


def _answers(registry: Registry) -> bool:
    try:
        registry.get("/v2/")
    except (urllib.error.URLError, OSError):
        return False
    return True


@contextmanager
def running_registry(workdir: Path, *, tls: bool) -> Iterator[Registry]:
    """docker-registry on a free loopback port until the block ends."""
    if shutil.which(BINARY) is None:
        raise StartupError(f"no `{BINARY}` on PATH: `make setup` installs Debian's docker-registry")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    pair: tuple[Path, Path] | None = None
    ca_file: Path | None = None
    if tls:
        now = datetime.now(UTC)
        ca = new_ca("local-ccm-test-registry-ca", now)
        serving = issue_serving(ca, now)
        ca_file, cert, key = workdir / "ca.crt", workdir / "tls.crt", workdir / "tls.key"
        ca_file.write_bytes(ca.cert_pem)
        cert.write_bytes(serving.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(serving.key_pem)
        pair = (cert, key)
    config_file = workdir / "config.yml"
    config_file.write_text(config(workdir / "storage", port, pair))
    log = workdir / "registry.log"
    child = spawn("docker-registry", [BINARY, "serve", str(config_file)], log)
    registry = Registry(f"127.0.0.1:{port}", ca_file, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(registry):
            if child.exited() is not None or time.monotonic() > deadline:
                raise StartupError(f"docker-registry did not answer:\n{tail(log)}")
            time.sleep(0.1)
        yield registry
    finally:
        child.stop()


# ------------------------------------------------------------------ `make publish` around it
@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


def tool_env(home: Path) -> dict[str, str]:
    """The environment of `make publish` and cosign in tests: cosign's and helm's state in
    ``home``, the key's password."""
    env = {**os.environ, "COSIGN_PASSWORD": KEY_PASSWORD, "DOCKER_CONFIG": str(home / "docker")}
    env |= {v: str(home / v.lower()) for v in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME",
                                               "HELM_DATA_HOME")}  # fmt: skip
    return env


def key_pair(cosign: Path, directory: Path) -> KeyPair:
    """``cosign generate-key-pair`` in ``directory`` (password :data:`KEY_PASSWORD`)."""
    directory.mkdir(parents=True)
    done = subprocess.run([str(cosign), "generate-key-pair"], cwd=directory,
                          env=tool_env(directory), capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"cosign generate-key-pair: {done.stdout}{done.stderr}")
    return KeyPair(directory / "cosign.key", directory / "cosign.pub")


def make(target: str, variables: Mapping[str, str], env: Mapping[str, str]) -> tuple[int, str]:
    """``make <target> VAR=value ...`` in the repository, as docs/install.md writes it."""
    argv = ["make", "--no-print-directory", target, *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(argv, cwd=REPO, env=dict(env), capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def write_release(out: Path, helm: Path) -> Path:
    """`make release`'s script into ``out`` (the image archive `make image` built)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "release.py"), "--out", str(out),
         "--helm", str(helm)],
        capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"scripts/release.py: {done.stdout}{done.stderr}")
    return out


def release_digest(dist: Path) -> str:
    return (dist / f"local-ccm-{__version__}.oci.tar.digest").read_text().strip()
