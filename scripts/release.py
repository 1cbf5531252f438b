"""Write dist/: everything an operator needs to install a release (`make release`).

- the project's wheel and sdist (built offline with the tools of requirements-build.lock);
- the OCI image archive `make image` built (one image index: linux/amd64 and linux/arm64),
  and the index's digest;
- the packaged Helm chart;
- the rendered manifests (`make manifests`) under deploy/, and the Talos file also as
  `local-ccm-talos.yaml` at the top, the release asset name docs/install.md's Talos URL uses
  (a release page's assets are flat: no deploy/talos/ there);
- one SBOM of the image, both platforms (CycloneDX 1.5 JSON): the Debian packages of each
  architecture with versions (an ``all`` package once), the Python distributions with the
  sha256 of the locked wheels of both architectures, the project itself, and each platform's
  manifest digest;
- SHA256SUMS over all of it, in the format ``sha256sum -c`` reads.

Reproducible, like the image: every time stamp in the chart and the sdist is SOURCE_DATE_EPOCH
(the last commit's date), whatever the worktree's file times, so two releases of one commit
have the same SHA256SUMS and a chart pushed again is the chart that was signed.

Needs no network once `make image` has run. Bad input exits 2 with a message.

``--tag vX.Y.Z`` (`make release TAG=...`, the release workflow passes the pushed git tag) first
checks that the tag names this version and that CHANGELOG.md has its ``## [X.Y.Z]`` section:
a tag pushed before `make bump` would otherwise publish the old version's tag again, with the
new content.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
TALOS = Path("deploy") / "talos" / "local-ccm.yaml"
TALOS_ASSET = "local-ccm-talos.yaml"


class ReleaseError(Exception):
    """A missing input or a failed step, reported without a traceback."""


# ---------------------------------------------------------------- pure


def asset_names(version: str, manifests: Sequence[str]) -> frozenset[str]:
    """Every file `release` writes, relative to dist/, for ``version`` and the rendered
    ``manifests`` (paths relative to the repository, as ``deploy/...``): the names the docs
    may point an operator at."""
    return frozenset({
        f"local_ccm-{version}-py3-none-any.whl", f"local_ccm-{version}.tar.gz",
        f"local-ccm-{version}.tgz", f"local-ccm-{version}.oci.tar",
        f"local-ccm-{version}.oci.tar.digest", f"local-ccm-{version}.oci.tar.cdx.json",
        TALOS_ASSET, "SHA256SUMS", *manifests,
    })  # fmt: skip


def tag_problems(tag: str, version: str, changelog: str) -> list[str]:
    """Why a release for the git tag ``tag`` must not be made of ``version``."""
    problems = []
    if tag != f"v{version}":
        problems.append(
            f"the tag {tag} is not this version's (v{version}, src/local_ccm/__init__.py): "
            "`make bump VERSION=x.y.z`, commit, then tag that commit"
        )
    if not re.search(rf"^## \[{re.escape(version)}\]", changelog, re.M):
        problems.append(
            f"CHANGELOG.md has no `## [{version}]` section: move [Unreleased] into it before "
            "tagging"
        )
    return problems


def tree_problems(tag: str, changed: str, tagged: str | None, head: str) -> list[str]:
    """Why the checkout is not the release of ``tag``: ``changed`` is ``git status
    --porcelain --untracked-files=no`` (tracked files changed since the commit, which the image
    and chart would carry under the tagged version), ``tagged`` the commit the tag names here
    (None: no such tag here, as in a rehearsal before tagging), ``head`` the checked-out
    commit."""
    problems = []
    files = [line[3:] for line in changed.splitlines() if line.strip()]
    if files:
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        problems.append(f"uncommitted changes to {shown}: a release is its tagged commit; "
                        "commit or stash them")  # fmt: skip
    if tagged is not None and tagged != head:
        problems.append(f"the tag {tag} names {tagged[:12]}, not the checked-out commit "
                        f"{head[:12]}: check out the tag")  # fmt: skip
    return problems


def git_tree_problems(tag: str) -> list[str]:
    """`tree_problems` of this checkout."""
    git = ["git", "-C", str(REPO)]
    changed = run([*git, "status", "--porcelain", "--untracked-files=no"])
    head = run([*git, "rev-parse", "HEAD"]).strip()
    done = subprocess.run([*git, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    tagged = done.stdout.strip() if done.returncode == 0 else None
    return tree_problems(tag, changed, tagged, head)


def deb_purl(p: Mapping[str, str]) -> str:
    version = quote(p["version"], safe="")
    return f"pkg:deb/debian/{p['name']}@{version}?arch={p['architecture']}&distro=debian-12"


def sbom(listing: Mapping[str, Any], image_name: str) -> dict[str, Any]:
    """CycloneDX 1.5 of the image from `make image`'s package listing; the serial number is
    derived from the image (index) digest, so one image always has one SBOM. Each platform's
    manifest digest is a property of the image component."""
    image = listing["image"]
    components: list[dict[str, Any]] = [
        {"type": "library", "bom-ref": deb_purl(p), "name": p["name"], "version": p["version"],
         "purl": deb_purl(p), "properties": [{"name": "debian:source", "value": p["source"]}]}
        for p in listing["debian"]
    ]  # fmt: skip
    for w in listing["python"]:
        purl = f"pkg:pypi/{w['name']}@{w['version']}"
        entry: dict[str, Any] = {"type": "library", "bom-ref": purl, "name": w["name"],
                                 "version": w["version"], "purl": purl}  # fmt: skip
        if w["sha256"]:
            entry["hashes"] = [{"alg": "SHA-256", "content": h} for h in w["sha256"].split(",")]
        components.append(entry)
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, image['digest'])}",
        "version": 1,
        "metadata": {
            "timestamp": image["created"],
            "component": {
                "type": "container",
                "bom-ref": image_name,
                "name": image_name,
                "version": f"v{image['version']}",
                "hashes": [{"alg": "SHA-256", "content": image["digest"].removeprefix("sha256:")}],
                "properties": [
                    {"name": "org.opencontainers.image.revision", "value": image["revision"]},
                    *(
                        {"name": f"oci:platform:linux/{m['architecture']}", "value": m["digest"]}
                        for m in image.get("manifests", [])
                    ),
                ],
            },
        },
        "components": components,
    }


def normalized_tar_gz(data: bytes, epoch: int) -> bytes:
    """A .tar.gz with the same members, sorted by name, each mtime ``epoch`` (no access or
    change times), and a gzip header without a name or time: the build's clock leaves no
    trace (setuptools writes the sdist with the current time, in the tar and in gzip)."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as source,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for member in sorted(source.getmembers(), key=lambda m: m.name):
            member.mtime = epoch
            member.pax_headers = {k: v for k, v in member.pax_headers.items()
                                  if k not in {"mtime", "atime", "ctime"}}  # fmt: skip
            tar.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def sums(files: Sequence[Path], root: Path) -> str:
    lines = []
    for f in sorted(files):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        lines.append(f"{digest}  {f.relative_to(root).as_posix()}\n")
    return "".join(lines)


