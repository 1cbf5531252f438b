"""A root file system as a one-layer OCI image archive, byte-for-byte reproducible.

Written here rather than by umoci or skopeo, whose tars carry the current time: every entry in
sorted order with mtime = the image's creation time, numeric owners without names, gzip with
no name and no time, canonical JSON. The result is a tar of an OCI image layout (what
``skopeo copy oci-archive:...`` reads). Standard library only; no I/O but reading the tree.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class ImageSpec:
    """What the image config says besides its layer."""

    arch: str
    created: int  # seconds since the epoch (SOURCE_DATE_EPOCH)
    user: str
    env: tuple[str, ...]
    entrypoint: tuple[str, ...]
    labels: Mapping[str, str]
    ref: str  # the tag in the layout's index (org.opencontainers.image.ref.name)
    created_by: str


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    data: bytes


@dataclass(frozen=True)
class Image:
    archive: bytes
    digest: str  # of the manifest: the image digest a registry reports
    layer_size: int  # compressed
    tar_size: int  # uncompressed


def iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def blob(data: bytes) -> Blob:
    return Blob(f"sha256:{hashlib.sha256(data).hexdigest()}", len(data), data)


def descriptor(media_type: str, b: Blob) -> dict[str, object]:
    return {"mediaType": media_type, "digest": b.digest, "size": b.size}


def image_config(spec: ImageSpec, diff_id: str) -> dict[str, object]:
    config = {"User": spec.user, "Env": list(spec.env), "Entrypoint": list(spec.entrypoint),
              "WorkingDir": "/", "Labels": dict(spec.labels)}  # fmt: skip
    return {
        "architecture": spec.arch,
        "os": "linux",
        "created": iso(spec.created),
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": iso(spec.created), "created_by": spec.created_by}],
    }


def manifest(spec: ImageSpec, config: Blob, layer: Blob) -> dict[str, object]:
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": descriptor(CONFIG_TYPE, config),
        "layers": [descriptor(LAYER_TYPE, layer)],
        "annotations": dict(spec.labels),
    }


def index(spec: ImageSpec, manifest_blob: Blob) -> dict[str, object]:
    entry = descriptor(MANIFEST_TYPE, manifest_blob)
    ref = {"org.opencontainers.image.ref.name": spec.ref}
    return {"schemaVersion": 2, "manifests": [{**entry, "annotations": ref}]}


def walk(root: Path) -> Iterator[tuple[str, Path]]:
    """``(relative path, path)`` of everything under ``root`` in sorted order, directories
    with a trailing ``/`` (a symlink to a directory is not one)."""
    for top, dirs, files in os.walk(root):
        dirs.sort()
        base = Path(top)
        for name in sorted([*dirs, *files]):
            path = base / name
            rel = path.relative_to(root).as_posix()
            is_dir = path.is_dir() and not path.is_symlink()
            yield (f"{rel}/" if is_dir else rel), path


def layer_tar(root: Path, epoch: int) -> bytes:
    """The tree as one tar: sorted, every mtime ``epoch``, numeric owners, no names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in walk(root):
            info = tar.gettarinfo(str(path), arcname=rel.rstrip("/"))
            info.mtime, info.uname, info.gname = epoch, "", ""
            info.pax_headers = {}
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def layout_tar(blobs: Sequence[Blob], index_doc: bytes, epoch: int) -> bytes:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) as one tar."""
    named = ((f"blobs/sha256/{b.digest.removeprefix('sha256:')}", b.data) for b in blobs)
    layout = canonical_json({"imageLayoutVersion": "1.0.0"})
    files = [("oci-layout", layout), ("index.json", index_doc), *named]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, epoch
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def image_archive(root: Path, spec: ImageSpec) -> Image:
    """``root`` as the only layer of an image described by ``spec``."""
    tar = layer_tar(root, spec.created)
    layer = blob(gzip_bytes(tar))
    diff_id = f"sha256:{hashlib.sha256(tar).hexdigest()}"
    config = blob(canonical_json(image_config(spec, diff_id)))
    manifest_blob = blob(canonical_json(manifest(spec, config, layer)))
    archive = layout_tar([config, layer, manifest_blob],
                         canonical_json(index(spec, manifest_blob)), spec.created)  # fmt: skip
    return Image(archive, manifest_blob.digest, layer.size, len(tar))
