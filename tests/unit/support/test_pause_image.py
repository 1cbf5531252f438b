"""The pause image's archive (tests/support/pause.py) and any static binary's
(tests/support/oci.py ``binary_image``): an OCI layout containerd can import by the name in its
index, byte-for-byte the same for the same inputs, keyed by them."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from typing import Any

from tests.support import oci, pause

NAME = "local-ccm.test/pause:0123456789abcdef"


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def blob(files: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    data = files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
    assert len(data) == descriptor["size"]
    assert hashlib.sha256(data).hexdigest() == descriptor["digest"].removeprefix("sha256:")
    return data


def test_the_index_names_the_image_for_containerd_and_by_ref() -> None:
    files = members(pause.archive(b"\x7fELF", name=NAME, arch="amd64"))
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"] == {
        "io.containerd.image.name": NAME,
        "org.opencontainers.image.ref.name": "0123456789abcdef",
    }
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}


def test_every_descriptor_matches_its_blob_and_the_layer_holds_only_pause() -> None:
    files = members(pause.archive(b"\x7fELF-pause", name=NAME, arch="arm64"))
    (entry,) = json.loads(files["index.json"])["manifests"]
    manifest = json.loads(blob(files, entry))
    config = json.loads(blob(files, manifest["config"]))
    (layer_descriptor,) = manifest["layers"]
    layer_tar = gzip.decompress(blob(files, layer_descriptor))
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer_tar).hexdigest()}"]
    assert config["architecture"] == "arm64"
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode, member.uid, member.mtime) == ("pause", 0o755, 0, 0)
        assert tar.extractfile(member).read() == b"\x7fELF-pause"  # type: ignore[union-attr]


def test_the_same_inputs_give_the_same_bytes() -> None:
    assert pause.archive(b"x", name=NAME, arch="amd64") == pause.archive(
        b"x", name=NAME, arch="amd64"
    )


def test_the_key_follows_source_compiler_and_architecture() -> None:
    key = pause.cache_key(b"int main", "gcc (Debian 12.2.0-14) 12.2.0", "amd64")
    assert key == pause.cache_key(b"int main", "gcc (Debian 12.2.0-14) 12.2.0", "amd64")
    assert key != pause.cache_key(b"int main ", "gcc (Debian 12.2.0-14) 12.2.0", "amd64")
    assert key != pause.cache_key(b"int main", "gcc (Debian 12.2.0-14) 12.3.0", "amd64")
    assert key != pause.cache_key(b"int main", "gcc (Debian 12.2.0-14) 12.2.0", "arm64")
    assert pause.image_name(key) == f"local-ccm.test/pause:{key}"


def test_machine_names_are_spelled_as_oci_does() -> None:
    assert oci.oci_arch("x86_64") == "amd64"
    assert oci.oci_arch("aarch64") == "arm64"
    assert oci.oci_arch("riscv64") == "riscv64"


def test_a_binary_deeper_in_the_tree_gets_its_directories_and_no_user_means_root() -> None:
    name = "local-ccm.test/go-local-ccm:abc"
    image = oci.binary_image(b"\x7fELF-go", path="/usr/local/bin/local-ccm", name=name,
                             arch="amd64")  # fmt: skip
    files = members(image)
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == name
    manifest = json.loads(blob(files, entry))
    config = json.loads(blob(files, manifest["config"]))
    assert config["config"] == {"Entrypoint": ["/usr/local/bin/local-ccm"], "WorkingDir": "/"}
    (layer_descriptor,) = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(files, layer_descriptor)))) as tar:
        found = [(m.name, m.isdir(), m.mode, m.uid, m.mtime) for m in tar.getmembers()]
        assert found == [
            ("usr", True, 0o755, 0, 0),
            ("usr/local", True, 0o755, 0, 0),
            ("usr/local/bin", True, 0o755, 0, 0),
            ("usr/local/bin/local-ccm", False, 0o755, 0, 0),
        ]
        binary = tar.extractfile("usr/local/bin/local-ccm")
        assert binary is not None
        assert binary.read() == b"\x7fELF-go"
