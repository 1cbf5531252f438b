"""What can be checked of the image without an image builder (spec/deploy.md §1, D12).

No container engine and no registry are reachable here (docs/install.md, "Building the
image"), so the image's contents are reproduced the way the Containerfile builds them: the
package and its console scripts installed into a fresh virtual environment of the system's
Python 3.11, byte-compiled, then run as uid/gid 65532 with no capability, no credentials and a
read-only root file system (a private mount namespace with ``/`` remounted read-only).

The package is copied rather than built as a wheel: the wheel build needs setuptools >= 77
(pyproject's build-system), which build isolation would fetch from PyPI, and the test sandbox
has no network.
"""

from __future__ import annotations

import re
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
from tests.support.chart import CHART, REPO
from tests.support.netns import NetnsFactory

SCRIPTS = ("local-ccm", "node-lifecycle-controller", "node-ipam-controller")
UID = 65532
UNPRIVILEGED = (
    "setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--inh-caps=-all",
    "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
)  # fmt: skip
# pip's console-script template.
WRAPPER = """#!{python}
import re
import sys
from {module} import {func}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({func}())
"""


def project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def image_venv() -> Iterator[Path]:
    """/opt/local-ccm as the Containerfile makes it, readable by uid 65532 (pytest's own
    temporary directories are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="local-ccm-image-"))
    root.chmod(0o755)
    try:
        yield _build_venv(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build_venv(root: Path) -> Path:
    venv = root / "opt-local-ccm"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    shutil.copytree(REPO / "src" / "local_ccm", site / "local_ccm",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    # The locked runtime dependencies: this interpreter's, read-only via a path entry.
    deps = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    (site / "runtime-deps.pth").write_text(f"{deps}\n")
    scripts = project()["scripts"]
    assert isinstance(scripts, dict)
    for name, target in scripts.items():
        module, func = target.split(":")
        path = venv / "bin" / name
        path.write_text(WRAPPER.format(python=venv / "bin" / "python3", module=module, func=func))
        path.chmod(0o755)
    subprocess.run([str(venv / "bin" / "python3"), "-m", "compileall", "-q", str(site)],
                   check=True)  # fmt: skip
    return venv


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


def test_d12_console_scripts_have_the_documented_names() -> None:
    scripts = project()["scripts"]
    assert isinstance(scripts, dict)
    assert set(scripts) == set(SCRIPTS)
    containerfile = (REPO / "Containerfile").read_text()
    for name in SCRIPTS:
        assert f"/usr/local/bin/{name}" in containerfile or "/usr/local/bin/$b" in containerfile
    assert "/out/node-ipam-controller" in containerfile
    assert 'ENTRYPOINT ["/usr/local/bin/local-ccm"]' in containerfile
    assert "USER 65532:65532" in containerfile
    assert "--require-hashes" in containerfile
    assert re.search(r"org\.opencontainers\.image\.licenses=\"Apache-2\.0\"", containerfile)


def test_d12_versions_agree() -> None:
    chart = (CHART / "Chart.yaml").read_text()
    version = re.search(r"^version: (\S+)$", chart, re.MULTILINE)
    app_version = re.search(r"^appVersion: (\S+)$", chart, re.MULTILINE)
    assert version
    assert app_version
    assert project()["version"] == __version__ == version.group(1)
    assert app_version.group(1) == f"v{__version__}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_d12_entry_points_print_their_version(image_venv: Path, script: str) -> None:
    done = run_read_only([str(image_venv / "bin" / script), "--version"])
    assert done.returncode == 0, done.stderr
    assert __version__ in done.stdout + done.stderr


@pytest.mark.netns
def test_d12_detect_runs_read_only_unprivileged_without_credentials(
    image_venv: Path, netns: NetnsFactory
) -> None:
    ns = a01_network(netns)  # a Node's interfaces: 192.0.2.10/24 and 198.51.100.10/24
    argv = [str(image_venv / "bin" / "local-ccm"), "detect", "--external-ip-target=",
            "--internal-ip-cidrs=0.0.0.0/0"]  # fmt: skip
    done = run_read_only(argv, ns.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"InternalIP\s+ipv4\s+192\.0\.2\.10", done.stdout), done.stdout
    assert "Read-only file system" not in done.stderr
    assert "Traceback" not in done.stderr
