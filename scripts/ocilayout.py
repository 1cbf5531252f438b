"""Root file systems as one-layer OCI images in one multi-platform archive, byte-for-byte
reproducible.

Written here rather than by umoci or skopeo, whose tars carry the current time: every entry in
sorted order with mtime = the image's creation time, numeric owners without names, gzip with
no name and no time, canonical JSON. Each root becomes an image manifest (:func:`image_manifest`)
and the manifests one image index, the multi-platform image a registry serves for one tag
(:func:`index_archive`). The result is a tar of an OCI image layout whose ``index.json`` names
that index (what ``skopeo copy oci-archive:...`` and ``ctr images import`` read). Standard
library only; no I/O but reading the tree.
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

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
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
class Manifest:
    """One platform's image: its config, layer and manifest blobs."""

    arch: str
    config: Blob
    layer: Blob
    manifest: Blob
    tar_size: int  # the layer uncompressed

    @property
    def digest(self) -> str:
        """The platform's image digest (what ``--platform`` pulls resolve to)."""
        return self.manifest.digest

    @property
    def blobs(self) -> tuple[Blob, Blob, Blob]:
        return self.config, self.layer, self.manifest


@dataclass(frozen=True)
class Image:
    archive: bytes
    digest: str  # of the image index: the digest a registry reports for the tag
    manifests: tuple[Manifest, ...]


def iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(doc: Mapping[str, object]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def blob(data: bytes) -> Blob:
    return Blob(f"sha256:{hashlib.sha256(data).hexdigest()}", len(data), data)


def descriptor(media_type: str, b: Blob) -> dict[str, object]:
    return {"mediaType": media_type, "digest": b.digest, "size": b.size}


def platform(arch: str) -> dict[str, str]:
    """The OCI platform of a Debian/Go architecture name; arm64 is ARMv8 (``variant`` v8, as
    containerd and the registries normalise it)."""
    return {"architecture": arch, "os": "linux", **({"variant": "v8"} if arch == "arm64" else {})}


def image_config(spec: ImageSpec, diff_id: str) -> dict[str, object]:
    config = {"User": spec.user, "Env": list(spec.env), "Entrypoint": list(spec.entrypoint),
              "WorkingDir": "/", "Labels": dict(spec.labels)}  # fmt: skip
    return {
        **platform(spec.arch),
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


def image_index(manifests: Sequence[Manifest], annotations: Mapping[str, str]) -> dict[str, object]:
    """The multi-platform image: one entry per platform, in the order given."""
    entries = [{**descriptor(MANIFEST_TYPE, m.manifest), "platform": platform(m.arch)}
               for m in manifests]  # fmt: skip
    return {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": entries,
            "annotations": dict(annotations)}  # fmt: skip


def layout_index(index_blob: Blob, ref: str) -> dict[str, object]:
    """The layout's ``index.json``: the image index under the tag ``ref``."""
    entry = descriptor(INDEX_TYPE, index_blob)
    return {"schemaVersion": 2, "manifests": [
        {**entry, "annotations": {"org.opencontainers.image.ref.name": ref}}]}  # fmt: skip


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
    named = {f"blobs/sha256/{b.digest.removeprefix('sha256:')}": b.data for b in blobs}
    layout = canonical_json({"imageLayoutVersion": "1.0.0"})
    files = [("oci-layout", layout), ("index.json", index_doc), *named.items()]
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


def image_manifest(root: Path, spec: ImageSpec) -> Manifest:
    """``root`` as the only layer of the ``spec.arch`` image described by ``spec``."""
    tar = layer_tar(root, spec.created)
    layer = blob(gzip_bytes(tar))
    diff_id = f"sha256:{hashlib.sha256(tar).hexdigest()}"
    config = blob(canonical_json(image_config(spec, diff_id)))
    manifest_blob = blob(canonical_json(manifest(spec, config, layer)))
    return Manifest(spec.arch, config, layer, manifest_blob, len(tar))


def index_archive(manifests: Sequence[Manifest], spec: ImageSpec) -> Image:
    """The platforms' images as one image index tagged ``spec.ref``, in an OCI layout tar."""
    arches = [m.arch for m in manifests]
    if not manifests or len(set(arches)) != len(arches):
        raise ValueError(f"one manifest per architecture, got {arches}")
    index_blob = blob(canonical_json(image_index(manifests, spec.labels)))
    blobs = [index_blob, *(b for m in manifests for b in m.blobs)]
    archive = layout_tar(blobs, canonical_json(layout_index(index_blob, spec.ref)), spec.created)
    return Image(archive, index_blob.digest, tuple(manifests))


def image_archive(root: Path, spec: ImageSpec) -> Image:
    """``root`` as a one-platform image (an index with one manifest)."""
    return index_archive([image_manifest(root, spec)], spec)
