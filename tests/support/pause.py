"""The pod sandbox ("pause") image of the real-node tier, built here: no registry is reachable.

``pause.c`` is compiled with ``gcc -static`` and packed as a one-layer OCI image archive whose
``index.json`` names the image for containerd (``io.containerd.image.name``), so ``ctr -n k8s.io
images import`` needs no ``--base-name``. The archive is cached under the test cache
(``<cache>/pause/<key>/``) by the hash of its inputs: the source, the compiler's version line,
the flags, the architecture and the layout writer's revision. The name carries the key, so a
changed pause program is a new image for containerd too.

The archive writer is pure (tests/unit/test_pause_image.py); :func:`ensure_pause_image` is the
adapter (gcc, the cache directory).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("pause.c")
CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Werror")
# Bump when the archive's layout below changes in a way the other inputs do not show.
LAYOUT_REVISION = 1
# `.test` is reserved (RFC 2606): no registry answers for it, so nothing is ever pulled.
REPOSITORY = "local-ccm.test/pause"
USER = "65535:65535"  # the user of the upstream pause image
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}


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


def oci_arch(machine: str) -> str:
    """``uname -m`` in OCI spelling."""
    return ARCHES.get(machine, machine)


def _canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data)}


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    """A tar of (name, content, mode), owned by 0:0, every time stamp 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def archive(binary: bytes, *, name: str, arch: str) -> bytes:
    """The OCI image layout (as a tar) of one layer holding ``/pause``; ``name`` is both the
    containerd image name and, after the colon, the layout's ref name."""
    layer_tar = _tar([("pause", binary, 0o755)])
    layer = gzip.compress(layer_tar, compresslevel=9, mtime=0)
    config = _canonical({
        "architecture": arch, "os": "linux",
        "config": {"User": USER, "Entrypoint": ["/pause"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
    })  # fmt: skip
    manifest = _canonical({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": _descriptor(CONFIG_TYPE, config), "layers": [_descriptor(LAYER_TYPE, layer)],
    })  # fmt: skip
    names = {"io.containerd.image.name": name,
             "org.opencontainers.image.ref.name": name.rpartition(":")[2]}  # fmt: skip
    entry = {**_descriptor(MANIFEST_TYPE, manifest), "annotations": names}
    index = _canonical({"schemaVersion": 2, "manifests": [entry]})
    blobs = [(f"blobs/sha256/{hashlib.sha256(b).hexdigest()}", b, 0o644)
             for b in (config, layer, manifest)]  # fmt: skip
    layout = _canonical({"imageLayoutVersion": "1.0.0"})
    return _tar([("oci-layout", layout, 0o644), ("index.json", index, 0o644), *sorted(blobs)])


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
