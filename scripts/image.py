"""Build the project's OCI image, for linux/amd64 and linux/arm64, on a machine without a
container registry (`make image`).

The root file system comes from Debian bookworm's archive through apt: mmdebstrap resolves and
downloads Python 3.11 and its dependencies (signature-checked, the same packages the
distroless python3-debian12 base is made of), and only the packages the three components need
at run time are unpacked (`KEEP`): the C library, OpenSSL, libffi (ctypes, for setns), zlib,
expat, bz2/lzma, CPython 3.11 and the CA bundle. No shell, no dpkg, no apt, no perl. The
project's wheel and requirements.lock are installed with ``pip --require-hashes`` (the pip of
requirements-build.lock, run from its wheel), offline from the wheelhouse `make setup` fills,
and everything is byte-compiled with unchecked-hash .pyc files (the root is read-only at run
time).

Both architectures are built the same way, without emulation: the interpreter that creates the
venv, runs pip and byte-compiles is this machine's own architecture's Python 3.11 from the same
Debian archive, unpacked into a tool root (its version must equal every image's: a .pyc is the
same on every CPU, and the venv holds no binary but the wheels'). pip installs each
architecture's locked wheels by their platform tags (``--platform manylinux_*_aarch64``), so the
scripts, RECORD files and venv layout are exactly what a native install writes. Only the final
check (every extension module imported, every entry point run) executes the image's own
interpreter: under qemu-user-static for the foreign architecture (binfmt.py registers it).
The two images become one OCI image index, the multi-platform image a registry serves for one
tag.

Reproducible: every time stamp is SOURCE_DATE_EPOCH (the last commit's date), files are
added in sorted order with numeric owners only, and gzip carries no name or time, so two builds
of one commit from the same Debian packages give the same image digest. A Debian point or
security release changes the packages and so the digest; the versions are recorded in the
image (/var/lib/dpkg/status.d, where image scanners look) and in the SBOM next to the archive.

The downloaded .deb files are cached under ~/.cache/local-ccm-test/image, keyed by the package
list, the architecture and the UTC day, so a second build on the same day needs no network.
Each architecture's finished image (config, layer and manifest) is cached there too
(manifests/<arch>-<key>), keyed by the sha256 of everything it is made of: the .deb files of
the image and of the tool root, requirements.lock, the pip wheel, the project's wheel, these
scripts, and the version, revision and commit time written into it; a build whose inputs did
not change reuses it and only writes the archive. ``--fresh`` ignores both caches.
Output: build/image/local-ccm-<version>.oci.tar (a tar of an OCI image layout whose tag
names the image index, for ``skopeo copy oci-archive:...`` and ``ctr images import``), the
index digest in ...oci.tar.digest, and in ...packages.json each platform's manifest digest and
packages. Needs root (chroot, owners, binfmt_misc) and, on a cold cache, Debian's archive.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from binfmt import CPUS, BinfmtError
from binfmt import ensure as ensure_binfmt
from lock import platforms
from ocilayout import (
    ImageSpec,
    Manifest,
    blob,
    canonical_json,
    image_manifest,
    index_archive,
    iso,
    walk,
)

REPO = Path(__file__).resolve().parent.parent
SCRIPT_DIR = Path(__file__).resolve().parent
# The image's platforms, in the order the index lists them.
ARCHES = ("amd64", "arm64")
# What an image's cache key covers of the build's own code.
BUILD_SCRIPTS = ("image.py", "ocilayout.py", "lock.py", "binfmt.py")
# Packages whose versions the tool root's interpreter and every image's must share.
PYTHON_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib")
# Finished images kept per architecture in the cache (older ones are removed).
CACHED_PER_ARCH = 3
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
STAGE = "/tmp/wheels"
# pip refuses --platform unless it installs with --target (a flat directory, not a venv);
# this runs the locked pip with that one check relaxed, so it installs another architecture's
# wheels into the venv exactly as on that architecture. Its argv: the pip wheel, then pip's.
PIP_FOR_PLATFORM = """\
import sys
sys.path.insert(0, sys.argv.pop(1))
from pip._internal.cli import cmdoptions
check = cmdoptions.check_dist_restriction
cmdoptions.check_dist_restriction = lambda options, check_target=False: check(options)
from pip._internal.cli.main import cli
sys.exit(cli())
"""


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
    native: str  # this machine's architecture: the tool root's


@dataclass(frozen=True)
class Tool:
    """The root whose interpreter makes every image's venv and .pyc, and its staged pip."""

    root: Path
    pip: str


@dataclass(frozen=True)
class Platform:
    """One architecture's image and what it was made of."""

    manifest: Manifest
    packages: tuple[dict[str, str], ...]
    wheels: tuple[dict[str, str], ...]


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


