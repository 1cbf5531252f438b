"""Build the project's OCI image on a machine without a container registry (`make image`).

The root file system comes from Debian bookworm's archive through apt: mmdebstrap resolves and
downloads Python 3.11 and its dependencies (signature-checked, the same packages the
distroless python3-debian12 base is made of), and only the packages the three components need
at run time are unpacked (`KEEP`): the C library, OpenSSL, libffi (ctypes, for setns), zlib,
expat, bz2/lzma, CPython 3.11 and the CA bundle. No shell, no dpkg, no apt, no perl. The
project's wheel and requirements.lock are installed with ``pip --require-hashes`` (the pip of
requirements-build.lock, run from its wheel), offline from the wheelhouse `make setup` fills,
and everything is byte-compiled with unchecked-hash .pyc files (the root is read-only at run
time).

Reproducible: every time stamp is SOURCE_DATE_EPOCH (the last commit's date), files are
added in sorted order with numeric owners only, and gzip carries no name or time, so two builds
of one commit from the same Debian packages give the same image digest. A Debian point or
security release changes the packages and so the digest; the versions are recorded in the
image (/var/lib/dpkg/status.d, where image scanners look) and in the SBOM next to the archive.

The downloaded .deb files are cached under ~/.cache/local-ccm-test/image, keyed by the package
list and the UTC day, so a second build on the same day needs no network and takes seconds.
Output: build/image/local-ccm-<version>.oci.tar (a tar of an OCI image layout, for
``skopeo copy oci-archive:...``), its manifest digest in ...oci.tar.digest and the package
list in ...packages.json. Needs root (chroot, owners) and, on a cold cache, Debian's archive.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ocilayout import ImageSpec, canonical_json, image_archive, iso, walk

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# What apt is asked for; it adds the dependencies (dpkg, debconf, readline, sqlite, ...), of
# which only KEEP reach the image.
INCLUDE = ("python3.11-minimal", "libpython3.11-stdlib", "ca-certificates", "base-files", "netbase")
# fmt: off
KEEP = frozenset((
    "base-files", "ca-certificates", "gcc-12-base", "libbz2-1.0", "libc6", "libcrypt1",
    "libexpat1", "libffi8", "libgcc-s1", "liblzma5", "libpython3.11-minimal",
    "libpython3.11-stdlib", "libssl3", "libuuid1", "netbase", "python3.11-minimal", "zlib1g",
))
# fmt: on
PYTHON = "/usr/bin/python3.11"
VENV = "/opt/local-ccm"
SCRIPTS = (
    "local-ccm",
    "node-lifecycle-controller",
    "node-ipam-controller",
    "local-ccm-controller-manager",
)
# The paths the manifests and the upstream node-ipam-controller image use.
ENTRY_POINTS = (*(f"usr/local/bin/{s}" for s in SCRIPTS), "node-ipam-controller")
UID = 65532
# Every process runs with -OO: docstrings and asserts are not loaded (1.1 MiB of RSS per
# process; the code never reads a docstring and its asserts only narrow types).
OPTIMIZE = 2
SOURCE_URL = "https://github.com/local-ccm/local-ccm"
# The standard library modules whose shared libraries are not in KEEP, and what nothing in the
# image imports (tests, IDLE, 2to3, ensurepip, pydoc's topics).
# fmt: off
PYTHON_DROPS = (
    "sqlite3/", "curses/", "dbm/", "idlelib/", "lib2to3/", "ensurepip/", "pydoc_data/",
    "turtledemo/", "tkinter/", "test/", "distutils/", "config-3.11-", "lib-dynload/_sqlite3.",
    "lib-dynload/_curses", "lib-dynload/readline.", "lib-dynload/nis.", "lib-dynload/_dbm.",
    "lib-dynload/_gdbm.",
)
# Prefixes of what stays out: programs, the FHS directories nothing uses, documentation (but
# copyright files: `is_dropped`), locales, glibc's gconv modules (Python has its own codecs).
DROPS = (
    "bin/", "sbin/", "usr/bin/", "usr/sbin/", "usr/libexec/", "usr/games/", "var/", "run/",
    "boot/", "srv/", "media/", "mnt/", "opt/", "usr/local/", "etc/", "usr/include/",
    "usr/lib/mime/", "usr/share/man/", "usr/share/info/", "usr/share/locale/",
    "usr/share/lintian/", "usr/share/bug/", "usr/share/doc-base/", "usr/share/menu/",
    "usr/share/binfmts/", "usr/share/pixmaps/", "usr/share/applications/", "usr/share/gcc/",
    "usr/share/gdb/", "usr/share/python3/", "usr/share/base-files/",
    "usr/share/ca-certificates/", "usr/share/zoneinfo/", "usr/lib/x86_64-linux-gnu/gconv/",
    "usr/lib/aarch64-linux-gnu/gconv/", *(f"usr/lib/python3.11/{d}" for d in PYTHON_DROPS),
)
# Kept although under a dropped directory (a directory that leads to one is kept too).
KEEP_PATHS = (
    "usr/bin/python3.11", "var/lib/dpkg/status.d/", "etc/python3.11/", "etc/protocols",
    "etc/services", "etc/ethertypes", "etc/os-release", "etc/debian_version", "etc/passwd",
    "etc/group", "etc/nsswitch.conf", "etc/ssl/certs/ca-certificates.crt",
)
# fmt: on
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"nonroot:x:{UID}:{UID}:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = f"root:x:0:\nnonroot:x:{UID}:\n"
NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\nprotocols: files\n"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    source: str
    control: str


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class Build:
    version: str
    revision: str
    epoch: int
    arch: str


# ---------------------------------------------------------------- pure decisions


def is_dropped(path: str) -> bool:
    """True for a path (relative to the root, directories ending in ``/``) that stays out of
    the image: programs, documentation but copyright files, caches, what KEEP's packages
    ship for tools that are not in the image."""
    if "/__pycache__/" in f"/{path}":
        return True
    is_dir = path.endswith("/")
    if any(path.startswith(k) or (is_dir and k.startswith(path)) for k in KEEP_PATHS):
        return False
    if path.startswith("usr/share/doc/"):
        rest = path.removeprefix("usr/share/doc/").rstrip("/").split("/")
        return not (len(rest) == 1 or rest[1:] == ["copyright"])
    return any(path.startswith(d) for d in DROPS)


def labels(build: Build) -> dict[str, str]:
    return {
        "org.opencontainers.image.created": iso(build.epoch),
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.revision": build.revision,
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.title": "local-ccm",
        "org.opencontainers.image.version": f"v{build.version}",
    }


def read_lock(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``name -> (version, sha256 hashes)`` of a hash-pinned requirements file."""
    logical = re.sub(r"\\\n", " ", text)
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    for line in logical.splitlines():
        words = line.split("#", 1)[0].split()
        if words and "==" in words[0]:
            name, version = words[0].split("==")
            hashes = frozenset(w.removeprefix("--hash=sha256:") for w in words[1:])
            pins[re.sub(r"[-_.]+", "-", name).lower()] = (version, hashes)
    return pins


