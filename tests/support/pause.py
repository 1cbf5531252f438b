"""The pod sandbox ("pause") image of the real-node tier, built here: no registry is reachable.

``pause.c`` is compiled with ``gcc -static`` and packed as a one-layer OCI image archive whose
``index.json`` names the image for containerd (``io.containerd.image.name``), so ``ctr -n k8s.io
images import`` needs no ``--base-name``. The archive is cached under the test cache
(``<cache>/pause/<key>/``) by the hash of its inputs: the source, the compiler's version line,
the flags, the architecture and the layout writer's revision. The name carries the key, so a
changed pause program is a new image for containerd too.

The archive writer is pure (tests/support/oci.py's :func:`~tests.support.oci.binary_image`,
tests/unit/support/test_pause_image.py); :func:`ensure_pause_image` is the adapter (gcc, the
cache directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.oci import binary_image, oci_arch

SOURCE = Path(__file__).with_name("pause.c")
CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Werror")
# Bump when the archive's layout below changes in a way the other inputs do not show.
LAYOUT_REVISION = 1
# `.test` is reserved (RFC 2606): no registry answers for it, so nothing is ever pulled.
REPOSITORY = "local-ccm.test/pause"
USER = "65535:65535"  # the user of the upstream pause image


@dataclass(frozen=True)
class PauseImage:
    archive: Path
    name: str  # what containerd calls it: <REPOSITORY>:<tag>


# ------------------------------------------------------------------ pure parts
def cache_key(source: bytes, compiler: str, arch: str) -> str:
    inputs = {"source": hashlib.sha256(source).hexdigest(), "compiler": compiler,
              "cflags": list(CFLAGS), "arch": arch, "layout": LAYOUT_REVISION}  # fmt: skip
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def image_name(key: str) -> str:
    return f"{REPOSITORY}:{key}"


def archive(binary: bytes, *, name: str, arch: str) -> bytes:
    """The OCI image layout (as a tar) of one layer holding ``/pause``; ``name`` is both the
    containerd image name and, after the colon, the layout's ref name."""
    return binary_image(binary, path="/pause", name=name, arch=arch, user=USER)


# ------------------------------------------------------------------ adapter
def compiler_version() -> str:
    done = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


def compile_pause(out: Path) -> bytes:
    argv = ["gcc", *CFLAGS, "-o", str(out), str(SOURCE)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"$ {' '.join(argv)}: exit {done.returncode}\n{done.stderr}")
    return out.read_bytes()


def ensure_pause_image(cache: Path) -> PauseImage:
    """The cached archive for the current inputs, built (in a second or two) when missing."""
    arch = oci_arch(platform.machine())
    key = cache_key(SOURCE.read_bytes(), compiler_version(), arch)
    entry = cache / "pause" / key
    image = PauseImage(entry / "pause.oci.tar", image_name(key))
    if image.archive.is_file():
        return image
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry) as work:
        data = archive(compile_pause(Path(work) / "pause"), name=image.name, arch=arch)
        tmp = Path(work) / "pause.oci.tar"
        tmp.write_bytes(data)
        os.replace(tmp, image.archive)  # atomic: a concurrent run sees all of it or nothing
    return image
