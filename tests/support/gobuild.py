"""Decisions for building the control-plane binaries. Pure, no I/O.

Everything here turns facts already read (pins, an upstream go.mod as `go mod edit -json`
prints it, `go env`, `--version` output) into values: the scratch module's edits, ldflags,
the cache key and directory names, and version checks.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Never download a toolchain, build static binaries, embed no cache paths.
GO_ENV = {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-trimpath"}
_RELEASE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_ANY_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")
VERSION_STAMPED_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")


@dataclass(frozen=True)
class Pins:
    kubernetes: str
    kubernetes_policy_minimum: str  # the oldest Kubernetes the admission policy supports
    etcd: str
    kwok: str
    helm: str
    # Release tooling the tests run as the real programs: signing, the workflow linter, and
    # Prometheus with promtool (one module, both binaries).
    cosign: str
    actionlint: str
    prometheus: str


PIN_FIELDS = (
    "kubernetes",
    "kubernetes_policy_minimum",
    "etcd",
    "kwok",
    "helm",
    "cosign",
    "actionlint",
    "prometheus",
)


def parse_pins(data: Mapping[str, Any]) -> Pins:
    """Validate the pins table; every problem is reported at once. Pre-releases are refused."""
    problems = [f"{k}: missing" for k in PIN_FIELDS if k not in data]
    problems += [
        f"{k}: {data[k]!r} is not a release version vX.Y.Z"
        for k in PIN_FIELDS
        if k in data and not (isinstance(data[k], str) and _RELEASE.match(data[k]))
    ]
    problems += [f"{k}: unknown pin" for k in data if k not in PIN_FIELDS]
    if not problems:
        problems += _minimum_problems(data["kubernetes"], data["kubernetes_policy_minimum"])
    if problems:
        raise ValueError("tests/control-plane.toml: " + "; ".join(problems))
    return Pins(**{k: data[k] for k in PIN_FIELDS})


def _minimum_problems(newest: str, minimum: str) -> list[str]:
    """The second apiserver must be a Kubernetes v1.x of an older minor than the newest pin."""
    new_major, new_minor = major_minor(newest)
    min_major, min_minor = major_minor(minimum)
    if (min_major, new_major) != ("1", "1") or int(min_minor) >= int(new_minor):
        return [f"kubernetes_policy_minimum: {minimum} is not an older v1 minor than {newest}"]
    return []


def staging_version(kube_version: str) -> str:
    """k8s.io/kubernetes v1.37.N publishes its staging libraries as v0.37.N (pre-releases alike)."""
    m = _ANY_VERSION.match(kube_version)
    if not m or m.group(1) != "1":
        raise ValueError(f"not a Kubernetes v1.x version: {kube_version!r}")
    return f"v0.{m.group(2)}.{m.group(3)}{m.group(4) or ''}"


def major_minor(version: str) -> tuple[str, str]:
    m = _ANY_VERSION.match(version)
    if not m:
        raise ValueError(f"not a semantic version: {version!r}")
    return m.group(1), m.group(2)


@dataclass(frozen=True)
class ModuleEdits:
    """What the scratch module copies from, or derives out of, the upstream go.mod."""

    replaces: tuple[tuple[str, str], ...]  # (old, new) in `go mod edit -replace=old=new` form
    excludes: tuple[str, ...]  # path@version
    go: str
    godebug: tuple[str, ...]  # key=value

    def edit_args(self) -> list[str]:
        """Arguments for one `go mod edit` call applying all edits."""
        args = [f"-replace={old}={new}" for old, new in self.replaces]
        args += [f"-exclude={e}" for e in self.excludes]
        args += [f"-go={self.go}"] if self.go else []
        args += [f"-godebug={g}" for g in self.godebug]
        return args


def _module_ref(mod: Mapping[str, Any]) -> str:
    version = mod.get("Version") or ""
    return f"{mod['Path']}@{version}" if version else str(mod["Path"])


def _is_local_path(path: str) -> bool:
    return path.startswith(("./", "../", "/"))


def derive_module_edits(upstream: Mapping[str, Any], kube_version: str) -> ModuleEdits:
    """The scratch module's edits, derived from k8s.io/kubernetes's own go.mod.

    Every `k8s.io/<name> v0.0.0` requirement is a staging library living in the repository
    (not in the module zip), so it is replaced by its published tag. Upstream replace lines
    that point at real modules, and exclude lines, are copied; directory replaces are the
    staging ones and are dropped.
    """
    tag = staging_version(kube_version)
    staging = sorted(
        r["Path"]
        for r in upstream.get("Require") or ()
        if r["Path"].startswith("k8s.io/") and r["Version"] == "v0.0.0"
    )
    replaces = [(path, f"{path}@{tag}") for path in staging]
    for rep in upstream.get("Replace") or ():
        if not _is_local_path(rep["New"]["Path"]) and rep["Old"]["Path"] not in staging:
            replaces.append((_module_ref(rep["Old"]), _module_ref(rep["New"])))
    excludes = tuple(_module_ref(e) for e in upstream.get("Exclude") or ())
    return ModuleEdits(
        tuple(replaces), excludes, str(upstream.get("Go") or ""), godebug_in(upstream)
    )


def godebug_in(module: Mapping[str, Any]) -> tuple[str, ...]:
    """The godebug lines (key=value) of a `go mod edit -json` document (its key is "GoDebug")."""
    return tuple(f"{g['Key']}={g['Value']}" for g in module.get("GoDebug") or ())


def replaces_in(module: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The replace lines of a `go mod edit -json` document, in the same form as ModuleEdits."""
    return tuple(
        (_module_ref(r["Old"]), _module_ref(r["New"])) for r in module.get("Replace") or ()
    )