def cache_key(arch: str, day: str) -> str:
    text = canonical_json(
        {"suite": SUITE, "mirrors": MIRRORS, "include": INCLUDE, "arch": arch, "day": day}
    )
    return hashlib.sha256(text).hexdigest()[:16]


def control_field(control: str, field: str) -> str:
    found = re.search(rf"^{field}: (.*)$", control, re.MULTILINE)
    return found.group(1).strip() if found else ""


def package(control: str) -> Package:
    name = control_field(control, "Package")
    source = control_field(control, "Source").split(" ")[0] or name
    return Package(
        name,
        control_field(control, "Version"),
        control_field(control, "Architecture"),
        source,
        control,
    )


# ---------------------------------------------------------------- adapters


def run(argv: Sequence[str], **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise SystemExit(
            f"image: {' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return str(done.stdout)


def read_build() -> Build:
    init = (REPO / "src" / "local_ccm" / "__init__.py").read_text()
    found = re.search(r"^__version__(?:: *\w+)? *= *[\"']([^\"']+)[\"']", init, re.M)
    if not found:
        raise SystemExit("image: no __version__ in src/local_ccm/__init__.py")
    git = ["git", "-C", str(REPO)]
    revision = run([*git, "rev-parse", "HEAD"]).strip()
    if run([*git, "status", "--porcelain", "--", "src", "pyproject.toml", "README.md"]).strip():
        revision += "-dirty"
    epoch = int(run([*git, "log", "-1", "--format=%ct"]).strip())
    return Build(found.group(1), revision, epoch, run(["dpkg", "--print-architecture"]).strip())


def cache_root() -> Path:
    base = (
        os.environ.get("LOCAL_CCM_TEST_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "local-ccm-test"
    )
    return Path(base)


def download_debs(arch: str, fresh: bool) -> Path:
    """The .deb files of INCLUDE and their dependencies, from today's archive (cached)."""
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    debs = cache_root() / "image" / f"debs-{arch}-{day}-{cache_key(arch, day)}"
    if (debs / "complete").exists() and not fresh:
        print(f"image: Debian packages from the cache {debs}", file=sys.stderr)
        return debs
    shutil.rmtree(debs, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="local-ccm-mmdebstrap-") as work:
        root = Path(work) / "root"
        run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=extract",
                f"--architectures={arch}",
                "--skip=cleanup/apt/cache",
                f"--include={','.join(INCLUDE)}",
                SUITE,
                str(root),
                *MIRRORS,
            ]
        )
        debs.mkdir(parents=True)
        for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
            shutil.copy2(deb, debs / deb.name)
    (debs / "complete").touch()
    return debs


def read_packages(debs: Path) -> list[Package]:
    found = [package(run(["dpkg-deb", "--field", str(d)])) for d in sorted(debs.glob("*.deb"))]
    missing = KEEP - {p.name for p in found}
    if missing:
        raise SystemExit(f"image: apt did not resolve {sorted(missing)}")
    return sorted(found, key=lambda p: p.name)


def unpack(debs: Path, packages: Iterable[Package], root: Path) -> None:
    for p in packages:
        (deb,) = debs.glob(f"{p.name}_*.deb")
        run(["dpkg-deb", "--extract", str(deb), str(root)])
        status = root / "var/lib/dpkg/status.d" / p.name
        status.parent.mkdir(parents=True, exist_ok=True)
        status.write_text(p.control.rstrip("\n") + "\n")


def prune(root: Path) -> None:
    """Remove the files `is_dropped` names, then the dropped directories left empty."""
    entries = list(walk(root))
    for rel, path in entries:
        if not rel.endswith("/") and is_dropped(rel):
            path.unlink()
    for rel, path in reversed(entries):
        if rel.endswith("/") and is_dropped(rel) and not any(path.iterdir()):
            path.rmdir()


def add_system_files(root: Path) -> None:
    """Users, name service, CA bundle and OpenSSL's default paths, mount points."""
    for rel, text in (
        ("etc/passwd", PASSWD),
        ("etc/group", GROUP),
        ("etc/nsswitch.conf", NSSWITCH),
    ):
        (root / rel).write_text(text)
    # What update-ca-certificates would write: every Mozilla certificate, in sorted order.
    certs = sorted((root / "usr/share/ca-certificates").rglob("*.crt"))
    bundle = root / CA_BUNDLE
    bundle.parent.mkdir(parents=True, exist_ok=True)
    bundle.write_bytes(b"".join(c.read_bytes().rstrip(b"\n") + b"\n" for c in certs))
    ssl_dir = root / "usr/lib/ssl"
    ssl_dir.mkdir(parents=True, exist_ok=True)
    (ssl_dir / "cert.pem").symlink_to(f"/{CA_BUNDLE}")
    (ssl_dir / "certs").symlink_to("/etc/ssl/certs")
    for d in ("dev", "proc", "sys", "root", "tmp", "home/nonroot"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "root").chmod(0o700)
    os.chown(root / "home/nonroot", UID, UID)
    (root / "home/nonroot").chmod(0o700)


def chroot(root: Path, *argv: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "SOURCE_DATE_EPOCH": os.environ["SOURCE_DATE_EPOCH"],
    }
    return run([shutil.which("chroot") or "/usr/sbin/chroot", str(root), *argv], env=env)


def build_wheel(work: Path, epoch: int) -> Path:
    """The project's wheel from the paths the Containerfile copies, with .venv's setuptools of
    requirements-build.lock (no build isolation: that would download the backend)."""
    context = work / "context"
    context.mkdir()
    for src in ("pyproject.toml", "README.md", "src"):
        if (REPO / src).is_dir():
            shutil.copytree(
                REPO / src,
                context / src,
                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
            )
        else:
            shutil.copy2(REPO / src, context / src)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"SOURCE_DATE_EPOCH": str(epoch), "PIP_CONFIG_FILE": os.devnull}
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(work / "dist"),
            str(context),
        ],
        env=env,
    )
    (wheel,) = (work / "dist").glob("local_ccm-*.whl")
    return wheel


