"""Find or build the control-plane binaries: `python -m tests.support.binaries
ensure [--component ...]` is the single entry point for `make test-bins`, `make test` and the
pytest hooks. A cache hit costs one `go env` and one `go mod edit -json` per unit.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support import gobuild, gotool
from tests.support.buildlock import build_lock, check_free_disk
from tests.support.gotool import BuildError
from tests.support.recipes import (
    BINARY_UNIT,
    INSPECT,
    PREPARE,
    TYPICAL_COLD_SECONDS,
    UNITS,
    Context,
    Plan,
    Report,
    Unit,
    copy_kwok_stages,
    verify_binary,
)

PINS_FILE = Path(__file__).resolve().parents[1] / "control-plane.toml"


@dataclass(frozen=True)
class Binaries:
    """Paths of the ensured binaries, by binary name, plus kwok's stage files."""

    pins: gobuild.Pins
    paths: Mapping[str, Path]
    kwok_stages: Path | None = None
    build_info: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def path(self, binary: str) -> Path:
        if binary not in self.paths:
            raise KeyError(f"{binary} was not ensured (have: {sorted(self.paths)})")
        return self.paths[binary]

    def version(self, binary: str) -> str:
        """The pinned version of a binary, by the name it was ensured under."""
        return str(getattr(self.pins, UNITS[BINARY_UNIT[binary]].pin))


def load_pins(path: Path = PINS_FILE) -> gobuild.Pins:
    with path.open("rb") as f:
        return gobuild.parse_pins(tomllib.load(f))


def cache_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("LOCAL_CCM_TEST_CACHE"):
        return Path(environ["LOCAL_CCM_TEST_CACHE"])
    xdg = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "local-ccm-test"


def units_for(components: Iterable[str] | None) -> dict[str, tuple[str, ...]]:
    """Map requested component or binary names to {unit: binaries wanted}."""
    wanted: dict[str, list[str]] = {}
    for name in components or UNITS:
        if name in UNITS:
            wanted.setdefault(name, []).extend(UNITS[name].provides)
        elif name in BINARY_UNIT:
            wanted.setdefault(BINARY_UNIT[name], []).append(name)
        else:
            known = sorted({*UNITS, *BINARY_UNIT})
            raise BuildError(f"unknown component {name!r}; known: {', '.join(known)}")
    return {u: tuple(dict.fromkeys(b)) for u, b in wanted.items()}


def _published(ctx: Context, plan: Plan) -> tuple[Path, dict[str, Any]] | None:
    name = gobuild.entry_name(plan.unit.name, plan.version, ctx.go.version, plan.key())
    entry = ctx.cache / "bin" / name
    info_file = entry / "BUILD_INFO.json"
    # A directory without BUILD_INFO.json is never trusted.
    if not info_file.is_file() or not all((entry / b).is_file() for b in plan.unit.binaries):
        return None
    return entry, json.loads(info_file.read_text())