def image_key(inputs: dict[str, object]) -> str:
    """The cache key of one architecture's image: the sha256 of everything it is made of."""
    return hashlib.sha256(canonical_json(inputs)).hexdigest()[:32]


def python_mismatches(tool: Sequence[Package], image: Sequence[Package]) -> list[str]:
    """How the tool root's Python differs from an image's (it must not: the tool root's
    interpreter writes the image's venv and .pyc files)."""
    ours = {p.name: p.version for p in tool}
    theirs = {p.name: p.version for p in image}
    return [f"{n}: {ours.get(n)} (tool root) but {theirs.get(n)} ({image[0].architecture})"
            for n in PYTHON_PACKAGES if ours.get(n) != theirs.get(n)]  # fmt: skip


def wheel_platforms(arch: str) -> list[str]:
    """pip's ``--platform`` arguments for the wheels of ``arch`` (requirements.lock's tags)."""
    return [arg for tag in platforms(CPUS[arch]) for arg in ("--platform", tag)]


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
    inputs = ("src", "pyproject.toml", "README.md", "LICENSE")
    if run([*git, "status", "--porcelain", "--", *inputs]).strip():
        revision += "-dirty"
    epoch = int(run([*git, "log", "-1", "--format=%ct"]).strip())
    native = run(["dpkg", "--print-architecture"]).strip()
    if native not in ARCHES:
        raise SystemExit(f"image: builds on {' or '.join(ARCHES)} machines, not {native}")
    return Build(found.group(1), revision, epoch, native)


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
    for src in ("pyproject.toml", "README.md", "LICENSE", "src"):
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


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def locked_pip() -> Path:
    """The pip wheel of requirements-build.lock in the wheelhouse, checked against its lock."""
    pip_version, pip_hashes = read_lock((REPO / "requirements-build.lock").read_text())["pip"]
    pip_wheel = cache_root() / "wheels" / f"pip-{pip_version}-py3-none-any.whl"
    if not pip_wheel.exists() or sha256_file(pip_wheel) not in pip_hashes:
        raise SystemExit(f"image: {pip_wheel} is missing or not the locked one: run `make setup`")
    return pip_wheel


def check_wheelhouse(arches: Iterable[str]) -> None:
    """Every locked wheel of every architecture is in the wheelhouse (pip checks each hash)."""
    wheelhouse = cache_root() / "wheels"
    have = {sha256_file(w) for w in wheelhouse.glob("*.whl")}
    missing = []
    for name, (version, hashes) in sorted(
        read_lock((REPO / "requirements.lock").read_text()).items()
    ):
        if not hashes & have:
            missing.append(f"{name}=={version}")
        for arch in arches:
            tags = (CPUS[arch], "none-any")
            found = [w for w in wheelhouse.glob("*.whl") if sha256_file(w) in hashes
                     and any(t in w.name for t in tags)]  # fmt: skip
            if not found:
                missing.append(f"{name}=={version} ({arch})")
    if missing:
        raise SystemExit(f"image: not in {wheelhouse}: {', '.join(sorted(set(missing)))}: "
                         "run `make setup`")  # fmt: skip


def stage_wheels(tool: Path, project_wheel: Path) -> str:
    """Copy into the tool root the wheels pip installs, the requirement files naming them and
    the wrapper that runs pip for a platform; returns the pip wheel's path in the tool root."""
    pip_wheel = locked_pip()
    stage = tool / STAGE.lstrip("/")
    stage.mkdir(parents=True)
    for wheel in [pip_wheel, *(cache_root() / "wheels").glob("*.whl")]:
        shutil.copy2(wheel, stage / wheel.name)
    shutil.copy2(project_wheel, stage / project_wheel.name)
    digest = sha256_file(project_wheel)
    version = project_wheel.name.split("-")[1]
    (stage / "project.txt").write_text(f"local-ccm=={version} --hash=sha256:{digest}\n")
    shutil.copy2(REPO / "requirements.lock", stage / "requirements.lock")
    (stage / "pip_for_platform.py").write_text(PIP_FOR_PLATFORM)
    return f"{STAGE}/{pip_wheel.name}"


def install_python(tool: Path, target: Path, arch: str, pip: str) -> None:
    """The venv with the locked wheels of ``arch``, made in the tool root at the path it has
    in the image, then moved into ``target``; the entry points' links."""
    venv = tool / VENV.lstrip("/")
    shutil.rmtree(venv, ignore_errors=True)
    chroot(tool, PYTHON, "-m", "venv", "--without-pip", VENV)
    chroot(
        tool,
        f"{VENV}/bin/python",
        f"{STAGE}/pip_for_platform.py",
        pip,
        "install",
        "--quiet",
        "--no-index",
        "--find-links",
        STAGE,
        "--require-hashes",
        "--only-binary=:all:",
        *wheel_platforms(arch),
        "--no-compile",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-r",
        f"{STAGE}/requirements.lock",
        "-r",
        f"{STAGE}/project.txt",
    )
    for path in (venv / "bin").glob("[Aa]ctivate*"):
        path.unlink()
    dest = target / VENV.lstrip("/")
    dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    dest.parent.chmod(0o755)
    shutil.move(venv, dest)
    for entry in ENTRY_POINTS:
        link = target / entry
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"{VENV}/bin/{Path(entry).name}")