def stage_wheels(root: Path, project_wheel: Path) -> str:
    """Copy into the tree the wheels pip installs (each checked against its lock first) and
    the requirement files naming them; returns the pip wheel's path in the tree."""
    wheelhouse = cache_root() / "wheels"
    stage = root / "tmp/wheels"
    stage.mkdir(parents=True)
    build_pins = read_lock((REPO / "requirements-build.lock").read_text())
    pip_version, pip_hashes = build_pins["pip"]
    pip_wheel = wheelhouse / f"pip-{pip_version}-py3-none-any.whl"
    if (
        not pip_wheel.exists()
        or hashlib.sha256(pip_wheel.read_bytes()).hexdigest() not in pip_hashes
    ):
        raise SystemExit(f"image: {pip_wheel} is missing or not the locked one: run `make setup`")
    for wheel in [pip_wheel, *wheelhouse.glob("*.whl")]:
        shutil.copy2(wheel, stage / wheel.name)
    shutil.copy2(project_wheel, stage / project_wheel.name)
    digest = hashlib.sha256(project_wheel.read_bytes()).hexdigest()
    version = project_wheel.name.split("-")[1]
    (stage / "project.txt").write_text(f"local-ccm=={version} --hash=sha256:{digest}\n")
    shutil.copy2(REPO / "requirements.lock", stage / "requirements.lock")
    return f"/tmp/wheels/{pip_wheel.name}"


