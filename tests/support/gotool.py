"""Runs the `go` command for the binary builds: the only adapter to Go."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.gobuild import GO_ENV

log = logging.getLogger(__name__)


class BuildError(RuntimeError):
    """A build step failed; the message carries the whole command line and its whole stderr."""


@dataclass(frozen=True)
class GoInfo:
    version: str  # e.g. go1.26.8
    goos: str
    goarch: str
    modcache: Path
    gocache: Path


def go_environment(
    base: Mapping[str, str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The caller's environment with GOTOOLCHAIN=local, CGO_ENABLED=0 and -trimpath forced;
    GOPROXY/GOSUMDB are left alone (the version-control hosts behind `direct` are unreachable)."""
    env = dict(base)
    env.update(GO_ENV)
    env.update(extra or {})
    return env


def run_go(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 3 * 3600,
) -> str:
    """Run `go <args>` and return stdout; raise BuildError with the full command and stderr."""
    cmd = ["go", *args]
    log.debug("running %s in %s", shlex.join(cmd), cwd)
    try:
        done = subprocess.run(
            cmd,
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"command failed: {shlex.join(cmd)}\n(in {cwd})\n{exc}") from exc
    if done.returncode != 0:
        raise BuildError(
            f"command failed with exit code {done.returncode}: {shlex.join(cmd)}\n"
            f"(in {cwd}, GOTOOLCHAIN={env.get('GOTOOLCHAIN')} CGO_ENABLED={env.get('CGO_ENABLED')}"
            f" GOFLAGS={env.get('GOFLAGS')})\n--- stderr ---\n{done.stderr}"
        )
    return done.stdout


def run_go_streaming(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    on_line: Callable[[str], None],
) -> None:
    """Run `go <args>`, handing each stderr line to `on_line` as it comes (`go build -v` names
    every package it compiles there); raise BuildError with the command and the last stderr
    lines on failure."""
    cmd = ["go", *args]
    tail: deque[str] = deque(maxlen=200)
    try:
        with subprocess.Popen(
            cmd, cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        ) as proc:  # fmt: skip
            assert proc.stderr is not None
            for line in proc.stderr:
                tail.append(line)
                on_line(line.rstrip("\n"))
            code = proc.wait()
    except OSError as exc:
        raise BuildError(f"command failed: {shlex.join(cmd)}\n(in {cwd})\n{exc}") from exc
    if code != 0:
        raise BuildError(
            f"command failed with exit code {code}: {shlex.join(cmd)}\n(in {cwd})\n"
            f"--- stderr (last {len(tail)} lines) ---\n{''.join(tail)}"
        )


def run_go_json(args: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> dict[str, Any]:
    out = run_go(args, cwd=cwd, env=env)
    data = json.loads(out)
    if not isinstance(data, dict):
        raise BuildError(f"go {' '.join(args)}: expected a JSON object, got {out[:200]!r}")
    return data


def read_go_info(env: Mapping[str, str]) -> GoInfo:
    data = run_go_json(
        ["env", "-json", "GOVERSION", "GOOS", "GOARCH", "GOMODCACHE", "GOCACHE"],
        cwd=Path(os.sep),
        env=env,
    )
    return GoInfo(
        data["GOVERSION"],
        data["GOOS"],
        data["GOARCH"],
        Path(data["GOMODCACHE"]),
        Path(data["GOCACHE"]),
    )


def read_module_json(go_mod: Path, *, env: Mapping[str, str]) -> dict[str, Any]:
    """`go mod edit -json <file>`: go's own parse of a go.mod, never a regex of ours."""
    return run_go_json(["mod", "edit", "-json", str(go_mod)], cwd=go_mod.parent, env=env)


def module_download(ref: str, *, cwd: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`go mod download -json <path@version>`: .GoMod, .Dir, .Origin.Hash (when present)."""
    data = run_go_json(["mod", "download", "-json", ref], cwd=cwd, env=env)
    if data.get("Error"):
        raise BuildError(f"go mod download -json {ref}: {data['Error']}")
    return data


def run_binary(path: Path, args: Sequence[str], *, timeout: float = 60) -> str:
    """Run a built binary briefly (e.g. --version, --help) and return stdout+stderr."""
    cmd = [str(path), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"command failed: {shlex.join(cmd)}\n{exc}") from exc
    if done.returncode != 0:
        raise BuildError(
            f"command failed with exit code {done.returncode}: {shlex.join(cmd)}\n"
            f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        )
    return done.stdout + done.stderr
