"""What can be checked of the image without an image builder (spec/deploy.md §1, D12).

No image builder can run here (docs/install.md, "Building the image"), so the image's
``/opt/local-ccm`` is made the way the Containerfile's builder stage makes it, offline: the
project's wheel built from exactly the paths the Containerfile copies, a virtual environment of
the system's Python 3.11 (Debian's, as in the builder), ``requirements.lock`` installed with
``--require-hashes --only-binary=:all:`` from the wheelhouse ``make setup`` fills, the wheel
installed with ``--no-deps``, pip removed, everything byte-compiled. The entry points are the
Containerfile's symlinks; they run as uid/gid 65532 with no capability, no credentials and a
read-only root file system (a private mount namespace with ``/`` remounted read-only).

Not checked here (needs the image): the distroless base itself, ``/bin/sh`` being absent, the
OCI labels as built, the arm64 variant (its wheels are only hash-pinned: see
tests/unit/test_requirements_lock.py), the image's total size.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm import __version__
from tests.support.agent_scenarios import a01_network
from tests.support.binaries import cache_dir
from tests.support.chart import CHART, REPO
from tests.support.netns import NetnsFactory

# The module fixture builds the wheel and the virtual environment: about 20 s on an idle
# 2-core machine, more next to other test runs.
pytestmark = pytest.mark.timeout(180)

SCRIPTS = ("local-ccm", "node-lifecycle-controller", "node-ipam-controller")
# The Containerfile's symlinks, relative to the image root.
ENTRY_POINTS = (*(f"usr/local/bin/{s}" for s in SCRIPTS), "node-ipam-controller")
UID = 65532
UNPRIVILEGED = (
    "setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--inh-caps=-all",
    "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
)  # fmt: skip
SYSTEM_PYTHON = "/usr/bin/python3"
WHEELHOUSE = cache_dir(os.environ) / "wheels"
MIB = 1024 * 1024
# spec/deploy.md §1.1.8: the whole image ≤ 100 MiB uncompressed. The distroless project publishes
# no size for python3-debian12; 52 MiB is the sum of Debian's Installed-Size of its package set
# (bookworm, amd64; docs/install.md), an over-estimate since distroless drops the docs.
IMAGE_BUDGET_MIB = 100
BASE_ESTIMATE_MIB = 52


def project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def containerfile() -> str:
    return (REPO / "Containerfile").read_text()


def build_context_paths(text: str) -> list[str]:
    """The sources of every ``COPY`` that reads the build context (not ``--from=``)."""
    copies = (line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY "))
    return [src for args in copies if not args[0].startswith("--from") for src in args]


def run(argv: list[str], what: str) -> None:
    """Run a build step offline, with no pip configuration of this machine; fail with its output
    and the remedy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"{what} failed (run `make setup` if the wheelhouse or .venv is stale):\n"
                    f"$ {shlex.join(argv)}\n{done.stdout}{done.stderr}", pytrace=False)  # fmt: skip


def build_wheel(work: Path) -> Path:
    """The project's wheel from exactly what the Containerfile copies, with this venv's
    setuptools (no build isolation: it would fetch the build backend from PyPI)."""
    context = work / "context"
    context.mkdir(parents=True)
    for src in build_context_paths(containerfile()):
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, context / src, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / src, context / src)
    dist = work / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(dist), str(context)], "wheel build")  # fmt: skip
    return next(dist.glob("local_ccm-*.whl"))