def compile_tree(tool: Path, target: Path) -> None:
    """Byte-compile ``target`` (a directory inside the tool root) with the tool root's
    interpreter, recording the paths the files have in the image (unchecked-hash: the
    interpreter never looks at the source's time stamp, so the .pyc are valid on a read-only
    root whatever the mtimes)."""
    inside = f"/{target.relative_to(tool).as_posix()}"
    chroot(
        tool,
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
        "-s",
        inside,
        "-p",
        "/",
        f"{inside}/usr/lib/python3.11",
        f"{inside}{VENV}",
    )


def check_image_root(root: Path, arch: str) -> None:
    """Import every extension module and run every entry point with the image's own
    interpreter (under qemu for a foreign ``arch``), so a missing shared library or a wheel
    of the wrong architecture fails here."""
    try:
        ensure_binfmt(arch)
    except BinfmtError as exc:
        raise SystemExit(f"image: cannot run the {arch} image's interpreter: {exc}") from exc
    check = (
        "import importlib, pathlib, platform, ssl, ctypes; ctypes.CDLL(None); "
        "[importlib.import_module(p.name.split('.')[0]) for p in "
        "pathlib.Path('/usr/lib/python3.11/lib-dynload').glob('*.so')]; "
        "import yaml, cryptography.hazmat.bindings._rust, _cffi_backend; "
        "ssl.create_default_context(); print(platform.machine())"
    )
    machine = chroot(root, f"{VENV}/bin/python", "-I", "-c", check).strip()
    if machine != CPUS[arch]:
        raise SystemExit(f"image: the {arch} image's interpreter says it runs on {machine}")
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


def packages_listing(build: Build, digest: str,
                     images: Sequence[Platform]) -> dict[str, object]:  # fmt: skip
    """What the image was built from: `make release` turns it into the SBOM. ``debian`` holds
    every platform's packages (an ``all`` package once), ``python`` every distribution once
    (its hashes are the lock's, both architectures')."""
    manifests = [{"architecture": p.manifest.arch, "digest": p.manifest.digest}
                 for p in images]  # fmt: skip
    image = {"digest": digest, "version": build.version, "revision": build.revision,
             "created": iso(build.epoch), "manifests": manifests}  # fmt: skip
    debian = {(d["name"], d["architecture"]): d for p in images for d in p.packages}
    python = {w["name"]: w for p in images for w in p.wheels}
    return {"image": image, "debian": [debian[k] for k in sorted(debian)],
            "python": [python[k] for k in sorted(python)]}  # fmt: skip


def image_spec(build: Build, arch: str) -> ImageSpec:
    env = (f"PATH={VENV}/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1",
           "PYTHONUNBUFFERED=1", f"PYTHONOPTIMIZE={OPTIMIZE}")  # fmt: skip
    return ImageSpec(
        arch=arch, created=build.epoch, user=f"{UID}:{UID}", env=env,
        entrypoint=("/usr/local/bin/local-ccm",), labels=labels(build),
        ref=f"v{build.version}", created_by="make image (scripts/image.py)",
    )  # fmt: skip


def deb_hashes(debs: Path, packages: Iterable[Package]) -> dict[str, str]:
    return {p.name: sha256_file(next(debs.glob(f"{p.name}_*.deb"))) for p in packages}


def image_inputs(build: Build, arch: str, debs: Mapping[str, Path],
                 packages: Mapping[str, Sequence[Package]],
                 project_wheel: Path) -> dict[str, object]:  # fmt: skip
    """Everything one architecture's image is made of, for its cache key."""
    native = build.native
    return {
        "arch": arch, "version": build.version, "revision": build.revision, "epoch": build.epoch,
        "debs": deb_hashes(debs[arch], packages[arch]), "tool": native,
        "tool-debs": deb_hashes(debs[native], packages[native]),
        "requirements.lock": sha256_file(REPO / "requirements.lock"),
        "pip": sha256_file(locked_pip()), "project": sha256_file(project_wheel),
        "scripts": {n: sha256_file(SCRIPT_DIR / n) for n in BUILD_SCRIPTS},
    }  # fmt: skip


def manifest_cache() -> Path:
    return cache_root() / "image" / "manifests"


BLOB_FILES = ("config.json", "layer.tar.gz", "manifest.json")


