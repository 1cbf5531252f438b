"""`make publish` and `make verify` against a real registry (D18): Debian's docker-registry on
127.0.0.1 over TLS with a CA of the test's (REGISTRY_CA), a cosign key pair made here, the
release scripts/release.py writes (as `make release` does, into a directory of the test's).

The targets are called exactly as docs/install.md shows them (plus REGISTRY_CA and DIST). Then:
the registry holds the image under the archive's own digest, every platform of the archive; both
signatures verify with the key pair's public key and fail with another key pair's; and the
chart installs from ``oci://`` into the real apiserver (``--dry-run=server``) with the pushed
image's repository. A published version is not replaced by other content, and the same release
can be published again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from local_ccm import __version__
from tests.support.chart import Helm, parse
from tests.support.controlplane import ControlPlane
from tests.support.oci import image_archive
from tests.support.registry import (
    KeyPair,
    Registry,
    key_pair,
    make,
    running_registry,
    tool_env,
    write_release,
)

# release.py (about 15 s on a busy 2-core machine), the push of a 25 MiB image, two signatures.
pytestmark = pytest.mark.timeout(300)
PATH = "lcct/local-ccm"  # REGISTRY's path: the image at <REGISTRY>/local-ccm


@dataclass(frozen=True)
class Published:
    registry: Registry
    dist: Path
    keys: KeyPair
    output: str
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.registry.host}/{PATH}"


@pytest.fixture(scope="module")
def published(cosign_binary: Path, helm_binary: Path) -> Iterator[Published]:
    if not image_archive().exists():
        pytest.fail("no image archive: run `make image` (`make test` does)", pytrace=False)
    cosign = cosign_binary
    with tempfile.TemporaryDirectory(prefix="local-ccm-d18-") as work_dir:
        work = Path(work_dir)
        dist = write_release(work / "dist", helm_binary)
        keys = key_pair(cosign, work / "keys")
        with running_registry(work / "registry", tls=True) as registry:
            assert registry.ca_file is not None
            started = time.monotonic()
            code, output = make("publish", {
                "REGISTRY": f"{registry.host}/{PATH}", "COSIGN_KEY": str(keys.private),
                "REGISTRY_CA": str(registry.ca_file), "DIST": str(dist),
            }, tool_env(work))  # fmt: skip
            seconds = time.monotonic() - started
            assert code == 0, f"{output}\n{registry.log.read_text()[-3000:]}"
            yield Published(registry, dist, keys, output, seconds)


def archive_platforms(archive: Path) -> set[str]:
    """os/arch of every image in the archive (its index's manifests, or the one image)."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> dict[str, object]:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            loaded: dict[str, object] = json.load(member)
            return loaded

        index = tar.extractfile("index.json")
        assert index is not None
        (top,) = json.load(index)["manifests"]
        if top["mediaType"].endswith("index.v1+json"):
            return {f"{m['platform']['os']}/{m['platform']['architecture']}"
                    for m in blob(top["digest"])["manifests"]}  # type: ignore[attr-defined]  # fmt: skip
        manifest = blob(top["digest"])
        config = blob(manifest["config"]["digest"])  # type: ignore[index]
        return {f"{config['os']}/{config['architecture']}"}


def test_d18_publish_pushes_the_archive_under_its_own_digest(published: Published) -> None:
    digest = (published.dist / f"local-ccm-{__version__}.oci.tar.digest").read_text().strip()
    print(f"make publish took {published.seconds:.1f} s")
    registry = published.registry
    pushed = registry.manifest(f"{PATH}/local-ccm", f"v{__version__}")
    assert pushed.digest == digest
    assert f"image {published.name}/local-ccm:v{__version__}@{digest}" in published.output
    archive = published.dist / f"local-ccm-{__version__}.oci.tar"
    platforms = archive_platforms(archive)
    if pushed.platforms:  # an index: every platform of the archive, each one pulled by digest
        assert pushed.platforms == platforms
        for entry in pushed.body["manifests"]:
            assert registry.manifest(f"{PATH}/local-ccm", entry["digest"]).digest == entry["digest"]
    else:
        assert len(platforms) == 1, platforms
    chart = registry.manifest(f"{PATH}/charts/local-ccm", __version__)
    assert chart.body["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    assert f"chart oci://{published.name}/charts/local-ccm:{__version__}@{chart.digest}" in (
        published.output
    )
    for reference in (f"local-ccm@{digest}", f"charts/local-ccm@{chart.digest}"):
        assert f"signed {published.name}/{reference}" in published.output


def verify(published: Published, public: Path, dist: Path | None = None) -> tuple[int, str]:
    assert published.registry.ca_file is not None
    return make("verify", {
        "REGISTRY": published.name, "COSIGN_PUB": str(public),
        "REGISTRY_CA": str(published.registry.ca_file), "DIST": str(dist or published.dist),
    }, tool_env(published.dist.parent))  # fmt: skip


def test_d18_both_signatures_verify_with_the_public_key(published: Published) -> None:
    code, output = verify(published, published.keys.public)
    assert code == 0, output
    assert f"verified {published.name}/local-ccm:v{__version__}" in output
    assert f"verified {published.name}/charts/local-ccm:{__version__}" in output
    assert f"the registry holds dist/'s image and chart ({__version__})" in output


def test_d18_verify_fails_when_the_registry_holds_another_release(
    published: Published, tmp_path: Path
) -> None:
    """The signatures verify, but dist/ is another build (here its digest file and chart say
    so): `make verify` names both digests of each and fails."""
    other = tmp_path / "dist"
    shutil.copytree(published.dist, other)
    digest = other / f"local-ccm-{__version__}.oci.tar.digest"
    digest.write_text("sha256:" + "0" * 64 + "\n")
    chart = other / f"local-ccm-{__version__}.tgz"
    chart.write_bytes(gzip.compress(gzip.decompress(chart.read_bytes()), mtime=1))
    code, output = verify(published, published.keys.public, other)
    assert code != 0, output
    assert f"verified {published.name}/local-ccm:v{__version__}" in output  # signatures fine
    assert "the registry does not hold dist/'s release" in output
    assert f"{published.name}/local-ccm:v{__version__} is sha256:" in output
    assert f"not sha256:{'0' * 64}" in output
    assert f"not local-ccm-{__version__}.tgz in dist/" in output


def test_d18_each_platform_of_the_image_is_signed_too(
    published: Published, cosign_binary: Path
) -> None:
    """A node pulls its platform's manifest, not the index: that digest verifies as well."""
    assert published.registry.ca_file is not None
    index = published.registry.manifest(f"{PATH}/local-ccm", f"v{__version__}")
    digests = [entry["digest"] for entry in index.body.get("manifests", [])]
    assert len(digests) == len(index.platforms) >= 2, index.body
    for digest in digests:
        done = subprocess.run(
            [str(cosign_binary), "verify", f"--key={published.keys.public}",
             "--insecure-ignore-tlog=true", f"--registry-cacert={published.registry.ca_file}",
             f"{published.name}/local-ccm@{digest}"],
            env=tool_env(published.dist.parent), capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, (digest, done.stdout + done.stderr)


def test_d18_verification_fails_with_another_key(published: Published, cosign_binary: Path) -> None:
    other = key_pair(cosign_binary, published.dist.parent / "other-keys")
    code, output = verify(published, other.public)
    assert code != 0, output
    # cosign v3 stores the signature as a Sigstore bundle: found, but not by this key.
    assert "failed to verify signature" in output, output
    assert "verified" not in output.replace("unverified", "")


def test_d18_the_chart_installs_from_the_registry(
    published: Published, chart_helm: Helm, control_plane: ControlPlane
) -> None:
    assert published.registry.ca_file is not None
    values = chart_helm.home / "d18-values.yaml"
    values.write_text(yaml.safe_dump({"image": {"repository": f"{published.name}/local-ccm"}}))
    result = chart_helm.run(
        "install", "d18", f"oci://{published.name}/charts/local-ccm", "--version", __version__,
        "--ca-file", str(published.registry.ca_file), "--namespace", "kube-system",
        "--kubeconfig", str(control_plane.admin_kubeconfig), "--dry-run=server",
        "-f", str(values), "-o", "json",
    )  # fmt: skip
    assert result.code == 0, result.output
    # helm prints what it pulled before the release's JSON.
    pulled, brace, document = result.stdout.partition("{")
    chart = published.registry.manifest(f"{PATH}/charts/local-ccm", __version__)
    assert f"Digest: {chart.digest}" in pulled
    manifest = json.loads(brace + document)["manifest"]
    images = {c["image"] for obj in parse(manifest) if obj["kind"] in {"DaemonSet", "Deployment"}
              for c in obj["spec"]["template"]["spec"]["containers"]}  # fmt: skip
    assert images == {f"{published.name}/local-ccm:v{__version__}"}


def test_d18_a_published_version_is_not_replaced(published: Published, tmp_path: Path) -> None:
    """Another chart under the published version (here the same chart compressed with another
    gzip header, a valid chart with other bytes, as a release of a later commit without
    `make bump` would be) is refused before anything is pushed; the same release again is
    published. The registry's chart stays the signed one."""
    assert published.registry.ca_file is not None
    chart_repo = f"{PATH}/charts/local-ccm"
    before = published.registry.manifest(chart_repo, __version__)
    other = tmp_path / "dist"
    shutil.copytree(published.dist, other)
    chart = other / f"local-ccm-{__version__}.tgz"
    chart.write_bytes(gzip.compress(gzip.decompress(chart.read_bytes()), mtime=1))
    sums = other / "SHA256SUMS"
    sums.write_text("".join(
        f"{hashlib.sha256(chart.read_bytes()).hexdigest()}  {chart.name}\n"
        if line.endswith(f"  {chart.name}") else f"{line}\n"
        for line in sums.read_text().splitlines()
    ))  # fmt: skip
    variables = {"REGISTRY": published.name, "COSIGN_KEY": str(published.keys.private),
                 "REGISTRY_CA": str(published.registry.ca_file)}  # fmt: skip
    code, output = make("publish", {**variables, "DIST": str(other)}, tool_env(tmp_path))
    assert code != 0, output
    assert f"{published.name}/charts/local-ccm:{__version__} already holds another chart" in output
    assert "nothing was pushed" in output
    assert "skopeo copy" not in output
    assert "REPLACE=1" in output
    after = published.registry.manifest(chart_repo, __version__)
    assert after.body["layers"] == before.body["layers"]

    code, output = make("publish", {**variables, "DIST": str(published.dist)}, tool_env(tmp_path))
    assert code == 0, output
    assert f"signed {published.name}/charts/local-ccm@" in output
