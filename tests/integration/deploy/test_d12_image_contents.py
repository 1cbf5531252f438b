"""The image itself: the archive `make image` built (`make test` builds it first), read by
skopeo, unpacked by umoci and run by runc as uid 65532 with a read-only root, no capability
and no new privileges (tests/support/oci.py).

The archive's tag is an image index for linux/amd64 and linux/arm64: its digest is the one in
``.digest``, each platform's config says its architecture, and the arm64 image is unpacked and
run too, under qemu-user-static (registered with binfmt_misc by scripts/binfmt.py): its
``python3.11`` is an AArch64 ELF file, its entry point prints this version, and ``local-ccm
detect`` in a network namespace with only ``lo`` reports that situation and the arm64 CPU.

Checked here: the labels and user of the image config; no shell, package manager or pip in
the root; only the locked distributions installed; every module byte-compiled with
unchecked-hash .pyc (valid on a read-only root); the size budget; every entry point's
``--version``; ``local-ccm detect`` in a network namespace the test made; and the image's
agent initialising a Node registered like a kubelet with ``--cloud-provider=external`` on
the test's real kube-apiserver. The Containerfile (for builders with a registry) is checked
statically: its entry points, user, labels and hash-locked installs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from local_ccm import __version__
from local_ccm.kube.client import Client
from tests.support.agent_process import AGENT_UID, agent_for_node
from tests.support.agent_scenarios import A01_ADDRESSES, A01_ARGS, a01_network, initialised, pairs
from tests.support.chart import CHART, REPO, ShippedRbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.oci import (
    ContainerAgent,
    Runc,
    Unpacked,
    container_config,
    host_arch,
    image_archive,
    read_archive,
    run_tool,
    unpack,
)
from tests.support.waiting import eventually

# skopeo + umoci unpack the image once per module: a few seconds.
pytestmark = pytest.mark.timeout(180)

SCRIPTS = (
    "local-ccm",
    "node-lifecycle-controller",
    "node-ipam-controller",
    "local-ccm-controller-manager",
)
# The paths the manifests and upstream node-ipam-controller use, relative to the image root.
ENTRY_POINTS = (*(f"usr/local/bin/{s}" for s in SCRIPTS), "node-ipam-controller")
MIB = 1024 * 1024
# The budget for the compressed image (what a Node pulls) and for the unpacked root.
COMPRESSED_BUDGET_MIB = 60
UNPACKED_BUDGET_MIB = 100
NO_CAPS = "0000000000000000"
PLATFORMS = {"amd64": {"architecture": "amd64", "os": "linux"},
             "arm64": {"architecture": "arm64", "os": "linux", "variant": "v8"}}  # fmt: skip
# ELF e_machine of each architecture's programs (EM_X86_64, EM_AARCH64).
ELF_MACHINE = {"amd64": 62, "arm64": 183}


def binfmt() -> ModuleType:
    """scripts/binfmt.py, which `make image` uses to run the arm64 interpreter."""
    spec = importlib.util.spec_from_file_location("binfmt", REPO / "scripts" / "binfmt.py")
    assert spec
    assert spec.loader
    module = sys.modules.setdefault("binfmt", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", path
    assert head[5] == 1, "little-endian"
    return int.from_bytes(head[18:20], "little")


def project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def containerfile() -> str:
    return (REPO / "Containerfile").read_text()


def build_context_paths(text: str) -> list[str]:
    """The sources of every ``COPY`` that reads the build context (not ``--from=``)."""
    copies = (line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY "))
    return [src for args in copies if not args[0].startswith("--from") for src in args]


@pytest.fixture(scope="module")
def image() -> Iterator[Unpacked]:
    """The image of this version, unpacked under a root-owned 0755 directory (the container's
    uid must traverse it; pytest's own temporary directories are private to root)."""
    archive = image_archive()
    if not archive.exists():
        pytest.fail(f"no {archive.relative_to(REPO)}: run `make image` (`make test` does)",
                    pytrace=False)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="local-ccm-oci-") as work:
        Path(work).chmod(0o755)
        yield unpack(archive, Path(work))