def install_like_containerfile(venv: Path, wheel: Path) -> None:
    """The builder stage's RUN steps, offline from the wheelhouse."""
    pip = str(venv / "bin" / "pip")
    run([SYSTEM_PYTHON, "-m", "venv", str(venv)], "python3 -m venv")
    run([pip, "install", "--no-cache-dir", "--require-hashes", "--only-binary=:all:",
         "--no-index", "--find-links", str(WHEELHOUSE), "-r", str(REPO / "requirements.lock")],
        "installing requirements.lock from the wheelhouse")  # fmt: skip
    run([pip, "install", "--no-cache-dir", "--no-deps", "--no-index", str(wheel)], "wheel install")
    run([pip, "uninstall", "-y", "pip", "setuptools", "wheel"], "pip uninstall")
    for path in [*venv.glob("bin/activate*"), *venv.glob("bin/pip*")]:
        path.unlink()
    run([str(venv / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", str(venv)],
        "compileall")  # fmt: skip


def link_entry_points(root: Path, venv: Path) -> None:
    for entry in ENTRY_POINTS:
        link = root / entry
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(venv / "bin" / Path(entry).name)


@pytest.fixture(scope="module")
def image_root() -> Iterator[Path]:
    """The image's own files (/opt/local-ccm and the entry-point symlinks) under a temporary
    root readable by uid 65532 (pytest's own temporary directories are private to root)."""
    if not WHEELHOUSE.is_dir():
        pytest.fail(f"no wheelhouse at {WHEELHOUSE}: run `make setup`", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="local-ccm-image-"))
    root.chmod(0o755)
    try:
        venv = root / "opt" / "local-ccm"
        install_like_containerfile(venv, build_wheel(root / "build"))
        shutil.rmtree(root / "build")
        link_entry_points(root, venv)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_read_only(argv: list[str], netns: str | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` as uid 65532 without capabilities, credentials or a writable root (inside the
    network namespace ``netns`` if given)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    inner = " ".join(
        ["mount --make-rprivate / && mount -o remount,bind,ro / && exec",
         *UNPRIVILEGED, "env -i PATH=/usr/bin:/bin HOME=/nonexistent", *argv]
    )  # fmt: skip
    return subprocess.run([*prefix, "unshare", "-m", "sh", "-c", inner], capture_output=True,
                          text=True,
                          timeout=60, check=False)  # fmt: skip


def tree_bytes(top: Path) -> int:
    """Apparent size of every file, directory and symlink under ``top`` (what a layer's tar
    holds, less headers)."""
    return sum(p.lstat().st_size for p in [top, *top.rglob("*")])


def stale_or_missing_pyc(source: Path, magic: bytes) -> bool:
    """True when the import system would have to compile ``source`` again (and, on a read-only
    root, do so on every start): no cached file, or a header for another interpreter or
    another version of the source."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    if not cached.exists():
        return True
    header, stat = cached.read_bytes()[:16], source.stat()
    expected = (magic + bytes(4) + (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little"))  # fmt: skip
    return header != expected


def test_d12_console_scripts_have_the_documented_names() -> None:
    scripts = project()["scripts"]
    assert isinstance(scripts, dict)
    assert set(scripts) == set(SCRIPTS)
    text = containerfile()
    for name in SCRIPTS:
        assert f"/usr/local/bin/{name}" in text or "/usr/local/bin/$b" in text
    assert "/out/node-ipam-controller" in text
    assert 'ENTRYPOINT ["/usr/local/bin/local-ccm"]' in text
    assert "USER 65532:65532" in text
    assert "--require-hashes" in text
    assert re.search(r"org\.opencontainers\.image\.licenses=\"Apache-2\.0\"", text)


def test_d12_every_path_the_containerfile_copies_exists() -> None:
    paths = build_context_paths(containerfile())
    assert {"requirements.lock", "pyproject.toml", "src"} <= set(paths), paths
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_d12_containerfile_has_no_open_todo_of_the_deployment_issue() -> None:
    assert "TODO(#6)" not in containerfile()


def test_d12_versions_agree() -> None:
    chart = (CHART / "Chart.yaml").read_text()
    version = re.search(r"^version: (\S+)$", chart, re.MULTILINE)
    app_version = re.search(r"^appVersion: (\S+)$", chart, re.MULTILINE)
    assert version
    assert app_version
    # pyproject.toml reads the version from the package (setuptools attr), the one definition.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in project()["dynamic"]  # type: ignore[operator]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "local_ccm.__version__"}
    assert __version__ == version.group(1)
    assert app_version.group(1) == f"v{__version__}"


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_d12_entry_points_print_their_version(image_root: Path, entry: str) -> None:
    done = run_read_only([str(image_root / entry), "--version"])
    assert done.returncode == 0, done.stderr
    assert __version__ in done.stdout + done.stderr


def test_d12_installed_tree_has_no_pip_and_only_locked_distributions(image_root: Path) -> None:
    venv = image_root / "opt" / "local-ccm"
    site = next(venv.glob("lib/python3*/site-packages"))
    installed = {re.sub(r"-[^-]+\.dist-info$", "", d.name).lower().replace("_", "-")
                 for d in site.glob("*.dist-info")}  # fmt: skip
    locked = set(re.findall(r"^([a-z0-9-]+)==", (REPO / "requirements.lock").read_text(), re.M))
    assert installed == locked | {"local-ccm"}
    assert not list(venv.glob("bin/pip*"))
    assert not (site / "pip").exists()


def test_d12_installed_tree_is_byte_compiled_for_the_system_python(image_root: Path) -> None:
    # A read-only root cannot take __pycache__ writes: every module must already have a
    # valid .pyc for the runtime's interpreter (Debian's 3.11, the same as distroless').
    magic = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import importlib.util; print(importlib.util.MAGIC_NUMBER.hex())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    sources = list((image_root / "opt" / "local-ccm").rglob("*.py"))
    assert sources
    assert [s for s in sources if stale_or_missing_pyc(s, bytes.fromhex(magic))] == []


def test_d12_installed_tree_fits_the_image_budget(
    image_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size = tree_bytes(image_root)
    with capsys.disabled():
        print(f"\nD12: installed tree (/opt/local-ccm + entry points) {size / MIB:.1f} MiB; "
              f"+ distroless base estimate {BASE_ESTIMATE_MIB} MiB "
              f"= {size / MIB + BASE_ESTIMATE_MIB:.1f} MiB of {IMAGE_BUDGET_MIB} MiB")  # fmt: skip
    assert size / MIB + BASE_ESTIMATE_MIB <= IMAGE_BUDGET_MIB


@pytest.mark.netns
def test_d12_detect_runs_read_only_unprivileged_without_credentials(
    image_root: Path, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)  # a Node's interfaces: 192.0.2.10/24 and 198.51.100.10/24
    argv = [str(image_root / "usr/local/bin/local-ccm"), "detect", "--external-ip-target=",
            "--internal-ip-cidrs=0.0.0.0/0"]  # fmt: skip
    done = run_read_only(argv, ns.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"InternalIP\s+ipv4\s+192\.0\.2\.10", done.stdout), done.stdout
    assert "Read-only file system" not in done.stderr
    assert "Traceback" not in done.stderr
