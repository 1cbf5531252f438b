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

Before anything is pushed, every file of dist/ must match its SHA256SUMS line (a dist/ carried
to another machine, or changed since `make release`, is refused), and a tag or chart version
the registry already holds must hold this release: a published version is never replaced by
other content (``--replace`` does it on purpose); the same release again is pushed and signed
again. The pushed image must have the digest of the archive's ``.digest`` file.

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
import hashlib
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
SUMS = "SHA256SUMS"
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
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

    @property
    def digest_file(self) -> Path:
        """The image index's digest, as `make image` wrote it next to the archive."""
        return Path(f"{self.image_archive}.digest")


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


def inspect_raw(tools: Tools, target: Target, reference: str) -> list[str]:
    """What the registry holds under a tag already (the manifest's bytes), if anything."""
    return [tools.skopeo, "inspect", "--raw", *_skopeo_tls(target, ""), f"docker://{reference}"]


def sign(
    tools: Tools, target: Target, key: str, reference: str, *, recursive: bool = False
) -> list[str]:
    """``recursive`` (the image): the index and each platform's manifest, so a platform's
    digest (what a node pulled) verifies too."""
    return [
        tools.cosign, "sign", "--yes", f"--key={key}", "--tlog-upload=false",
        "--use-signing-config=false", *(["--recursive"] if recursive else []),
        *_cosign_registry(target), reference,
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
        inspect_raw(tools, target, f"{target.image}:{release.image_tag}"),
        inspect_raw(tools, target, f"{target.chart}:{release.version}"),
        push_image(tools, target, release, digest_file),
        push_chart(tools, target, release),
        sign(tools, target, key, f"{target.image}@{image_digest}", recursive=True),
        sign(tools, target, key, f"{target.chart}@{chart_digest}"),
    ]


def verify_commands(
    tools: Tools, target: Target, release: Release, public_key: str
) -> list[list[str]]:
    return [
        verify(tools, target, public_key, f"{target.image}:{release.image_tag}"),
        verify(tools, target, public_key, f"{target.chart}:{release.version}"),
    ]


def compare_commands(tools: Tools, target: Target, release: Release) -> list[list[str]]:
    """What `make verify` reads to compare the registry with dist/: the image's and the
    chart's manifests under the release's tags."""
    return [inspect_raw(tools, target, f"{target.image}:{release.image_tag}"),
            inspect_raw(tools, target, f"{target.chart}:{release.version}")]  # fmt: skip


def chart_digest(helm_output: str) -> str:
    """The manifest digest ``helm push`` reports (``Digest: sha256:...``)."""
    found = _DIGEST_RE.search(helm_output)
    if not found:
        raise PublishError(f"helm push reported no digest:\n{helm_output}")
    return found.group(1)


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def replaced(what: str, reference: str, held: str, ours: str) -> str:
    return (
        f"{reference} already holds another {what} ({held}, this release's is {ours}): a "
        "published version is not replaced. Bump the version (`make bump VERSION=x.y.z`, then "
        "`make release`), or replace it on purpose with REPLACE=1"
    )


def image_conflict(reference: str, held: bytes | None, digest: str) -> str | None:
    """Why pushing the image to ``reference`` would replace another one, or None."""
    if held is None or sha256(held) == digest:
        return None
    return replaced("image", reference, sha256(held), digest)


def chart_layers(held: bytes) -> list[str]:
    """The chart layers' digests of a held chart manifest (the manifest itself differs on every
    push: helm stamps the time)."""
    try:
        manifest = json.loads(held)
    except ValueError:
        manifest = None
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    return [str(layer.get("digest")) for layer in layers or [] if isinstance(layer, dict)
            and layer.get("mediaType") == CHART_LAYER]  # fmt: skip


def chart_conflict(reference: str, held: bytes | None, chart: bytes) -> str | None:
    """Why pushing the chart would replace another one: the held manifest's chart layer is
    not this .tgz."""
    if held is None:
        return None
    found = chart_layers(held)
    if found == [sha256(chart)]:
        return None
    return replaced("chart", reference, ", ".join(found) or "no chart", sha256(chart))


def content_problems(
    release: Release,
    image_ref: str,
    held_image: bytes | None,
    chart_ref: str,
    held_chart: bytes | None,
) -> list[str]:
    """What `make verify` finds when it compares the registry with dist/: the image under the
    tag must be the archive's digest and the chart's layer dist/'s .tgz, so a tag moved to
    other content (signed with the same key, or by anyone holding it) is not taken for this
    release."""
    digest = release.digest_file.read_text().strip()
    problems = []
    if held_image is None:
        problems.append(f"{image_ref}: the registry has no such image")
    elif sha256(held_image) != digest:
        problems.append(f"{image_ref} is {sha256(held_image)}, not {digest} "
                        f"({release.digest_file.name} in dist/)")  # fmt: skip
    ours = sha256(release.chart.read_bytes())
    if held_chart is None:
        problems.append(f"{chart_ref}: the registry has no such chart")
    elif (found := chart_layers(held_chart)) != [ours]:
        problems.append(f"{chart_ref} holds the chart {', '.join(found) or '(none)'}, not "
                        f"{release.chart.name} in dist/ ({ours})")  # fmt: skip
    return problems