@pytest.fixture(scope="module")
def foreign() -> Iterator[Unpacked]:
    """The image of the platform this machine is not (arm64 on an amd64 machine), unpacked,
    with qemu registered to run it."""
    archive = image_archive()
    if not archive.exists():
        pytest.fail(f"no {archive.relative_to(REPO)}: run `make image` (`make test` does)",
                    pytrace=False)  # fmt: skip
    (arch,) = set(PLATFORMS) - {host_arch()}
    scripts = binfmt()
    try:
        scripts.ensure(arch)
    except scripts.BinfmtError as exc:
        pytest.fail(f"cannot run {arch} programs here: {exc}", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="local-ccm-oci-") as work:
        Path(work).chmod(0o755)
        yield unpack(archive, Path(work), arch=arch)


@pytest.fixture(scope="module")
def runc() -> Iterator[Runc]:
    with tempfile.TemporaryDirectory(prefix="local-ccm-runc-") as state:
        yield Runc(Path(state))


def inspect(image: Unpacked, what: str) -> dict[str, object]:
    """skopeo's view of the image: its ``--config`` or its ``--raw`` manifest."""
    argv = ["skopeo", "inspect", what, f"oci:{image.layout}"]
    return json.loads(run_tool(argv))  # type: ignore[no-any-return]


def run_container(runc: Runc, image: Unpacked, args: list[str],
                  netns: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    config = container_config(image.config, rootfs=image.rootfs, args=args,
                              netns_path=f"/run/netns/{netns}" if netns else None)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="local-ccm-bundle-") as parent:
        done = runc.run(Path(parent), config)
    assert "Traceback" not in done.stderr
    return done


def run_image(runc: Runc, image: Unpacked, args: list[str], netns: str | None = None) -> str:
    done = run_container(runc, image, args, netns)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


# ---------------------------------------------------------------- the Containerfile


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
    assert text.count("--require-hashes") >= 2, "runtime and build locks both hash-checked"
    assert re.search(r"org\.opencontainers\.image\.licenses=\"Apache-2\.0\"", text)


def test_d12_containerfile_pins_both_base_images_by_digest() -> None:
    bases = re.findall(r"^ARG (?:BUILDER|RUNTIME)_IMAGE=(\S+)$", containerfile(), re.MULTILINE)
    assert len(bases) == 2, bases
    assert all(re.fullmatch(r"\S+@sha256:[0-9a-f]{64}", b) for b in bases), bases


def test_d12_every_path_the_containerfile_copies_exists() -> None:
    paths = build_context_paths(containerfile())
    assert {"requirements.lock", "requirements-build.lock", "pyproject.toml", "src"} <= set(paths)
    assert [p for p in paths if not (REPO / p).exists()] == []


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


# ---------------------------------------------------------------- the image


def test_d12_image_config_has_the_user_entry_point_and_labels(image: Unpacked) -> None:
    config = inspect(image, "--config")["config"]
    assert isinstance(config, dict)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/usr/local/bin/local-ccm"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == f"v{__version__}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.title"] == "local-ccm"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", labels["org.opencontainers.image.revision"])
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["org.opencontainers.image.created"]
    )


def test_d12_image_carries_the_license(image: Unpacked) -> None:
    site = image.rootfs / "opt" / "local-ccm" / "lib" / "python3.11" / "site-packages"
    found = sorted(site.glob("local_ccm-*.dist-info/**/LICENSE*"))
    assert found, f"no LICENSE in {site}/local_ccm-*.dist-info"
    assert found[0].read_bytes() == (REPO / "LICENSE").read_bytes()


def test_d12_image_has_no_shell_package_manager_or_pip(image: Unpacked) -> None:
    root = image.rootfs
    for path in (
        "bin/sh",
        "bin/bash",
        "usr/bin/dpkg",
        "usr/bin/apt",
        "usr/bin/perl",
        "usr/bin/openssl",
        "sbin/ldconfig",
        "etc/ld.so.cache",
        "etc/machine-id",
    ):
        assert not (root / path).exists(), path
        assert not (root / path).is_symlink(), path
    assert sorted(p.name for p in (root / "usr/bin").iterdir()) == ["python3.11"]
    assert not list(root.glob("bin/*"))
    site = next(root.glob("opt/local-ccm/lib/python3*/site-packages"))
    installed = {re.sub(r"-[^-]+\.dist-info$", "", d.name).lower().replace("_", "-")
                 for d in site.glob("*.dist-info")}  # fmt: skip
    locked = set(re.findall(r"^([a-z0-9-]+)==", (REPO / "requirements.lock").read_text(), re.M))
    assert installed == locked | {"local-ccm"}
    assert not list(root.glob("opt/local-ccm/bin/pip*"))
    assert not (site / "pip").exists()


