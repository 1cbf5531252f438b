"""The controllers make their self-signed /metrics certificate inside the image (D16): as uid
65532, on a read-only root, without capabilities, under runc. The certificate comes from a
child interpreter (`python -m local_ccm.runtime.metricscert`) and is loaded through memfd, so both
have to work in the image, not only in the test venv."""

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


@pytest.mark.parametrize("program", PROGRAMS)
def test_d16_the_image_makes_the_metrics_certificate(
    image: Unpacked, runc: Runc, program: str
) -> None:
    """No credentials: the certificate is made first (a bad one is exit 2 before anything
    else), then the missing kubeconfig is exit 4."""
    args = [f"/usr/local/bin/{program}", "--kubeconfig=/nonexistent/kubeconfig"]
    config = container_config(image.config, rootfs=image.rootfs, args=args,
                              env={"POD_NAMESPACE": "kube-system"})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="local-ccm-bundle-") as parent:
        done = runc.run(Path(parent), config)
    out = done.stdout + done.stderr
    assert "serving /metrics with a self-signed certificate" in out, out
    assert done.returncode == 4, out
    assert "Traceback" not in out, out
