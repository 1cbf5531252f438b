"""requirements.lock pins every runtime dependency of pyproject.toml, exactly and with hashes: the
Containerfile installs it with ``--require-hashes``, which rejects a
lock with any unpinned or hash-less line only at image build time, on a machine with a registry."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Entry:
    requirement: str
    options: tuple[str, ...]


def entries(text: str) -> list[Entry]:
    """The lock's requirement lines, continuation lines joined, comments dropped."""
    logical = re.sub(r"\\\n", " ", text)
    lines = (line.split("#", 1)[0].split() for line in logical.splitlines())
    return [Entry(words[0], tuple(words[1:])) for words in lines if words]


def lock_entries() -> list[Entry]:
    return entries((REPO / "requirements.lock").read_text())


def runtime_dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(dep) for dep in project["dependencies"]]


def pins() -> dict[str, str]:
    """``canonical name -> version`` of the lock's ``name==version`` lines."""
    found = (re.fullmatch(r"([A-Za-z0-9._-]+)==([^=;\s]+)", e.requirement) for e in lock_entries())
    return {canonicalize_name(m.group(1)): m.group(2) for m in found if m}


def lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", REPO / "scripts" / "lock.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the script's annotations through sys.modules.
    module = sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_entries_joins_continuation_lines_and_drops_comments() -> None:
    text = "# header\n\na==1 \\\n  --hash=sha256:x \\\n  --hash=sha256:y\nb==2 --hash=sha256:z\n"
    assert entries(text) == [
        Entry("a==1", ("--hash=sha256:x", "--hash=sha256:y")),
        Entry("b==2", ("--hash=sha256:z",)),
    ]


def test_lock_has_entries() -> None:
    assert lock_entries()


@pytest.mark.parametrize("dependency", runtime_dependencies(), ids=str)
def test_every_runtime_dependency_is_pinned_within_its_specifier(dependency: Requirement) -> None:
    version = pins().get(canonicalize_name(dependency.name))
    assert version is not None, f"{dependency.name} is not in requirements.lock: run `make lock`"
    assert dependency.specifier.contains(version, prereleases=True), (dependency, version)


LOCKS = ("requirements.lock", "requirements-build.lock")


@pytest.mark.parametrize("name", LOCKS)
def test_nothing_in_the_lock_is_unpinned(name: str) -> None:
    exact = re.compile(r"[^=<>!~@\s]+==[^=*\s]+")
    found = entries((REPO / name).read_text())
    unpinned = [e.requirement for e in found if not exact.fullmatch(e.requirement)]
    assert unpinned == []
    assert found


@pytest.mark.parametrize("name", LOCKS)
def test_every_pin_has_sha256_hashes_and_no_other_option(name: str) -> None:
    for entry in entries((REPO / name).read_text()):
        assert entry.options, f"{entry.requirement} has no --hash"
        assert [o for o in entry.options if not HASH.fullmatch(o)] == [], entry


def test_build_lock_covers_the_build_system_and_pip() -> None:
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    names = {canonicalize_name(e.requirement.split("==")[0])
             for e in entries((REPO / "requirements-build.lock").read_text())}  # fmt: skip
    assert {canonicalize_name(Requirement(r).name) for r in build} | {"pip", "build"} <= names


@pytest.mark.parametrize("name", LOCKS)
def test_lock_is_in_the_form_make_lock_writes(name: str) -> None:
    # A hand edit (reordered, re-wrapped, a changed header) shows up as a diff at the next
    # `make lock`; keep the file exactly as the script renders it.
    script = lock_script()
    text = (REPO / name).read_text()
    runtime = script.HEADER.format(python=script.PYTHON, arches=" and ".join(script.ARCHES))
    header = runtime if name == "requirements.lock" else script.BUILD_HEADER
    parsed = [
        script.Pin(canonicalize_name(e.requirement.split("==")[0]), e.requirement.split("==")[1],
                   frozenset(o.removeprefix("--hash=sha256:") for o in e.options))
        for e in entries(text)
    ]  # fmt: skip
    assert script.render(parsed, header) == text


def test_lock_targets_every_manylinux_tag_of_bookworm() -> None:
    # pip download does not widen --platform itself: the script must list every tag a
    # glibc-2.36 pip accepts, or a wheel tagged only manylinux_2_28 would be missed.
    tags = lock_script().platforms("aarch64")
    assert tags[0] == "manylinux_2_36_aarch64"
    assert {"manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"} <= set(
        tags
    )
    assert "manylinux_2_37_aarch64" not in tags
