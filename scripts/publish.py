"""Push a release from dist/ to a registry and sign it (`make publish`), or check the
signatures (`make verify`).

- the image archive, every platform of it (an OCI index or a single manifest), with
  ``skopeo copy --all --preserve-digests`` to ``<REGISTRY>/local-ccm:v<version>``;
- the chart with ``helm push`` to ``oci://<REGISTRY>/charts`` (``<REGISTRY>/charts/local-ccm``);
- both signed by digest with cosign and a key pair of your own, offline: no transparency log,
  no Fulcio, no TUF (``--tlog-upload=false --use-signing-config=false``; cosign v3.1.3 calls
  ``--tlog-upload`` deprecated, but its replacement, a signing config without services, makes
  cosign fetch Sigstore's trusted root first);
- `verify` checks both signatures with the public key (``--insecure-ignore-tlog``: there is
  no log entry to check).

The registry is spoken to over TLS, verified against the system's CAs or ``--ca-file``;
``--insecure`` is for a registry without TLS (plain HTTP), a test registry only. Credentials
come from ``REGISTRY_USER`` and ``REGISTRY_PASSWORD`` (a temporary auth file every tool
reads), or from each tool's own login. The key's password comes from ``COSIGN_PASSWORD``.
``--dry-run`` prints the commands instead (docs/install.md shows them). Bad input exits 2
with every problem listed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "local-ccm"
IMAGE_DIGEST_PLACEHOLDER = "<image digest>"
CHART_DIGEST_PLACEHOLDER = "<chart digest>"
# host[:port] then lower-case path components, as the distribution spec allows them; no scheme,
# no tag, no digest.
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?"  # noqa: E501
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REGISTRY_RE = re.compile(rf"^{_HOST}(?:/{_COMPONENT})*$")
_DIGEST_RE = re.compile(r"^Digest:\s*(sha256:[0-9a-f]{64})\s*$", re.M)


class PublishError(Exception):
    """A failed step, reported without a traceback."""


# ---------------------------------------------------------------- pure


@dataclass(frozen=True)
class Tools:
    skopeo: str = "skopeo"
    helm: str = "helm"
    cosign: str = "cosign"


@dataclass(frozen=True)
class Target:
    """Where a release goes: ``registry`` is ``host[:port][/path]``."""

    registry: str
    insecure: bool = False
    ca_file: str | None = None
    # With REGISTRY_USER/REGISTRY_PASSWORD: the auth file every tool is given.
    auth_file: str | None = None
    # skopeo reads CAs from a directory (every *.crt there): one holding only ca_file.
    cert_dir: str | None = None

    @property
    def image(self) -> str:
        return f"{self.registry}/{NAME}"

    @property
    def charts(self) -> str:
        return f"{self.registry}/charts"

    @property
    def chart(self) -> str:
        return f"{self.charts}/{NAME}"


@dataclass(frozen=True)
class Release:
    version: str
    image_archive: Path
    chart: Path

    @property
    def image_tag(self) -> str:
        return f"v{self.version}"


def registry_problems(registry: str) -> list[str]:
    if not registry:
        return ["REGISTRY is empty: give host[:port]/path, e.g. REGISTRY=ghcr.io/example"]
    if "://" in registry:
        return [f"REGISTRY={registry}: no scheme (oci://, https://), just host[:port]/path"]
    if not REGISTRY_RE.match(registry):
        return [
            f"REGISTRY={registry}: not host[:port]/path with lower-case path components "
            "(letters, digits, '.', '_', '-'), without a tag or digest"
        ]
    return []


def key_problems(key: str, environ: Mapping[str, str], *, private: bool) -> list[str]:
    what = "COSIGN_KEY" if private else "COSIGN_PUB"
    kind = "the private key" if private else "the public key"
    if not key:
        return [f"{what} is not set: {kind}, a path or env://VAR"]
    if key.startswith("env://"):
        var = key.removeprefix("env://")
        return [] if environ.get(var) else [f"{what}={key}: ${var} is empty or not set"]
    if "://" in key:
        return []  # a KMS reference (awskms://, gcpkms://, hashivault://, k8s://...): cosign's
    if not Path(key).is_file():
        return [f"{what}={key}: no such file ({kind})"]
    return []


def environment_problems(environ: Mapping[str, str], *, signing: bool) -> list[str]:
    problems = []
    if signing and "COSIGN_PASSWORD" not in environ:
        problems.append(
            "COSIGN_PASSWORD is not set: the private key's password (set it empty for a key "
            "without one); cosign would otherwise ask on a terminal"
        )
    user, password = environ.get("REGISTRY_USER"), environ.get("REGISTRY_PASSWORD")
    if bool(user) != bool(password):
        problems.append("REGISTRY_USER and REGISTRY_PASSWORD go together: set both or neither")
    return problems


def auth_json(registry: str, user: str, password: str) -> str:
    """The auth file skopeo, helm and cosign all read (docker's config.json format)."""
    host = registry.split("/", 1)[0]
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"auth": token}}}, indent=2) + "\n"