def install_python(root: Path, project_wheel: Path) -> None:
    pip = stage_wheels(root, project_wheel)
    chroot(root, PYTHON, "-m", "venv", "--without-pip", VENV)
    chroot(
        root,
        f"{VENV}/bin/python",
        f"{pip}/pip",
        "install",
        "--quiet",
        "--no-index",
        "--find-links",
        "/tmp/wheels",
        "--require-hashes",
        "--only-binary=:all:",
        "--no-compile",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-r",
        "/tmp/wheels/requirements.lock",
        "-r",
        "/tmp/wheels/project.txt",
    )
    shutil.rmtree(root / "tmp/wheels")
    for path in (root / VENV.lstrip("/") / "bin").glob("[Aa]ctivate*"):
        path.unlink()
    for entry in ENTRY_POINTS:
        link = root / entry
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"{VENV}/bin/{Path(entry).name}")


def compile_and_check(root: Path) -> None:
    """Byte-compile (unchecked-hash: the interpreter never looks at the source's time stamp,
    so the .pyc are valid on a read-only root whatever the mtimes), then import every
    extension module and run every entry point, so a missing shared library fails here."""
    chroot(
        root,
        PYTHON,
        "-m",
        "compileall",
        "-q",
        "-f",
        # Level 2 is what runs (PYTHONOPTIMIZE=2 below: no docstrings, 1.1 MiB less per
        # process); level 0 for a `python -I` run by hand.
        "-o",
        "0",
        "-o",
        "2",
        "--invalidation-mode",
        "unchecked-hash",
        "/usr/lib/python3.11",
        VENV,
    )
    check = (
        "import importlib, pathlib, ssl, ctypes; ctypes.CDLL(None); "
        "[importlib.import_module(p.name.split('.')[0]) for p in "
        "pathlib.Path('/usr/lib/python3.11/lib-dynload').glob('*.so')]; "
        "ssl.create_default_context()"
    )
    chroot(root, f"{VENV}/bin/python", "-I", "-c", check)
    for entry in ENTRY_POINTS:
        chroot(root, f"/{entry}", "--version")


