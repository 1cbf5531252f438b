"""`make image`'s decisions (scripts/image.py) and its archive writer (scripts/ocilayout.py):
what stays out of the root, and that the archive depends only on the files' contents, modes
and owners, never on their time stamps or the order the disk lists them in."""

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


def spec() -> object:
    return ocilayout.ImageSpec(
        arch="amd64", created=1_700_000_000, user="65532:65532", env=("PATH=/bin",),
        entrypoint=("/x",), labels={"k": "v"}, ref="v1", created_by="test",
    )  # fmt: skip


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
        manifest = json.load(outer.extractfile(f"blobs/sha256/{entry['digest'][7:]}"))  # type: ignore[arg-type]
        layer = outer.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}")
        with tarfile.open(fileobj=layer, mode="r:gz") as inner:
            members = inner.getmembers()
    # Each directory's entries sorted, a directory's contents after its siblings (os.walk).
    assert [m.name for m in members] == ["a", "b", "c", "link", "b/1", "b/2", "c/d", "c/d/e"]
    assert {m.mtime for m in members} == {1_700_000_000}
    assert {(m.uname, m.gname) for m in members} == {("", "")}