def _skopeo_tls(target: Target, side: str) -> list[str]:
    """skopeo's TLS options; ``side`` is ``dest-`` or ``src-`` for copy, ``""`` for inspect."""
    args = [f"--{side}tls-verify=false"] if target.insecure else []
    if target.ca_file:
        args.append(f"--{side}cert-dir={target.cert_dir or '<directory holding REGISTRY_CA>'}")
    if target.auth_file:
        args.append(f"--{side}authfile={target.auth_file}")
    return args


def _helm_registry(target: Target) -> list[str]:
    args = ["--plain-http"] if target.insecure else []
    if target.ca_file:
        args.append(f"--ca-file={target.ca_file}")
    if target.auth_file:
        args.append(f"--registry-config={target.auth_file}")
    return args


def _cosign_registry(target: Target) -> list[str]:
    args = ["--allow-insecure-registry", "--allow-http-registry"] if target.insecure else []
    if target.ca_file:
        args.append(f"--registry-cacert={target.ca_file}")
    return args


def push_image(tools: Tools, target: Target, release: Release, digest_file: str) -> list[str]:
    return [
        tools.skopeo, "copy", "--all", "--preserve-digests", f"--digestfile={digest_file}",
        *_skopeo_tls(target, "dest-"),
        f"oci-archive:{release.image_archive}", f"docker://{target.image}:{release.image_tag}",
    ]  # fmt: skip


def push_chart(tools: Tools, target: Target, release: Release) -> list[str]:
    return [tools.helm, "push", *_helm_registry(target), str(release.chart),
            f"oci://{target.charts}"]  # fmt: skip


def sign(tools: Tools, target: Target, key: str, reference: str) -> list[str]:
    return [
        tools.cosign, "sign", "--yes", f"--key={key}", "--tlog-upload=false",
        "--use-signing-config=false", *_cosign_registry(target), reference,
    ]  # fmt: skip


def verify(tools: Tools, target: Target, public_key: str, reference: str) -> list[str]:
    return [tools.cosign, "verify", f"--key={public_key}", "--insecure-ignore-tlog=true",
            *_cosign_registry(target), reference]  # fmt: skip


def publish_commands(
    tools: Tools,
    target: Target,
    release: Release,
    key: str,
    *,
    digest_file: str,
    image_digest: str = IMAGE_DIGEST_PLACEHOLDER,
    chart_digest: str = CHART_DIGEST_PLACEHOLDER,
) -> list[list[str]]:
    """Every command `make publish` runs, in order (the digests known once pushed)."""
    return [
        push_image(tools, target, release, digest_file),
        push_chart(tools, target, release),
        sign(tools, target, key, f"{target.image}@{image_digest}"),
        sign(tools, target, key, f"{target.chart}@{chart_digest}"),
    ]


def verify_commands(
    tools: Tools, target: Target, release: Release, public_key: str
) -> list[list[str]]:
    return [
        verify(tools, target, public_key, f"{target.image}:{release.image_tag}"),
        verify(tools, target, public_key, f"{target.chart}:{release.version}"),
    ]


def chart_digest(helm_output: str) -> str:
    """The manifest digest ``helm push`` reports (``Digest: sha256:...``)."""
    found = _DIGEST_RE.search(helm_output)
    if not found:
        raise PublishError(f"helm push reported no digest:\n{helm_output}")
    return found.group(1)


def read_version(init_text: str) -> str | None:
    found = re.search(r"^__version__(?:: *\w+)? *= *[\"']([^\"']+)[\"']", init_text, re.M)
    return found.group(1) if found else None


def release_problems(release: Release, dist: Path) -> list[str]:
    problems = []
    if not dist.is_dir():
        return [f"no {dist}/: run `make release` first"]
    for path in (release.image_archive, release.chart):
        if not path.is_file():
            problems.append(f"no {path} in {dist}/: run `make release` again")
    return problems


# ---------------------------------------------------------------- adapters


