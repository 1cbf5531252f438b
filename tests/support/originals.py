"""Find or build the Go originals that `make bench-compare` measures ours against.

`python -m tests.support.originals ensure` builds every entry of tests/bench/originals.toml
from its source tarball into the same cache as the control-plane binaries
(`~/.cache/local-ccm-test/bin/<name>-<snapshot>-<go>-<key>/`), under the same build lock, with
the same atomic publish (a temporary folder renamed once BUILD_INFO.json is written). The key
covers the tarball's sha256, the Go version, the forced Go environment, the ldflags and the
go arguments, so a new snapshot or toolchain is a new entry, never a stale hit. Source files a
benchmark reads besides the binaries (``keep``: MetalLB's CRDs) are copied into the entry, so a
cache hit needs no tarball.

The first half is pure (pins, where the tarballs are, keys, messages); the second is the
adapter (sha256 check, unpack, `go build`, publish).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support import gobuild, gotool
from tests.support.binaries import cache_dir
from tests.support.buildlock import build_lock
from tests.support.gotool import BuildError, GoInfo

REPO_ROOT = Path(__file__).resolve().parents[2]
PINS_FILE = REPO_ROOT / "tests" / "bench" / "originals.toml"
DIR_ENV = "LOCAL_CCM_ORIGINALS_DIR"
RECIPE = 1  # bump when the recipe changes in a way the key's other inputs do not show
_FIELDS = ("name", "tarball", "sha256", "project", "snapshot", "commit", "license", "top",
           "ldflags", "go_args", "binaries", "help_mentions")  # fmt: skip
_OPTIONAL = ("keep",)
_LISTS = ("go_args", "binaries", "help_mentions", "keep")


@dataclass(frozen=True)
class Original:
    """One Go original: where its source comes from and how it is built."""

    name: str
    tarball: str
    sha256: str
    project: str
    snapshot: str
    commit: str
    license: str
    top: str  # the tarball's one top-level folder
    ldflags: str
    go_args: tuple[str, ...]  # after `go`; "{out}" and "{ldflags}" are filled in
    binaries: tuple[str, ...]
    help_mentions: tuple[str, ...]  # flags the bench passes: `--help` must name them
    keep: tuple[str, ...] = ()  # source paths (files or folders) copied into the entry

    def command(self, out: Path) -> list[str]:
        fill = {"{out}": str(out), "{ldflags}": self.ldflags}
        return ["go", *(_fill(a, fill) for a in self.go_args)]


# ------------------------------------------------------------------ pure
def _fill(arg: str, values: Mapping[str, str]) -> str:
    for placeholder, value in values.items():
        arg = arg.replace(placeholder, value)
    return arg


def parse_originals(data: Mapping[str, Any]) -> tuple[Original, ...]:
    """Validate the pins file's `[[original]]` tables; every problem is reported at once."""
    entries = data.get("original")
    if not isinstance(entries, list) or not entries:
        raise ValueError("originals.toml: no [[original]] entries")
    problems: list[str] = []
    for i, entry in enumerate(entries):
        label = entry.get("name", f"#{i}") if isinstance(entry, dict) else f"#{i}"
        problems += [f"{label}: {p}" for p in _entry_problems(entry)]
    names = [str(e.get("name")) for e in entries if isinstance(e, dict)]
    problems += [f"{n}: name used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise ValueError("originals.toml: " + "; ".join(problems))
    return tuple(_original(e) for e in entries)


def _entry_problems(entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return ["not a table"]
    problems = [f"{k}: missing" for k in _FIELDS if k not in entry]
    problems += [f"{k}: unknown key" for k in entry if k not in (*_FIELDS, *_OPTIONAL)]
    sha = entry.get("sha256", "")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        problems.append(f"sha256: {sha!r} is not 64 lowercase hex digits")
    for key in _LISTS:
        value = entry.get(key, [])
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append(f"{key}: not a list of strings")
    keep = entry.get("keep", [])
    for path in keep if isinstance(keep, list) else ():
        inside = Path(str(path))
        if inside.is_absolute() or not inside.parts or ".." in inside.parts:
            problems.append(f"keep: {path!r} is not a relative path inside the source")
    if "binaries" in entry and not entry["binaries"]:
        problems.append("binaries: empty")
    return problems


def _original(entry: Mapping[str, Any]) -> Original:
    fields: dict[str, Any] = {k: str(entry[k]) for k in _FIELDS if k not in _LISTS}
    fields.update({k: tuple(entry[k]) for k in _LISTS if k in entry})
    return Original(**fields)


def originals_dir(environ: Mapping[str, str], repo_root: Path) -> Path:
    """Where the tarballs are: $LOCAL_CCM_ORIGINALS_DIR, else `shared/upstream` beside the
    repository checkout (where CI lays the project's shared files)."""
    if environ.get(DIR_ENV):
        return Path(environ[DIR_ENV])
    return repo_root.parent / "shared" / "upstream"


def missing_tarball_message(original: Original, folder: Path) -> str:
    return (
        f"{original.name}: source tarball {original.tarball} (sha256 {original.sha256}) is not "
        f"in {folder}. Put it there, or point {DIR_ENV} at the folder that holds it "
        f"({original.project} {original.snapshot}, {original.license})."
    )


def key_inputs(original: Original, go: GoInfo) -> dict[str, Any]:
    """Everything that changes the binaries: the cache key is a hash of this."""
    return {
        "recipe": RECIPE,
        "component": original.name,
        "tarball_sha256": original.sha256,
        "go": [go.version, go.goos, go.goarch],
        "env": dict(gobuild.GO_ENV),
        "ldflags": original.ldflags,
        "go_args": list(original.go_args),
        **({"keep": list(original.keep)} if original.keep else {}),
    }


def entry_name(original: Original, go: GoInfo) -> str:
    key = gobuild.cache_key(key_inputs(original, go))
    return gobuild.entry_name(original.name, original.snapshot, go.version, key)


def missing_from_help(help_text: str, original: Original) -> list[str]:
    """The flags of `help_mentions` that `--help` does not name, as `-flag` (Go's flag
    package) or `--flag` (go-flags)."""
    return [
        f
        for f in original.help_mentions
        if not re.search(rf"(?<![\w-])--?{re.escape(f)}(?![\w-])", help_text)
    ]


# ------------------------------------------------------------------ adapter
def load_originals(path: Path = PINS_FILE) -> tuple[Original, ...]:
    with path.open("rb") as f:
        return parse_originals(tomllib.load(f))


@dataclass(frozen=True)
class Built:
    """The published cache entry of each original, by name."""

    entries: Mapping[str, Path]
    infos: Mapping[str, Mapping[str, Any]]

    def path(self, name: str, binary: str) -> Path:
        """A binary of the entry, or a path its `keep` copied from the source."""
        return self.entries[name] / binary


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified_tarball(original: Original, folder: Path) -> Path:
    path = folder / original.tarball
    if not path.is_file():
        raise BuildError(missing_tarball_message(original, folder))
    if (found := _sha256(path)) != original.sha256:
        raise BuildError(
            f"{original.name}: {path} has sha256 {found}, the pin in {PINS_FILE.name} is "
            f"{original.sha256}; refusing to build a different source"
        )
    return path


def _published(entry: Path, original: Original) -> dict[str, Any] | None:
    info = entry / "BUILD_INFO.json"
    if not info.is_file() or not all((entry / b).is_file() for b in original.binaries):
        return None  # a folder without BUILD_INFO.json is never trusted
    if not all((entry / k).exists() for k in original.keep):
        return None
    return dict(json.loads(info.read_text()))


def _unpack(tarball: Path, original: Original, build_root: Path) -> Path:
    """A fresh copy of the source in <cache>/build/<name>-<sha prefix>/<top>."""
    dest = build_root / f"{original.name}-{original.sha256[:12]}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    source = dest / original.top
    if not (source / "go.mod").is_file():
        raise BuildError(f"{original.name}: {tarball.name} has no {original.top}/go.mod")
    return source


def _build(
    original: Original, tarball: Path, cache: Path, go: GoInfo, *, env: Mapping[str, str],
    report: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    source = _unpack(tarball, original, cache / "build")
    bin_root = cache / "bin"
    bin_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{original.name}-", dir=bin_root))
    try:
        cmd = original.command(tmp)
        report(f"{original.name} {original.snapshot}: building: {shlex.join(cmd)}")
        started = time.monotonic()
        gotool.run_go_streaming(cmd[1:], cwd=source, env=env, on_line=lambda _line: None)
        _keep(original, source, tmp)
        info = _describe(original, tmp, cmd, go, time.monotonic() - started)
        (tmp / "BUILD_INFO.json").write_text(json.dumps(info, indent=2) + "\n")
        tmp.chmod(0o755)
        os.rename(tmp, bin_root / entry_name(original, go))
        return info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _keep(original: Original, source: Path, out: Path) -> None:
    for path in original.keep:
        found, dest = source / path, out / path
        if not found.exists():
            raise BuildError(f"{original.name}: {original.tarball} has no {original.top}/{path}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if found.is_dir():
            shutil.copytree(found, dest)
        else:
            shutil.copy2(found, dest)


def _describe(
    original: Original, out: Path, cmd: Sequence[str], go: GoInfo, seconds: float
) -> dict[str, Any]:
    binaries = {}
    for binary in original.binaries:
        help_text = _help(out / binary)
        if missing := missing_from_help(help_text, original):
            raise BuildError(f"{out / binary} --help does not mention {missing}")
        binaries[binary] = {"size": (out / binary).stat().st_size}
    return {
        "component": original.name,
        "version": original.snapshot,
        "project": original.project,
        "commit": original.commit,
        "license": original.license,
        "key": gobuild.cache_key(key_inputs(original, go)),
        "inputs": key_inputs(original, go),
        "go_command": shlex.join(cmd),
        "binaries": binaries,
        "build_seconds": round(seconds, 1),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _help(binary: Path) -> str:
    """`--help` output; Go's flag package and go-flags both exit 0 on it."""
    return gotool.run_binary(binary, ["--help"])


def ensure(
    environ: Mapping[str, str] | None = None,
    report: Callable[[str], None] = print,
    only: Collection[str] = (),
) -> Built:
    """Find or build every original (or those named in ``only``); raise BuildError loudly on
    any failure."""
    environ = os.environ if environ is None else environ
    originals = [o for o in load_originals() if not only or o.name in only]
    folder = originals_dir(environ, REPO_ROOT)
    env = gotool.go_environment(environ)
    go = gotool.read_go_info(env)
    cache = cache_dir(environ)
    cache.mkdir(parents=True, exist_ok=True)
    entries, infos = {}, {}
    for original in originals:
        entry = cache / "bin" / entry_name(original, go)
        info = _published(entry, original)
        if info is None:
            tarball = verified_tarball(original, folder)
            with build_lock(cache, report):
                info = _published(entry, original) or _build(
                    original, tarball, cache, go, env=env, report=report
                )
        report(f"{original.name} {original.snapshot}: {entry}")
        entries[original.name], infos[original.name] = entry, info
    return Built(entries, infos)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.originals")
    parser.add_argument("command", choices=["ensure"])
    parser.parse_args(argv)
    try:
        ensure()
    except BuildError as exc:
        print(f"originals: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