def test_d12_image_records_its_debian_packages(image: Unpacked) -> None:
    # Where image scanners look for the packages of a distroless-style image.
    status = {p.name for p in (image.rootfs / "var/lib/dpkg/status.d").iterdir()}
    assert {"libc6", "libssl3", "python3.11-minimal", "libpython3.11-stdlib"} <= status
    os_release = (image.rootfs / "usr/lib/os-release").read_text()
    assert "VERSION_CODENAME=bookworm" in os_release


def test_d12_every_module_is_byte_compiled_unchecked(image: Unpacked) -> None:
    # A read-only root takes no __pycache__ writes: every module has a .pyc whose header says
    # "hash-based, do not check the source" (PEP 552), valid whatever the files' mtimes.
    sources = [*image.rootfs.glob("usr/lib/python3.11/**/*.py"),
               *image.rootfs.glob("opt/local-ccm/**/*.py")]  # fmt: skip
    assert len(sources) > 500
    bad = []
    for source in sources:
        cached = source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"
        flags = int.from_bytes(cached.read_bytes()[4:8], "little") if cached.exists() else None
        if flags != 1:
            bad.append((str(source.relative_to(image.rootfs)), flags))
    assert bad == []


def test_d12_image_fits_the_size_budget(
    image: Unpacked, capsys: pytest.CaptureFixture[str]
) -> None:
    layers = inspect(image, "--raw")["layers"]
    assert isinstance(layers, list)
    compressed = sum(int(layer["size"]) for layer in layers)
    unpacked = sum(p.lstat().st_size for p in image.rootfs.rglob("*"))
    with capsys.disabled():
        print(
            f"\nD12: image {compressed / MIB:.1f} MiB compressed, {unpacked / MIB:.1f} MiB "
            f"unpacked (budgets {COMPRESSED_BUDGET_MIB} and {UNPACKED_BUDGET_MIB} MiB)"
        )
    assert compressed <= COMPRESSED_BUDGET_MIB * MIB
    assert unpacked <= UNPACKED_BUDGET_MIB * MIB


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_d12_entry_points_print_their_version(image: Unpacked, runc: Runc, entry: str) -> None:
    assert __version__ in run_image(runc, image, [f"/{entry}", "--version"])


@pytest.mark.netns
def test_d12_detect_runs_in_the_image_in_a_test_namespace(
    image: Unpacked, runc: Runc, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)  # a Node's interfaces: 192.0.2.10/24 and 198.51.100.10/24
    out = run_image(runc, image, ["/usr/local/bin/local-ccm", "detect", "--external-ip-target=",
                                  "--internal-ip-cidrs=0.0.0.0/0"], netns=ns.name)  # fmt: skip
    assert re.search(r"InternalIP\s+ipv4\s+192\.0\.2\.10", out), out
    assert "Read-only file system" not in out