def _build(ctx: Context, plan: Plan, prepare_seconds: float) -> tuple[Path, dict[str, Any]]:
    bin_root = ctx.cache / "bin"
    bin_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{plan.unit.name}-", dir=bin_root))
    try:
        return _build_into(ctx, plan, tmp, prepare_seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _Progress:
    """Counts the packages `go build -v` names and reports every `every` seconds."""

    def __init__(self, ctx: Context, plan: Plan, total: int, every: float = 30.0) -> None:
        self.report, self.total, self.every = ctx.report, total, every
        self.name = f"{_label(plan)} {plan.version}"
        self.typical = TYPICAL_COLD_SECONDS.get(plan.unit.name)
        self.compiled = 0
        self.started = self.last = time.monotonic()

    def __call__(self, line: str) -> None:
        self.compiled += gobuild.is_package_line(line)
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            elapsed = now - self.started
            self.report(
                gobuild.progress_text(self.name, self.compiled, self.total, elapsed, self.typical)
            )


def _label(plan: Plan) -> str:
    """The unit's name, plus the binaries when it builds only part of its set."""
    if plan.unit.binaries == UNITS[plan.unit.name].binaries:
        return plan.unit.name
    return f"{plan.unit.name} ({', '.join(plan.unit.binaries)} only)"


def _count_packages(plan: Plan, env: Mapping[str, str]) -> int:
    """How many packages a cold build compiles (0 when unknown: `go install` units)."""
    if not plan.packages:
        return 0
    try:
        out = gotool.run_go(["list", "-deps", *plan.packages], cwd=plan.build_dir, env=env)
    except BuildError:
        return 0  # progress without a total; the build itself reports the real error
    return len(out.split())


def _build_into(
    ctx: Context, plan: Plan, tmp: Path, prepare_seconds: float
) -> tuple[Path, dict[str, Any]]:
    cmd = plan.command(tmp)
    ctx.report(gobuild.cold_build_notice(_label(plan), TYPICAL_COLD_SECONDS.get(plan.unit.name)))
    ctx.report(f"{plan.unit.name} {plan.version}: building: {shlex.join(cmd)}")
    env = gotool.go_environment(ctx.env, {"GOBIN": str(tmp)} if plan.gobin else None)
    plan.build_dir.mkdir(parents=True, exist_ok=True)  # `go install` needs no scratch module
    started = time.monotonic()
    progress = _Progress(ctx, plan, _count_packages(plan, env))
    gotool.run_go_streaming(cmd[1:], cwd=plan.build_dir, env=env, on_line=progress)
    wall = time.monotonic() - started
    binaries = {
        b: {
            "version_output": verify_binary(b, tmp / b, plan.version),
            "size": (tmp / b).stat().st_size,
        }
        for b in plan.unit.binaries
    }
    if plan.unit.name == "kwok":
        copy_kwok_stages(ctx, plan.version, tmp / "stages")
    info = {
        "component": plan.unit.name,
        "version": plan.version,
        "key": plan.key(),
        "inputs": plan.key_inputs,
        "go_command": shlex.join(cmd),
        "build_dir": str(plan.build_dir),
        "binaries": binaries,
        "prepare_seconds": round(prepare_seconds, 1),
        "build_seconds": round(wall, 1),
        "wall_seconds": round(prepare_seconds + wall, 1),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (tmp / "BUILD_INFO.json").write_text(json.dumps(info, indent=2) + "\n")
    tmp.chmod(0o755)
    final = (
        ctx.cache
        / "bin"
        / gobuild.entry_name(plan.unit.name, plan.version, ctx.go.version, plan.key())
    )
    os.rename(tmp, final)
    return final, info


def _remove_abandoned(bin_root: Path) -> None:
    """Delete temporary build directories of killed builds; only call with the lock held."""
    for tmp in bin_root.glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _ensure_unit(ctx: Context, unit: Unit) -> tuple[Path, dict[str, Any], bool]:
    """(entry directory, BUILD_INFO, built now?) for one unit: check, lock, check again, build."""
    version = getattr(ctx.pins, unit.pin)
    bd = ctx.cache / "build" / f"{unit.name}-{version}"
    plan = INSPECT[unit.name](ctx, unit, version, bd)
    if plan and (hit := _published(ctx, plan)):
        return (*hit, False)
    with build_lock(ctx.cache, ctx.report):
        started = time.monotonic()
        plan = INSPECT[unit.name](ctx, unit, version, bd)
        if plan is None:
            ctx.report(f"{unit.name} {version}: preparing scratch module in {bd}")
            PREPARE[unit.name](ctx, unit, version, bd)
            plan = INSPECT[unit.name](ctx, unit, version, bd)
        if plan is None:
            raise BuildError(f"{unit.name} {version}: scratch module in {bd} is still not ready")
        if hit := _published(ctx, plan):
            return (*hit, False)
        check_free_disk([ctx.cache, ctx.go.modcache, ctx.go.gocache])
        _remove_abandoned(ctx.cache / "bin")
        return (*_build(ctx, plan, time.monotonic() - started), True)


def _narrowest(ctx: Context, unit: Unit, provided: Sequence[str]) -> Unit:
    """The unit itself when it is cached or all of it is wanted; otherwise only the wanted part.

    `make dev-cluster` needs kube-apiserver but not kube-controller-manager: on a cold cache it
    builds the one binary. A later full build reuses Go's build cache for the shared packages.
    """
    files = tuple(unit.file_name(b) for b in dict.fromkeys(provided))
    if set(files) == set(unit.binaries) or _cached(ctx, unit):
        return unit
    return replace(unit, binaries=tuple(b for b in unit.binaries if b in files))


def _cached(ctx: Context, unit: Unit) -> bool:
    version = getattr(ctx.pins, unit.pin)
    plan = INSPECT[unit.name](ctx, unit, version, ctx.cache / "build" / f"{unit.name}-{version}")
    return plan is not None and _published(ctx, plan) is not None


def _from_bindir(bindir: Path, binary: str, pins: gobuild.Pins) -> Path | None:
    """`<bindir>/<binary>` under the name it is asked for (kube-apiserver-policy-minimum too)."""
    path = bindir / binary
    if not path.is_file():
        return None
    unit = UNITS[BINARY_UNIT[binary]]
    verify_binary(unit.file_name(binary), path, getattr(pins, unit.pin))
    return path


def ensure(
    components: Iterable[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    report: Report = print,
) -> Binaries:
    """Find or build the requested components; raise BuildError loudly on any failure."""
    environ = os.environ if environ is None else environ
    pins = load_pins()
    wanted = units_for(components)
    bindir = (
        Path(environ["LOCAL_CCM_TEST_BINDIR"]) if environ.get("LOCAL_CCM_TEST_BINDIR") else None
    )
    paths: dict[str, Path] = {}
    for provided in wanted.values():
        for b in provided:
            if bindir and (p := _from_bindir(bindir, b, pins)):
                report(f"{b}: using {p} (LOCAL_CCM_TEST_BINDIR)")
                paths[b] = p
    todo = [u for u, bs in wanted.items() if any(b not in paths for b in bs)]
    need_stages = "kwok" in wanted and not (bindir and (bindir / "stages").is_dir())
    if not todo and not need_stages:
        return Binaries(pins, paths, bindir / "stages" if "kwok" in wanted and bindir else None)
    env = gotool.go_environment(environ)
    cache = cache_dir(environ)
    cache.mkdir(parents=True, exist_ok=True)
    ctx = Context(cache, env, gotool.read_go_info(env), pins, report)
    infos: dict[str, Mapping[str, Any]] = {}
    stages = bindir / "stages" if bindir and not need_stages else None
    for unit in todo:
        entry, info, built = _ensure_unit(ctx, _narrowest(ctx, UNITS[unit], wanted[unit]))
        infos[unit] = info
        report(_timing_line(entry, info, built))
        paths.update({b: entry / UNITS[unit].file_name(b) for b in wanted[unit] if b not in paths})
        stages = entry / "stages" if unit == "kwok" else stages
    if stages is None and "kwok" in wanted:
        stages = _ensure_stages_only(ctx)
    return Binaries(pins, paths, stages, infos)


def _ensure_stages_only(ctx: Context) -> Path:
    """kwok from LOCAL_CCM_TEST_BINDIR without a stages/ directory: copy them into the cache."""
    dest = ctx.cache / "bin" / f"kwok-stages-{ctx.pins.kwok}"
    if not dest.is_dir():
        with build_lock(ctx.cache, ctx.report):
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-kwok-stages-", dir=ctx.cache))
            copy_kwok_stages(ctx, ctx.pins.kwok, tmp)
            if not dest.is_dir():
                os.rename(tmp, dest)
    return dest


def _timing_line(entry: Path, info: Mapping[str, Any], built: bool) -> str:
    how = "built now" if built else f"cache hit, built {info.get('built_at', '?')}"
    return (
        f"{info['component']} {info['version']}: {how}; wall {info.get('wall_seconds')} s "
        f"(prepare {info.get('prepare_seconds')} s, "
        f"go build {info.get('build_seconds')} s) -> {entry}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.binaries")
    sub = parser.add_subparsers(dest="command", required=True)
    p_ensure = sub.add_parser("ensure", help="find or build the control-plane binaries")
    p_ensure.add_argument(
        "--component", action="append", choices=sorted({*UNITS, *BINARY_UNIT}),
        help="build only this component (repeatable); default: all",
    )  # fmt: skip
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        result = ensure(args.component)
    except BuildError as exc:
        print(f"binaries: build failed\n{exc}", file=sys.stderr)
        return 1
    for name, path in sorted(result.paths.items()):
        print(f"  {name}: {path}")
    if result.kwok_stages:
        print(f"  kwok stages: {result.kwok_stages}")
    print(f"ensure took {time.monotonic() - started:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