def checksum_problems(dist: Path, required: Sequence[Path]) -> list[str]:
    """dist/ against its SHA256SUMS: every listed file present and unchanged, and the files
    published among them."""
    sums = dist / SUMS
    if not sums.is_file():
        return [f"no {SUMS} in {dist}/: run `make release` again (or copy all of dist/)"]
    listed: dict[str, str] = {}
    problems = []
    for line in sums.read_text().splitlines():
        digest, sep, name = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest):
            problems.append(f"{sums}: not a `sha256sum` line: {line!r}")
            continue
        listed[name] = digest
    for name, digest in sorted(listed.items()):
        path = dist / name
        if not path.is_file():
            problems.append(f"{path}: listed in {SUMS}, missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(
                f"{path}: its sha256 is not the one in {SUMS}: changed or damaged since "
                "`make release`; write or copy dist/ again"
            )
    for path in required:
        if path.is_file() and path.relative_to(dist).as_posix() not in listed:
            problems.append(f"{path}: not in {SUMS}: run `make release` again")
    return problems


def read_version(init_text: str) -> str | None:
    found = re.search(r"^__version__(?:: *\w+)? *= *[\"']([^\"']+)[\"']", init_text, re.M)
    return found.group(1) if found else None


def release_problems(release: Release, dist: Path) -> list[str]:
    problems = []
    if not dist.is_dir():
        return [f"no {dist}/: run `make release` first"]
    required = (release.image_archive, release.digest_file, release.chart)
    for path in required:
        if not path.is_file():
            problems.append(f"no {path} in {dist}/: run `make release` again")
    return problems + checksum_problems(dist, required)


# ---------------------------------------------------------------- adapters


def run(argv: Sequence[str], env: Mapping[str, str]) -> str:
    shown = shlex.join(argv)
    print(f"$ {shown}", flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(env),
                          stdin=subprocess.DEVNULL)  # fmt: skip
    if done.returncode != 0:
        raise PublishError(f"{shown}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def held(argv: Sequence[str], env: Mapping[str, str]) -> bytes | None:
    """The manifest ``skopeo inspect --raw`` prints, or None when the registry has none to
    give (no such tag or repository yet; a registry may also answer that as denied)."""
    print(f"$ {shlex.join(argv)}", flush=True)
    done = subprocess.run(argv, capture_output=True, check=False, env=dict(env),
                          stdin=subprocess.DEVNULL)  # fmt: skip
    if done.returncode != 0:
        print(f"  nothing there: {done.stderr.decode(errors='replace').strip()}", flush=True)
        return None
    return done.stdout


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


def do_publish(
    tools: Tools, given: Target, release: Release, key: str, *, replace_held: bool = False
) -> None:
    with (
        prepared(given, os.environ) as target,
        tempfile.TemporaryDirectory(prefix="local-ccm-publish-") as work,
    ):
        env = tool_env(os.environ, target)
        digest = release.digest_file.read_text().strip()
        image_ref = f"{target.image}:{release.image_tag}"
        chart_ref = f"{target.chart}:{release.version}"
        conflicts = [
            image_conflict(image_ref, held(inspect_raw(tools, target, image_ref), env), digest),
            chart_conflict(chart_ref, held(inspect_raw(tools, target, chart_ref), env),
                           release.chart.read_bytes()),
        ]  # fmt: skip
        found = [c for c in conflicts if c]
        if found and not replace_held:
            raise PublishError("nothing was pushed:\n" + "\n".join(f"  - {c}" for c in found))
        for conflict in found:
            print(f"REPLACE=1, pushing anyway: {conflict}", flush=True)
        digest_file = f"{work}/image.digest"
        run(push_image(tools, target, release, digest_file), env)
        image_digest = Path(digest_file).read_text().strip()
        if image_digest != digest:
            raise PublishError(
                f"the registry stored {image_ref} as {image_digest}, not {digest} "
                f"({release.digest_file.name}); nothing was signed"
            )
        print(f"image {target.image}:{release.image_tag}@{image_digest}", flush=True)
        pushed_chart = chart_digest(run(push_chart(tools, target, release), env))
        print(f"chart oci://{target.chart}:{release.version}@{pushed_chart}", flush=True)
        for reference, recursive in (
            (f"{target.image}@{image_digest}", True),
            (f"{target.chart}@{pushed_chart}", False),
        ):
            run(sign(tools, target, key, reference, recursive=recursive), env)
            print(f"signed {reference}", flush=True)


def do_verify(tools: Tools, given: Target, release: Release, public_key: str) -> None:
    """The signatures; then, when dist/ holds this release, that the registry's image and
    chart are dist/'s."""
    with prepared(given, os.environ) as target:
        env = tool_env(os.environ, target)
        for argv in verify_commands(tools, target, release, public_key):
            run(argv, env)
            print(f"verified {argv[-1]}", flush=True)
        if not (release.digest_file.is_file() and release.chart.is_file()):
            print(f"no {release.digest_file.name} and {release.chart.name} in dist/: the "
                  "signatures only, not compared with a release", flush=True)  # fmt: skip
            return
        image, chart = (held(argv, env) for argv in compare_commands(tools, target, release))
        problems = content_problems(
            release, f"{target.image}:{release.image_tag}", image,
            f"{target.chart}:{release.version}", chart,
        )  # fmt: skip
        if problems:
            raise PublishError("the registry does not hold dist/'s release:\n"
                               + "\n".join(f"  - {p}" for p in problems))  # fmt: skip
        print(f"the registry holds dist/'s image and chart ({release.version})", flush=True)


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
    parser.add_argument(
        "--replace",
        action="store_true",
        help="publish: push even over a tag or chart version holding other content (REPLACE=1)",
    )
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
        needed = ("skopeo", "helm", "cosign") if signing else ("skopeo", "cosign")
        problems += tool_problems(tools, needed)
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
            else [
                *verify_commands(tools, target, release, args.key or "<public key>"),
                *compare_commands(tools, target, release),
            ]
        )
        for command in commands:
            print(shlex.join(command))
        return 0
    try:
        if signing:
            do_publish(tools, target, release, args.key, replace_held=args.replace)
        else:
            do_verify(tools, target, release, args.key)
    except PublishError as exc:
        print(f"{args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