# ---------------------------------------------------------------- steps


def run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise ReleaseError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def read_version() -> str:
    init = (REPO / "src" / "local_ccm" / "__init__.py").read_text()
    found = re.search(r"^__version__(?:: *\w+)? *= *[\"']([^\"']+)[\"']", init, re.M)
    if not found:
        raise ReleaseError("no __version__ in src/local_ccm/__init__.py")
    return found.group(1)


def source_date_epoch() -> int:
    """The last commit's date, every time stamp of the release."""
    return int(run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"]).strip())


def python_dists(out: Path, epoch: int) -> list[Path]:
    """Wheel and sdist, offline, with .venv's locked setuptools (no build isolation)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"SOURCE_DATE_EPOCH": str(epoch), "PIP_CONFIG_FILE": os.devnull}
    with tempfile.TemporaryDirectory(prefix="local-ccm-release-") as work:
        # A copy, so the build's egg-info and build/ stay out of the worktree.
        for name in ("pyproject.toml", "README.md", "LICENSE", "src"):
            src, dest = REPO / name, Path(work) / name
            if src.is_dir():
                shutil.copytree(
                    src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
                )
            else:
                shutil.copy2(src, dest)
        run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
             "--outdir", str(out), work], env=env)  # fmt: skip
    for sdist in out.glob("local_ccm-*.tar.gz"):
        sdist.write_bytes(normalized_tar_gz(sdist.read_bytes(), epoch))
    return sorted([*out.glob("local_ccm-*.whl"), *out.glob("local_ccm-*.tar.gz")])


def chart(out: Path, helm: Path, epoch: int) -> Path:
    """`helm package` of a copy of the chart whose files all carry ``epoch``: helm writes each
    file's own mtime into the .tgz, which in a worktree is when git last wrote it."""
    with tempfile.TemporaryDirectory(prefix="local-ccm-helm-") as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home}
        env |= {v: f"{home}/{v}" for v in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
        source = Path(home) / "chart" / "local-ccm"
        shutil.copytree(REPO / "charts" / "local-ccm", source)
        for path in [source, *source.rglob("*")]:
            os.utime(path, (epoch, epoch), follow_symlinks=False)
        run([str(helm), "package", str(source), "-d", str(out)], env=env)
    (packaged,) = out.glob("local-ccm-*.tgz")
    return packaged


def image(out: Path, version: str) -> tuple[list[Path], dict[str, Any]]:
    built = REPO / "build" / "image" / f"local-ccm-{version}.oci.tar"
    listing_path = Path(f"{built}.packages.json")
    if not built.exists() or not listing_path.exists():
        raise ReleaseError(f"no {built.relative_to(REPO)}: run `make image` first")
    copies = []
    for src in (built, Path(f"{built}.digest")):
        shutil.copy2(src, out / src.name)
        copies.append(out / src.name)
    return copies, json.loads(listing_path.read_text())


def manifests(out: Path) -> list[Path]:
    """deploy/ as `make manifests` rendered it (the Talos patch in deploy/talos/), and the
    Talos patch again under its release asset name."""
    found = sorted((REPO / "deploy").rglob("*.yaml"))
    if not (REPO / TALOS).exists():
        raise ReleaseError(f"no {TALOS.as_posix()}: run `make manifests`")
    copies = []
    for src in found:
        dest = out / src.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        copies.append(dest)
    shutil.copy2(REPO / TALOS, out / TALOS_ASSET)
    copies.append(out / TALOS_ASSET)
    return copies


def release(out: Path, helm: Path, tag: str | None = None, *, dirty: bool = False) -> list[Path]:
    """dist/ for this checkout; with ``tag``, only when the checkout is that tag's release
    (``dirty``: a rehearsal from a working tree with changes, whose image says ``-dirty``)."""
    version = read_version()
    if tag is not None:
        problems = tag_problems(tag, version, (REPO / "CHANGELOG.md").read_text())
        problems += [p for p in git_tree_problems(tag)
                     if not (dirty and p.startswith("uncommitted changes"))]  # fmt: skip
        if problems:
            raise ReleaseError("; ".join(problems))
    if not helm.is_file():
        raise ReleaseError(f"no helm binary at {helm}")
    if out.exists():
        if any(out.iterdir()) and not (out / "SHA256SUMS").exists():
            raise ReleaseError(f"{out} is not empty and not an earlier release: not replacing it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    epoch = source_date_epoch()
    files = [*python_dists(out, epoch), chart(out, helm, epoch), *manifests(out)]
    image_files, listing = image(out, version)
    files += image_files
    bom = out / f"local-ccm-{version}.oci.tar.cdx.json"
    bom.write_text(json.dumps(sbom(listing, "local-ccm"), indent=2, sort_keys=True) + "\n")
    files.append(bom)
    (out / "SHA256SUMS").write_text(sums(files, out))
    return [*files, out / "SHA256SUMS"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="default: dist/")
    parser.add_argument("--helm", type=Path, required=True, help="the helm binary")
    parser.add_argument("--tag", help="the git tag being released (vX.Y.Z): checked first")
    parser.add_argument(
        "--allow-dirty", action="store_true", help="with --tag: uncommitted changes too"
    )
    args = parser.parse_args(argv)
    try:
        files = release(args.out, args.helm, args.tag, dirty=args.allow_dirty)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 2
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