def kube_ldflags(kube_version: str, commit: str | None, build_date: str | None) -> str:
    """Upstream's version stamping (hack/lib/version.sh) for both version packages.

    `build_date=None` leaves buildDate out, which is the form used for the cache key.
    """
    major, minor = major_minor(kube_version)
    values = {
        "gitVersion": kube_version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    if commit:
        values["gitCommit"] = commit
    if build_date:
        values["buildDate"] = build_date
    flags = ["-s", "-w"]
    for pkg in VERSION_STAMPED_PACKAGES:
        flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def helm_ldflags(helm_version: str) -> str:
    major, _ = major_minor(helm_version)
    return f"-s -w -X helm.sh/helm/v{major}/internal/version.version={helm_version}"


def prometheus_release(module_version: str) -> str:
    """Prometheus 3.x.y is published as the Go module version v0.3xx.y (v0.316.0 is 3.16.0)."""
    m = re.fullmatch(r"v0\.(\d)(\d\d)\.(\d+)", module_version)
    if not m:
        raise ValueError(f"{module_version!r} is not a Prometheus module version v0.3xx.y")
    return f"{m[1]}.{int(m[2])}.{m[3]}"


def prometheus_ldflags(module_version: str) -> str:
    release = prometheus_release(module_version)
    return f"-s -w -X github.com/prometheus/common/version.Version={release}"


def cache_key(inputs: Mapping[str, Any]) -> str:
    """A short hash of everything that changes a binary."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def entry_name(component: str, version: str, go_version: str, key: str) -> str:
    return f"{component}-{version}-{go_version}-{key}"


# What each binary's version output must contain for a given pin.
_VERSION_TEXT = {
    **dict.fromkeys(
        ("kube-apiserver", "kube-controller-manager", "kubelet", "kube-scheduler", "kube-proxy"),
        "Kubernetes {pin}",
    ),
    "kubectl": "Client Version: {pin}",
    "etcd": "etcd Version: {bare}",
    "kwok": "kwok version {pin}",
    "helm": 'Version:"{pin}"',
    "cosign": "GitVersion:    {pin}",
    "actionlint": "{pin}",
    "prometheus": "version {prometheus}",
    "promtool": "version {prometheus}",
}


def expected_version_text(binary: str, pin: str) -> str:
    if binary not in _VERSION_TEXT:
        raise ValueError(f"unknown binary {binary!r}")
    prometheus = prometheus_release(pin) if "{prometheus}" in _VERSION_TEXT[binary] else ""
    return _VERSION_TEXT[binary].format(pin=pin, bare=pin.removeprefix("v"), prometheus=prometheus)


def version_command(binary: str) -> list[str]:
    if binary == "kubectl":
        return ["version", "--client"]
    if binary == "actionlint":
        return ["-version"]
    return ["version"] if binary in ("helm", "cosign") else ["--version"]


def version_problem(binary: str, pin: str, output: str) -> str | None:
    """None when `output` shows the pinned version, otherwise a message saying what differs."""
    want = expected_version_text(binary, pin)
    if want in output:
        return None
    return f"{binary}: version output does not contain {want!r}:\n{output.strip()}"


def _mentions(help_text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", help_text) is not None


def missing_from_help(help_text: str, flags: Sequence[str], words: Sequence[str]) -> list[str]:
    """Flags (`--name`) and plain names (plugins, controllers) that `--help` does not mention."""
    missing = [f"--{f}" for f in flags if not _mentions(help_text, f"--{f}")]
    return missing + [w for w in words if not _mentions(help_text, w)]


def _minutes(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


def is_package_line(line: str) -> bool:
    """`go build -v` names each package it compiles on a line of its own; anything else
    (`# pkg` headers, compiler messages, download notes) has a space or a colon."""
    return bool(line) and " " not in line and ":" not in line and not line.startswith("#")


def progress_text(
    name: str, compiled: int, total: int, elapsed: float, typical: float | None
) -> str:
    """One progress line of a cold build: packages compiled, time spent, time left.

    The estimate extrapolates the rate so far; `typical` (a measured cold build of the same
    unit) is quoted beside it, because early packages (the standard library) compile faster
    than the big generated API packages at the end.
    """
    head = f"{name}: {compiled} packages compiled"
    if total:
        head = f"{name}: {min(compiled, total)}/{total} packages compiled"
        head += f" ({100 * min(compiled, total) // total} %)"
    parts = [head, f"{_minutes(elapsed)} elapsed"]
    if total and compiled:
        left = max(0.0, elapsed * (total - compiled) / compiled)
        parts.append(f"about {_minutes(left)} left at this rate")
    if typical:
        parts.append(f"a cold build took {_minutes(typical)} on 2 cores")
    return ", ".join(parts)


def cold_build_notice(name: str, typical: float | None) -> str:
    """The line printed before a cold build starts."""
    if not typical:
        return f"{name}: not in the cache, building it now (progress every 30 s)"
    return (
        f"{name}: not in the cache, building it now; a cold build took about "
        f"{_minutes(typical)} on a 2-core machine (progress every 30 s)"
    )
