"""`make image`'s decisions (scripts/image.py), its archive writer (scripts/ocilayout.py) and
its qemu registration (scripts/binfmt.py): what stays out of the root, that the archive depends
only on the files' contents, modes and owners, never on their time stamps or the order the disk
lists them in, how the platforms' images become one index, and what a cached image is keyed
by."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str) -> ModuleType:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))  # image.py imports ocilayout as a sibling
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec
    assert spec.loader
    module = sys.modules.setdefault(name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


image = load("image")
ocilayout = load("ocilayout")
binfmt = load("binfmt")


@pytest.mark.parametrize(
    ("path", "dropped"),
    [
        ("bin/sh", True), ("usr/bin/perl", True), ("usr/bin/dpkg", True), ("sbin/ldconfig", True),
        ("usr/bin/python3.11", False), ("usr/bin/", False), ("etc/", False),
        ("etc/passwd", False), ("etc/ld.so.conf", True), ("etc/ssl/certs/", False),
        ("usr/share/doc/libc6/", False), ("usr/share/doc/libc6/copyright", False),
        ("usr/share/doc/libc6/changelog.Debian.gz", True), ("usr/share/man/man1/", True),
        ("usr/lib/x86_64-linux-gnu/gconv/UTF-16.so", True),
        ("usr/lib/python3.11/json/__init__.py", False),
        ("usr/lib/python3.11/sqlite3/__init__.py", True),
        ("usr/lib/python3.11/lib-dynload/readline.cpython-311-x86_64-linux-gnu.so", True),
        ("usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", False),
        ("usr/lib/python3.11/__pycache__/os.cpython-311.pyc", True),
        ("var/lib/dpkg/status.d/libc6", False), ("var/log/", True), ("var/cache/", True),
    ],
)  # fmt: skip
def test_what_stays_out_of_the_root(path: str, dropped: bool) -> None:
    assert image.is_dropped(path) is dropped


def test_read_lock_gives_versions_and_hashes() -> None:
    text = "# c\nfoo-bar==1.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\nbaz==2\n"
    assert image.read_lock(text) == {"foo-bar": ("1.0", frozenset({"aa", "bb"})),
                                     "baz": ("2", frozenset())}  # fmt: skip


def tree(root: Path, mtime: int, reverse: bool) -> Path:
    names = sorted(["b/2", "a", "b/1", "c/d/e"], reverse=reverse)
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        os.utime(path, (mtime, mtime))
    (root / "link").symlink_to("a")
    return root


def spec(arch: str = "amd64") -> object:
    return ocilayout.ImageSpec(
        arch=arch, created=1_700_000_000, user="65532:65532", env=("PATH=/bin",),
        entrypoint=("/x",), labels={"k": "v"}, ref="v1", created_by="test",
    )  # fmt: skip


def blobs(archive: bytes) -> dict[str, object]:
    """``index.json`` and every blob of a layout tar, JSON ones parsed."""
    found: dict[str, object] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        for member in outer.getmembers():
            if member.isfile():
                data = outer.extractfile(member).read()  # type: ignore[union-attr]
                name = member.name.removeprefix("blobs/sha256/")
                found[name] = json.loads(data) if data.startswith(b"{") else data
    return found


def test_archive_ignores_time_stamps_and_creation_order(tmp_path: Path) -> None:
    one = ocilayout.image_archive(tree(tmp_path / "one", 1, reverse=False), spec())
    two = ocilayout.image_archive(tree(tmp_path / "two", 2_000_000_000, reverse=True), spec())
    assert one.digest == two.digest
    assert one.archive == two.archive


def test_layer_is_sorted_with_one_time_and_no_owner_names(tmp_path: Path) -> None:
    built = ocilayout.image_archive(tree(tmp_path, 5, reverse=True), spec())
    with tarfile.open(fileobj=io.BytesIO(built.archive)) as outer:
        index = json.load(outer.extractfile("index.json"))  # type: ignore[arg-type]
        (entry,) = index["manifests"]
        assert entry["annotations"] == {"org.opencontainers.image.ref.name": "v1"}
        assert entry["mediaType"] == ocilayout.INDEX_TYPE
        platforms = json.load(outer.extractfile(f"blobs/sha256/{entry['digest'][7:]}"))  # type: ignore[arg-type]
        (one,) = platforms["manifests"]
        manifest = json.load(outer.extractfile(f"blobs/sha256/{one['digest'][7:]}"))  # type: ignore[arg-type]
        layer = outer.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}")
        with tarfile.open(fileobj=layer, mode="r:gz") as inner:
            members = inner.getmembers()
    # Each directory's entries sorted, a directory's contents after its siblings (os.walk).
    assert [m.name for m in members] == ["a", "b", "c", "link", "b/1", "b/2", "c/d", "c/d/e"]
    assert {m.mtime for m in members} == {1_700_000_000}
    assert {(m.uname, m.gname) for m in members} == {("", "")}


def test_the_index_lists_each_platform_in_order_under_the_tag(tmp_path: Path) -> None:
    amd64 = ocilayout.image_manifest(tree(tmp_path / "a", 1, reverse=False), spec("amd64"))
    arm64 = ocilayout.image_manifest(tree(tmp_path / "b", 9, reverse=True), spec("arm64"))
    built = ocilayout.index_archive([amd64, arm64], spec())
    found = blobs(built.archive)
    (tagged,) = found["index.json"]["manifests"]  # type: ignore[index]
    assert tagged["digest"] == built.digest
    assert tagged["annotations"] == {"org.opencontainers.image.ref.name": "v1"}
    index = found[built.digest[7:]]
    assert index["mediaType"] == ocilayout.INDEX_TYPE  # type: ignore[index]
    assert [(m["digest"], m["platform"]) for m in index["manifests"]] == [  # type: ignore[index]
        (amd64.digest, {"architecture": "amd64", "os": "linux"}),
        (arm64.digest, {"architecture": "arm64", "os": "linux", "variant": "v8"}),
    ]
    config = found[arm64.config.digest[7:]]
    assert (config["architecture"], config["variant"]) == ("arm64", "v8")  # type: ignore[index]
    # The same trees give the same layers; only the configs (architecture) differ.
    assert amd64.layer == arm64.layer
    assert amd64.config != arm64.config
    again = ocilayout.index_archive([amd64, arm64], spec())
    assert again.archive == built.archive


def test_an_index_needs_one_manifest_per_architecture(tmp_path: Path) -> None:
    amd64 = ocilayout.image_manifest(tree(tmp_path, 1, reverse=False), spec("amd64"))
    with pytest.raises(ValueError, match="one manifest per architecture"):
        ocilayout.index_archive([amd64, amd64], spec())
    with pytest.raises(ValueError, match="one manifest per architecture"):
        ocilayout.index_archive([], spec())


def inputs(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "arch": "arm64", "version": "1.0.0", "revision": "abc", "epoch": 1,
        "debs": {"libc6": "aa"}, "tool": "amd64", "tool-debs": {"libc6": "bb"},
        "requirements.lock": "cc", "pip": "dd", "project": "ee", "scripts": {"image.py": "ff"},
    }  # fmt: skip
    return {**base, **changes}


def test_a_cached_image_is_keyed_by_every_input() -> None:
    key = image.image_key(inputs())
    assert key == image.image_key(inputs())
    for change in ({"arch": "amd64"}, {"revision": "abd"}, {"epoch": 2},
                   {"debs": {"libc6": "ab"}}, {"tool-debs": {"libc6": "bc"}}, {"pip": "de"},
                   {"requirements.lock": "cd"}, {"project": "ef"},
                   {"scripts": {"image.py": "fe"}}):  # fmt: skip
        assert image.image_key(inputs(**change)) != key, change


def package(name: str, version: str, arch: str) -> object:
    return image.Package(name, version, arch, name, f"Package: {name}\n")


def test_the_tool_root_s_python_must_be_the_image_s() -> None:
    tool = [package(n, "3.11.2-6+deb12u9", "amd64") for n in image.PYTHON_PACKAGES]
    same = [package(n, "3.11.2-6+deb12u9", "arm64") for n in image.PYTHON_PACKAGES]
    assert image.python_mismatches(tool, same) == []
    newer = [package(n, "3.11.2-6+deb12u10", "arm64") for n in image.PYTHON_PACKAGES]
    problems = image.python_mismatches(tool, newer)
    assert len(problems) == len(image.PYTHON_PACKAGES)
    assert problems[0] == ("python3.11-minimal: 3.11.2-6+deb12u9 (tool root) but "
                           "3.11.2-6+deb12u10 (arm64)")  # fmt: skip


def test_wheels_are_chosen_by_the_lock_s_platform_tags() -> None:
    args = image.wheel_platforms("arm64")
    tags = args[1::2]
    assert set(args[::2]) == {"--platform"}
    assert tags[0] == "manylinux_2_36_aarch64"
    assert "manylinux2014_aarch64" in tags
    assert not any("x86_64" in t for t in tags)


def test_the_listing_names_the_index_each_platform_and_an_all_package_once() -> None:
    build = image.Build("1.0.0", "abc", 0, "amd64")

    def platform(arch: str) -> object:
        blob = ocilayout.blob
        manifest = ocilayout.Manifest(arch, blob(b"c" + arch.encode()), blob(b"l"),
                                      blob(arch.encode()), 1)  # fmt: skip
        debs = ({"name": "libc6", "version": "2.36", "architecture": arch, "source": "glibc"},
                {"name": "netbase", "version": "6.4", "architecture": "all",
                 "source": "netbase"})  # fmt: skip
        wheels = ({"name": "pyyaml", "version": "6.0.3", "sha256": "a,b"},)
        return image.Platform(manifest, debs, wheels)

    both = [platform("amd64"), platform("arm64")]
    listing = image.packages_listing(build, "sha256:index", both)
    assert listing["image"]["digest"] == "sha256:index"
    assert [m["architecture"] for m in listing["image"]["manifests"]] == ["amd64", "arm64"]
    assert [(d["name"], d["architecture"]) for d in listing["debian"]] == [
        ("libc6", "amd64"), ("libc6", "arm64"), ("netbase", "all")]  # fmt: skip
    assert [w["name"] for w in listing["python"]] == ["pyyaml"]


DEBIAN_QEMU_AARCH64 = (
    ":qemu-aarch64:M::\\x7f\\x45\\x4c\\x46\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00"
    "\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff"
    "\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:"
    "/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF"
)


def test_binfmt_registration_keeps_or_adds_the_fix_binary_flag() -> None:
    reg = binfmt.parse_conf(f"# qemu-user-static\n\n{DEBIAN_QEMU_AARCH64}\n")
    assert (reg.name, reg.interpreter, reg.flags) == (
        "qemu-aarch64", "/usr/libexec/qemu-binfmt/aarch64-binfmt-P", "OPF")  # fmt: skip
    assert binfmt.with_fix_binary(reg).line() == DEBIAN_QEMU_AARCH64
    without = binfmt.parse_conf(DEBIAN_QEMU_AARCH64.removesuffix("OPF") + "P")
    assert binfmt.with_fix_binary(without).flags == "FP"
    with pytest.raises(binfmt.BinfmtError, match="not a binfmt_misc registration"):
        binfmt.parse_conf(":too:few:fields\n")
    with pytest.raises(binfmt.BinfmtError, match="expected one registration line, found 0"):
        binfmt.parse_conf("# nothing\n")


def test_binfmt_status_is_usable_only_enabled_with_f() -> None:
    status = binfmt.parse_status(
        "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\n"
        "offset 0\nmagic 7f454c46\n"
    )
    assert status["flags"] == "POF"
    assert binfmt.usable(status)
    assert not binfmt.usable({**status, "flags": "PO"})
    assert not binfmt.usable({**status, "state": "disabled"})
    assert binfmt.native_arch("x86_64") == "amd64"
    assert binfmt.native_arch("aarch64") == "arm64"