@pytest.mark.netns
def test_d12_agent_from_the_image_initialises_a_node(
    *,
    image: Unpacked,
    runc: Runc,
    shipped_agent_rbac: ShippedRbac,
    control_plane: ControlPlane,
    kube: Client,
    make_node: NodeFactory,
    netns: NetnsFactory,
    track: Tracker,
    test_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    ns = a01_network(netns)
    name = make_node(uninitialized=True)["metadata"]["name"]
    plain = agent_for_node(
        control_plane, kube, track, rbac=shipped_agent_rbac, namespace=test_namespace,
        node=name, netns=ns.name, argv=list(A01_ARGS), log_path=test_artifacts / "agent.log",
        labels=test_labels,
    )  # fmt: skip
    agent = ContainerAgent(runc, image, plain)
    with agent:
        node = eventually(lambda: initialised(kube, name), timeout=30, message="taint removed")
        assert pairs(node) == A01_ADDRESSES, node
        status = agent.proc_status()
        assert status["Uid"].split()[:2] == [str(AGENT_UID)] * 2, status
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert status[caps] == NO_CAPS, (caps, status)
        assert status["NoNewPrivs"].strip() == "1", status
        assert "ro" in agent.root_mount_options()
    assert "Traceback" not in agent.log()


# ---------------------------------------------------------------- both platforms


def test_d12_archive_is_one_index_of_amd64_and_arm64() -> None:
    archive = image_archive()
    read = read_archive(archive)
    digest = Path(f"{archive}.digest").read_text().strip()
    assert read.index_digest == digest
    assert read.index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert {a: dict(p.platform) for a, p in read.platforms.items()} == PLATFORMS
    listing = json.loads(Path(f"{archive}.packages.json").read_text())
    assert listing["image"]["digest"] == digest
    assert {m["architecture"]: m["digest"] for m in listing["image"]["manifests"]} == {
        a: p.digest for a, p in read.platforms.items()
    }
    assert {d["architecture"] for d in listing["debian"]} == {"amd64", "arm64", "all"}
    amd64, arm64 = read.platforms["amd64"].config, read.platforms["arm64"].config
    assert (amd64["architecture"], arm64["architecture"], arm64["variant"]) == (
        "amd64", "arm64", "v8")  # fmt: skip
    # Everything but the platform is the same: user, entry point, environment, labels.
    assert amd64["config"] == arm64["config"]


def test_d12_each_platform_s_interpreter_is_built_for_it(
    image: Unpacked, foreign: Unpacked
) -> None:
    # The test cannot pass on an amd64 image labelled arm64: the ELF header says the CPU.
    (other,) = set(PLATFORMS) - {host_arch()}
    assert elf_machine(image.rootfs / "usr/bin/python3.11") == ELF_MACHINE[host_arch()]
    assert elf_machine(foreign.rootfs / "usr/bin/python3.11") == ELF_MACHINE[other]
    extensions = sorted(foreign.rootfs.glob("opt/local-ccm/lib/python3.11/site-packages/**/*.so"))
    assert len(extensions) >= 3  # cffi, PyYAML, cryptography
    assert {elf_machine(e) for e in extensions} == {ELF_MACHINE[other]}, extensions
    # The venv, its scripts and their shebangs are the same on both platforms.
    for entry in ENTRY_POINTS:
        mine, theirs = image.rootfs / entry, foreign.rootfs / entry
        assert mine.readlink() == theirs.readlink()
        assert (image.rootfs / str(mine.readlink()).lstrip("/")).read_bytes() == (
            foreign.rootfs / str(theirs.readlink()).lstrip("/")).read_bytes()  # fmt: skip


@pytest.mark.netns
def test_d12_the_other_platform_runs_under_qemu_in_a_loopback_only_namespace(
    foreign: Unpacked, runc: Runc, netns: NetnsFactory
) -> None:
    (other,) = set(PLATFORMS) - {host_arch()}  # arm64 on an amd64 machine
    ns = netns()  # only lo, up
    version = run_image(runc, foreign, ["/usr/local/bin/local-ccm", "--version"], ns.name)
    assert re.fullmatch(rf"local-ccm {re.escape(__version__)} \(python 3\.11\.\d+\)\n", version)
    done = run_container(runc, foreign, ["/usr/local/bin/local-ccm", "detect"], ns.name)
    out = done.stdout
    # No address but lo's: InternalIP has no candidate, the ExternalIP route lookup to
    # 8.8.8.8 finds no route (exit 1: a detector failed), lo is excluded by default.
    assert done.returncode == 1, out + done.stderr
    assert re.search(r"^ExternalIP\s+ipv4\s+-\s+failed\s+no route to 8\.8\.8\.8 \(ENETUNREACH\)$",
                     out, re.MULTILINE), out  # fmt: skip
    assert re.search(r"^lo\s+127\.0\.0\.1/8\s+excluded: interface matches lo$", out, re.M), out
    assert not re.search(r"^InternalIP\s+ipv4\s+\d", out, re.MULTILINE), out
    # The program itself sees the other CPU (uname -m under qemu): the label it would write.
    assert re.search(rf"^  fact arch = {other}$", out, re.MULTILINE), out
