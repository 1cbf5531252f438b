"""`make release`'s script writes every artefact an operator installs from, and SHA256SUMS
verifies them with ``sha256sum -c`` (offline, from the image `make test` built first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm import __version__
from tests.support.chart import REPO
from tests.support.oci import image_archive
from tests.unit.test_release_assets import load_release

# Wheel and sdist builds, helm package, copying the image: about 15 s on a busy 2-core machine.
pytestmark = pytest.mark.timeout(180)
SCRIPT = REPO / "scripts" / "release.py"


def release(out: Path, helm: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), "--out", str(out), "--helm", str(helm), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=150, check=False)


@pytest.fixture(scope="module")
def dist(helm_binary: Path) -> Iterator[Path]:
    if not image_archive().exists():
        pytest.fail("no image archive: run `make image` (`make test` does)", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="local-ccm-dist-") as work:
        out = Path(work) / "dist"
        done = release(out, helm_binary)
        assert done.returncode == 0, done.stdout + done.stderr
        yield out


def test_d17_release_has_every_artefact(dist: Path) -> None:
    v = __version__
    expected = {
        f"local_ccm-{v}-py3-none-any.whl", f"local_ccm-{v}.tar.gz", f"local-ccm-{v}.tgz",
        f"local-ccm-{v}.oci.tar", f"local-ccm-{v}.oci.tar.digest",
        f"local-ccm-{v}.oci.tar.cdx.json", "deploy/local-ccm.yaml",
        "deploy/talos/local-ccm.yaml", "local-ccm-talos.yaml", "SHA256SUMS",
    }  # fmt: skip
    present = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    assert expected <= present, expected - present
    rendered = [p.relative_to(REPO).as_posix() for p in (REPO / "deploy").rglob("*.yaml")]
    assert set(rendered) <= present
    # The list the docs are checked against (tests/unit/test_release_assets.py) is exactly what
    # a release writes.
    assert present == load_release().asset_names(v, rendered)
    talos = (REPO / "deploy" / "talos" / "local-ccm.yaml").read_bytes()
    assert (dist / "local-ccm-talos.yaml").read_bytes() == talos


def test_d17_sha256sums_covers_everything_and_verifies(dist: Path) -> None:
    done = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=dist,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    listed = {line.split("  ", 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines()}
    files = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()}
    assert listed == files - {"SHA256SUMS"}


def test_d17_two_releases_of_one_commit_are_identical(
    dist: Path, helm_binary: Path, tmp_path: Path
) -> None:
    """The chart and the sdist carry the commit's time, not the worktree's file times or the
    clock's: a chart packaged again (a second `make release`, another clone) is the one that
    was signed. The worktree's times are moved forward first, as a checkout does."""
    later = int(os.stat(SCRIPT).st_mtime) + 3600
    for path in (REPO / "charts" / "local-ccm" / "Chart.yaml", REPO / "README.md"):
        os.utime(path, (later, later))
    done = release(tmp_path / "dist", helm_binary)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "dist" / "SHA256SUMS").read_text() == (dist / "SHA256SUMS").read_text()


def test_d17_sbom_names_the_image_its_debian_packages_and_locked_wheels(dist: Path) -> None:
    bom = json.loads((dist / f"local-ccm-{__version__}.oci.tar.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX"
    digest = (dist / f"local-ccm-{__version__}.oci.tar.digest").read_text().strip()
    assert bom["metadata"]["component"]["hashes"][0]["content"] == digest.removeprefix("sha256:")
    purls = {c["purl"].split("@")[0]: c for c in bom["components"]}
    for deb in ("libc6", "libssl3", "python3.11-minimal", "libpython3.11-stdlib"):
        assert f"pkg:deb/debian/{deb}" in purls, deb
    for wheel in ("pyyaml", "cryptography", "icmplib"):
        assert purls[f"pkg:pypi/{wheel}"]["hashes"], wheel
    assert "pkg:pypi/local-ccm" in purls
    # One SBOM for both platforms: each architecture's packages, each platform's manifest.
    libc = {c["purl"].split("arch=")[1].split("&")[0] for c in bom["components"]
            if c["purl"].startswith("pkg:deb/debian/libc6@")}  # fmt: skip
    assert libc == {"amd64", "arm64"}
    assert len({c["bom-ref"] for c in bom["components"]}) == len(bom["components"])
    listing = json.loads(Path(f"{image_archive()}.packages.json").read_text())
    properties = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    for manifest in listing["image"]["manifests"]:
        platform = f"oci:platform:linux/{manifest['architecture']}"
        assert properties[platform] == manifest["digest"]
    assert {"oci:platform:linux/amd64", "oci:platform:linux/arm64"} <= set(properties)


def test_d17_release_without_helm_is_a_clear_error(tmp_path: Path) -> None:
    done = release(tmp_path / "dist", tmp_path / "no-helm")
    assert done.returncode == 2
    assert "no helm binary" in done.stderr
    assert "Traceback" not in done.stderr


def test_d17_a_tag_of_another_version_releases_nothing(helm_binary: Path, tmp_path: Path) -> None:
    later = f"v{__version__}1"  # 0.4.0 -> v0.4.01: a tag of another version
    done = release(tmp_path / "dist", helm_binary, "--tag", later)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"is not this version's (v{__version__}" in done.stderr
    assert not (tmp_path / "dist").exists()
    # --allow-dirty: a working tree under test may have changes; the clean-tree rule is the
    # unit test's (test_release_assets.py).
    done = release(tmp_path / "dist", helm_binary, "--tag", f"v{__version__}", "--allow-dirty")
    assert done.returncode == 0, done.stdout + done.stderr


def test_d17_wheel_and_sdist_carry_the_license(dist: Path) -> None:
    v = __version__
    with zipfile.ZipFile(dist / f"local_ccm-{v}-py3-none-any.whl") as wheel:
        names = set(wheel.namelist())
        assert f"local_ccm-{v}.dist-info/licenses/LICENSE" in names, sorted(names)
        metadata = wheel.read(f"local_ccm-{v}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    with tarfile.open(dist / f"local_ccm-{v}.tar.gz") as sdist:
        assert f"local_ccm-{v}/LICENSE" in sdist.getnames()