def load_platform(entry: Path, arch: str) -> Platform | None:
    """A finished image from the cache, or None."""
    if not (entry / "complete").exists():
        return None
    meta = json.loads((entry / "platform.json").read_text())
    config, layer, manifest = (blob((entry / name).read_bytes()) for name in BLOB_FILES)
    if manifest.digest != meta["digest"]:
        return None
    entry.touch()  # recently used: pruned last
    return Platform(Manifest(arch, config, layer, manifest, int(meta["tar_size"])),
                    tuple(meta["debian"]), tuple(meta["python"]))  # fmt: skip


def save_platform(entry: Path, image: Platform) -> None:
    """Store a finished image, then keep only the newest CACHED_PER_ARCH of its arch."""
    tmp = entry.with_name(f"{entry.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, b in zip(BLOB_FILES, image.manifest.blobs, strict=True):
        (tmp / name).write_bytes(b.data)
    meta = {"digest": image.manifest.digest, "tar_size": image.manifest.tar_size,
            "debian": list(image.packages), "python": list(image.wheels)}  # fmt: skip
    (tmp / "platform.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (tmp / "complete").touch()
    shutil.rmtree(entry, ignore_errors=True)
    tmp.rename(entry)
    arch = image.manifest.arch
    kept = sorted(entry.parent.glob(f"{arch}-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[CACHED_PER_ARCH:]:
        shutil.rmtree(old, ignore_errors=True)


def make_root(root: Path, debs: Path, packages: Sequence[Package]) -> Path:
    """The Debian part of a root: the packages unpacked, system files, what stays out gone."""
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    unpack(debs, packages, root)
    add_system_files(root)
    prune(root)
    return root


def build_platform(tool: Tool, build: Build, arch: str, *, debs: Path,
                   packages: Sequence[Package], project_wheel: Path) -> Platform:  # fmt: skip
    """One architecture's image, its root made inside the tool root."""
    target = make_root(tool.root / f"image-{arch}", debs, packages)
    install_python(tool.root, target, arch, tool.pip)
    compile_tree(tool.root, target)
    check_image_root(target, arch)
    wheels = python_wheels(target, sha256_file(project_wheel))
    manifest = image_manifest(target, image_spec(build, arch))
    shutil.rmtree(target)
    listed = tuple({"name": p.name, "version": p.version, "architecture": p.architecture,
                    "source": p.source} for p in packages)  # fmt: skip
    python = tuple({"name": w.name, "version": w.version, "sha256": w.sha256} for w in wheels)
    return Platform(manifest, listed, python)


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
    locked_pip()
    check_wheelhouse(ARCHES)
    debs = {arch: download_debs(arch, fresh) for arch in ARCHES}
    packages = {arch: [p for p in read_packages(debs[arch]) if p.name in KEEP] for arch in ARCHES}
    problems = [m for a in ARCHES for m in python_mismatches(packages[build.native], packages[a])]
    if problems:
        raise SystemExit("image: the architectures' Python packages differ (Debian's archive "
                         "mid-update? build again later with --fresh): "
                         + "; ".join(problems))  # fmt: skip
    images: list[Platform] = []
    with tempfile.TemporaryDirectory(prefix="local-ccm-image-") as work:
        project_wheel = build_wheel(Path(work), build.epoch)
        tool: Tool | None = None
        for arch in ARCHES:
            inputs = image_inputs(build, arch, debs, packages, project_wheel)
            entry = manifest_cache() / f"{arch}-{image_key(inputs)}"
            image = None if fresh else load_platform(entry, arch)
            if image is not None:
                print(f"image: {arch} from the cache {entry}", file=sys.stderr)
            else:
                if tool is None:
                    root = make_root(
                        Path(work) / "tool", debs[build.native], packages[build.native]
                    )
                    tool = Tool(root, stage_wheels(root, project_wheel))
                image = build_platform(tool, build, arch, debs=debs[arch],
                                       packages=packages[arch],
                                       project_wheel=project_wheel)  # fmt: skip
                save_platform(entry, image)
            m = image.manifest
            print(f"image: linux/{arch} {m.digest}: layer {m.layer.size / 2**20:.1f} MiB "
                  f"compressed, {m.tar_size / 2**20:.1f} MiB as tar", file=sys.stderr)  # fmt: skip
            images.append(image)
    index = index_archive([i.manifest for i in images], image_spec(build, build.native))
    listing = packages_listing(build, index.digest, images)
    return write_outputs(out, build, index.archive, index.digest, listing), index.digest


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
        help="download the Debian packages again and rebuild every platform's image "
        "instead of using the cache",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("image: needs root (chroot, file owners in the image, binfmt_misc)", file=sys.stderr)
        return 2
    archive, digest = build_image(args.out, args.fresh)
    print(f"{archive.relative_to(REPO) if archive.is_relative_to(REPO) else archive} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
