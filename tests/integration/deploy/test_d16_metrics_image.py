"""The controllers make their self-signed /metrics certificate inside the image (D16): as uid
65532, on a read-only root, without capabilities, under runc. The certificate comes from a
child interpreter (`python -m local_ccm.runtime.metricscert`) and is loaded through memfd, so both
have to work in the image, not only in the test venv. A controller makes it on the first
connection to its metrics port; the test wraps one server-side socket as that connection does."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chart import REPO
from tests.support.oci import Runc, Unpacked, container_config, image_archive, unpack

PROGRAMS = ("node-lifecycle-controller", "node-ipam-controller")


@pytest.fixture(scope="module")
def image() -> Iterator[Unpacked]:
    archive = image_archive()
    if not archive.exists():
        pytest.fail(f"no {archive.relative_to(REPO)}: run `make image` (`make test` does)",
                    pytrace=False)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="local-ccm-oci-") as work:
        Path(work).chmod(0o755)  # the container's uid must traverse it
        yield unpack(archive, Path(work))


@pytest.fixture(scope="module")
def runc() -> Iterator[Runc]:
    with tempfile.TemporaryDirectory(prefix="local-ccm-runc-") as state:
        yield Runc(Path(state))


# What SelfSignedContext.wrap_socket does on a controller's first metrics connection.
FIRST_CONNECTION = """
import socket
from local_ccm.runtime.metricsserver import server_tls
context = server_tls("", "image-test")
ours, theirs = socket.socketpair()
context.wrap_socket(ours, server_side=True, do_handshake_on_connect=False).close()
theirs.close()
print("certificate loaded:", context.loaded)
"""


def run_in_image(image: Unpacked, runc: Runc, args: list[str]) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `args` in the image, as uid 65532 on a read-only root."""
    config = container_config(image.config, rootfs=image.rootfs, args=args,
                              env={"POD_NAMESPACE": "kube-system"})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="local-ccm-bundle-") as parent:
        done = runc.run(Path(parent), config)
    return done.returncode, done.stdout + done.stderr


def test_d16_the_image_makes_the_metrics_certificate(image: Unpacked, runc: Runc) -> None:
    code, out = run_in_image(image, runc, ["/opt/local-ccm/bin/python", "-c", FIRST_CONNECTION])
    assert code == 0, out
    assert "certificate loaded: True" in out, out


@pytest.mark.parametrize("program", PROGRAMS)
def test_d16_a_controller_without_credentials_exits_2_without_making_a_certificate(
    image: Unpacked, runc: Runc, program: str
) -> None:
    """The certificate is no longer made at start-up: the missing kubeconfig is invalid input,
    exit 2 at once."""
    args = [f"/usr/local/bin/{program}", "--kubeconfig=/nonexistent/kubeconfig"]
    code, out = run_in_image(image, runc, args)
    assert code == 2, out
    assert "invalid flag --kubeconfig: " in out, out
    assert "self-signed" not in out, out
    assert "Traceback" not in out, out