def run(argv: Sequence[str], env: Mapping[str, str]) -> str:
    shown = shlex.join(argv)
    print(f"$ {shown}", flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(env),
                          stdin=subprocess.DEVNULL)  # fmt: skip
    if done.returncode != 0:
        raise PublishError(f"{shown}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def find_release(dist: Path) -> Release:
    version = read_version((REPO / "src" / "local_ccm" / "__init__.py").read_text()) or "?"
    return Release(version, dist / f"{NAME}-{version}.oci.tar", dist / f"{NAME}-{version}.tgz")


@contextmanager
def prepared(target: Target, environ: Mapping[str, str]) -> Iterator[Target]:
    """``target`` with the files the tools need, removed afterwards: an auth file (0600) made
    from REGISTRY_USER/REGISTRY_PASSWORD, and a directory holding only the CA for skopeo."""
    user, password = environ.get("REGISTRY_USER"), environ.get("REGISTRY_PASSWORD")
    with tempfile.TemporaryDirectory(prefix="local-ccm-publish-") as work:
        if user and password:
            path = Path(work) / "auth" / "config.json"
            path.parent.mkdir()
            path.touch(mode=0o600)
            path.write_text(auth_json(target.registry, user, password))
            target = replace(target, auth_file=str(path))
        if target.ca_file:
            cert_dir = Path(work) / "certs"
            cert_dir.mkdir()
            shutil.copyfile(target.ca_file, cert_dir / "ca.crt")
            target = replace(target, cert_dir=str(cert_dir))
        yield target


def tool_env(environ: Mapping[str, str], target: Target) -> dict[str, str]:
    """The tools' environment: with an auth file, cosign reads it from $DOCKER_CONFIG."""
    env = dict(environ)
    if target.auth_file:
        env["DOCKER_CONFIG"] = str(Path(target.auth_file).parent)
    return env


def do_publish(tools: Tools, given: Target, release: Release, key: str) -> None:
    with (
        prepared(given, os.environ) as target,
        tempfile.TemporaryDirectory(prefix="local-ccm-publish-") as work,
    ):
        env = tool_env(os.environ, target)
        digest_file = f"{work}/image.digest"
        run(push_image(tools, target, release, digest_file), env)
        image_digest = Path(digest_file).read_text().strip()
        print(f"image {target.image}:{release.image_tag}@{image_digest}", flush=True)
        pushed_chart = chart_digest(run(push_chart(tools, target, release), env))
        print(f"chart oci://{target.chart}:{release.version}@{pushed_chart}", flush=True)
        for reference in (f"{target.image}@{image_digest}", f"{target.chart}@{pushed_chart}"):
            run(sign(tools, target, key, reference), env)
            print(f"signed {reference}", flush=True)


def do_verify(tools: Tools, given: Target, release: Release, public_key: str) -> None:
    with prepared(given, os.environ) as target:
        env = tool_env(os.environ, target)
        for argv in verify_commands(tools, target, release, public_key):
            run(argv, env)
            print(f"verified {argv[-1]}", flush=True)


def tool_problems(tools: Tools, needed: Sequence[str]) -> list[str]:
    return [
        f"no {name} at {path}" if "/" in path else f"no `{path}` on PATH"
        for name in needed
        if shutil.which(path := getattr(tools, name)) is None
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("publish", "verify"))
    parser.add_argument("--registry", default="", help="host[:port]/path (REGISTRY)")
    parser.add_argument("--key", default="",
                        help="publish: the private key (COSIGN_KEY); verify: the public key "
                             "(COSIGN_PUB); a path or env://VAR")  # fmt: skip
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="a registry without TLS (REGISTRY_INSECURE=1): tests only",
    )
    parser.add_argument("--ca-file", default="", help="the registry's CA (REGISTRY_CA)")
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="default: dist")
    parser.add_argument("--skopeo", default="skopeo")
    parser.add_argument("--helm", default="helm")
    parser.add_argument("--cosign", default="cosign")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)

    tools = Tools(args.skopeo, args.helm, args.cosign)
    release = find_release(args.dist)
    signing = args.action == "publish"
    problems = registry_problems(args.registry)
    if args.ca_file and not Path(args.ca_file).is_file():
        problems.append(f"REGISTRY_CA={args.ca_file}: no such file")
    if not args.dry_run:
        problems += key_problems(args.key, os.environ, private=signing)
        problems += environment_problems(os.environ, signing=signing)
        problems += tool_problems(tools, ("skopeo", "helm", "cosign") if signing else ("cosign",))
        if signing:
            problems += release_problems(release, args.dist)
    if problems:
        print(f"{args.action}: cannot start:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2

    target = Target(args.registry, args.insecure, args.ca_file or None)
    if args.dry_run:
        commands = (
            publish_commands(
                tools, target, release, args.key or "<key>", digest_file="image.digest"
            )
            if signing
            else verify_commands(tools, target, release, args.key or "<public key>")
        )
        for command in commands:
            print(shlex.join(command))
        return 0
    try:
        if signing:
            do_publish(tools, target, release, args.key)
        else:
            do_verify(tools, target, release, args.key)
    except PublishError as exc:
        print(f"{args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