def python_wheels(root: Path, project_sha256: str) -> list[Wheel]:
    """Every distribution installed in the image's venv, with its wheel's locked hash (the
    project's own: the wheel this build made)."""
    pins = read_lock((REPO / "requirements.lock").read_text())
    pins["local-ccm"] = ("", frozenset({project_sha256}))
    site = next((root / VENV.lstrip("/")).glob("lib/python3*/site-packages"))
    found = []
    for info in sorted(site.glob("*.dist-info")):
        meta = (info / "METADATA").read_text()
        name = re.sub(r"[-_.]+", "-", control_field(meta, "Name")).lower()
        hashes = pins.get(name, ("", frozenset()))[1]
        found.append(Wheel(name, control_field(meta, "Version"), ",".join(sorted(hashes))))
    return found


def packages_listing(build: Build, digest: str, packages: Sequence[Package],
                     wheels: Sequence[Wheel]) -> dict[str, object]:  # fmt: skip
    """What the image was built from: `make release` turns it into the SBOM."""
    image = {"digest": digest, "version": build.version, "revision": build.revision,
             "created": iso(build.epoch), "architecture": build.arch}  # fmt: skip
    debian = [{"name": p.name, "version": p.version, "architecture": p.architecture,
               "source": p.source} for p in packages]  # fmt: skip
    python = [{"name": w.name, "version": w.version, "sha256": w.sha256} for w in wheels]
    return {"image": image, "debian": debian, "python": python}


def image_spec(build: Build) -> ImageSpec:
    env = (f"PATH={VENV}/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1",
           "PYTHONUNBUFFERED=1", f"PYTHONOPTIMIZE={OPTIMIZE}")  # fmt: skip
    return ImageSpec(
        arch=build.arch, created=build.epoch, user=f"{UID}:{UID}", env=env,
        entrypoint=("/usr/local/bin/local-ccm",), labels=labels(build),
        ref=f"v{build.version}", created_by="make image (scripts/image.py)",
    )  # fmt: skip


def write_outputs(out: Path, build: Build, archive: bytes, digest: str,
                  listing: dict[str, object]) -> Path:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"local-ccm-{build.version}.oci.tar"
    path.write_bytes(archive)
    Path(f"{path}.digest").write_text(digest + "\n")
    Path(f"{path}.packages.json").write_text(json.dumps(listing, indent=2, sort_keys=True) + "\n")
    return path


def build_image(out: Path, fresh: bool) -> tuple[Path, str]:
    build = read_build()
    os.environ["SOURCE_DATE_EPOCH"] = str(build.epoch)
    debs = download_debs(build.arch, fresh)
    packages = [p for p in read_packages(debs) if p.name in KEEP]
    with tempfile.TemporaryDirectory(prefix="local-ccm-image-") as work:
        root = Path(work) / "root"
        root.mkdir(mode=0o755)
        unpack(debs, packages, root)
        add_system_files(root)
        prune(root)
        project_wheel = build_wheel(Path(work), build.epoch)
        install_python(root, project_wheel)
        compile_and_check(root)
        wheels = python_wheels(root, hashlib.sha256(project_wheel.read_bytes()).hexdigest())
        image = image_archive(root, image_spec(build))
    print(f"image: layer {image.layer_size / 2**20:.1f} MiB compressed, "
          f"{image.tar_size / 2**20:.1f} MiB as tar", file=sys.stderr)  # fmt: skip
    listing = packages_listing(build, image.digest, packages, wheels)
    return write_outputs(out, build, image.archive, image.digest, listing), image.digest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "build" / "image",
        help="output directory (default: build/image)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="download the Debian packages again instead of using the cache",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("image: needs root (chroot, file owners in the image)", file=sys.stderr)
        return 2
    archive, digest = build_image(args.out, args.fresh)
    print(f"{archive.relative_to(REPO) if archive.is_relative_to(REPO) else archive} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
