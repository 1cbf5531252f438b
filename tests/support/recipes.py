"""How each control-plane component is built: inspecting a scratch
module without the network, preparing it (which may download), and checking a built binary.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support import cpargs, gobuild, gotool
from tests.support.gotool import BuildError, GoInfo

KUBE_MODULE = "k8s.io/kubernetes"
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager")
# A real node: the kubelet, the scheduler that places Pods on it, kubectl for what an
# operator applies, and kube-proxy, which DNATs Service traffic (a LoadBalancer address too) to
# the node's Pods. A unit of its own, so the control plane's cache entry stays valid.
KUBE_NODE_COMMANDS = ("kubelet", "kube-scheduler", "kubectl", "kube-proxy")
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_STAGE_DIRS = ("fast", "heartbeat-with-lease", "chaos")
# Bump when the recipe below changes in a way the key's other inputs do not show.
RECIPE = 1

Report = Callable[[str], None]


@dataclass(frozen=True)
class Unit:
    """One `go build` / `go install`, producing one or more binaries.

    `binaries` are the file names the build writes. A unit of a second version of the same
    commands sets `suffix`: callers then ask for `<file name><suffix>` (e.g.
    `kube-apiserver-policy-minimum`), so the two versions never share a name.
    """

    name: str
    pin: str  # field of gobuild.Pins
    binaries: tuple[str, ...]
    suffix: str = ""

    @property
    def provides(self) -> tuple[str, ...]:
        """The names callers ask for, in the order of `binaries`."""
        return tuple(f"{b}{self.suffix}" for b in self.binaries)

    def file_name(self, provided: str) -> str:
        """The file a provided name stands for (the inverse of `provides`)."""
        return self.binaries[self.provides.index(provided)]


POLICY_MINIMUM = "-policy-minimum"
UNITS = {
    "kubernetes": Unit("kubernetes", "kubernetes", KUBE_COMMANDS),
    # Only the apiserver at the admission policy's oldest version.
    "kubernetes-policy-minimum": Unit(
        "kubernetes-policy-minimum",
        "kubernetes_policy_minimum",
        ("kube-apiserver",),
        POLICY_MINIMUM,
    ),
    "kubernetes-node": Unit("kubernetes-node", "kubernetes", KUBE_NODE_COMMANDS),
    "etcd": Unit("etcd", "etcd", ("etcd",)),
    "kwok": Unit("kwok", "kwok", ("kwok",)),
    "helm": Unit("helm", "helm", ("helm",)),
    "cosign": Unit("cosign", "cosign", ("cosign",)),
    "actionlint": Unit("actionlint", "actionlint", ("actionlint",)),
    "prometheus": Unit("prometheus", "prometheus", ("prometheus", "promtool")),
}
# Build tags of `go install` units. The tests' Prometheus scrapes static targets only:
# remove_all_sd leaves every cloud service discovery (and its SDK) out, which halves the build.
INSTALL_TAGS = {"prometheus": "remove_all_sd"}
# `go install <package>@<pin>` units: the packages each installs (every binary of the unit).
INSTALL_PACKAGES = {
    "kwok": (f"{KWOK_MODULE}/cmd/kwok",),
    "cosign": ("github.com/sigstore/cosign/v3/cmd/cosign",),
    "actionlint": ("github.com/rhysd/actionlint/cmd/actionlint",),
    "prometheus": (
        "github.com/prometheus/prometheus/cmd/prometheus",
        "github.com/prometheus/prometheus/cmd/promtool",
    ),
}
BINARY_UNIT = {b: u.name for u in UNITS.values() for b in u.provides}
# Wall time of each unit's cold build on a 2-core machine (docs/testing.md has the measurements);
# printed before a cold build starts so that a first run is not mistaken for a hang.
TYPICAL_COLD_SECONDS = {
    "kubernetes": 570,
    "kubernetes-policy-minimum": 580,
    "kubernetes-node": 260,  # kube-proxy adds about 20 s (docs/testing.md)
    "etcd": 70,
    "kwok": 105,
    "helm": 130,
    "cosign": 300,
    "actionlint": 40,
    "prometheus": 300,
}
APISERVER_POLICY_MINIMUM = f"kube-apiserver{POLICY_MINIMUM}"


@dataclass(frozen=True)
class Plan:
    """Everything needed to build one unit, and the inputs of its cache key."""

    unit: Unit
    version: str
    build_dir: Path
    go_args: tuple[str, ...]  # "{out}" stands for the temporary output directory
    gobin: bool  # `go install` into GOBIN=<out> instead of `go build -o`
    key_inputs: Mapping[str, Any]
    packages: tuple[str, ...] = ()  # what `go list -deps` counts for build progress

    def key(self) -> str:
        return gobuild.cache_key(self.key_inputs)

    def command(self, out: Path) -> list[str]:
        return ["go", *(a.replace("{out}", str(out)) for a in self.go_args)]


@dataclass(frozen=True)
class Context:
    cache: Path
    env: Mapping[str, str]  # the Go environment
    go: GoInfo
    pins: gobuild.Pins
    report: Report


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def _key_inputs(
    ctx: Context, unit: Unit, version: str, ldflags: str, **extra: Any
) -> dict[str, Any]:
    return {
        "recipe": RECIPE,
        "component": unit.name,
        "version": version,
        "go": [ctx.go.version, ctx.go.goos, ctx.go.goarch],
        "env": dict(gobuild.GO_ENV),
        "tags": "",
        "ldflags": ldflags,
        **extra,
    }


def _requires(module: Mapping[str, Any], path: str, version: str) -> bool:
    return any(r["Path"] == path and r["Version"] == version for r in module.get("Require") or ())


# ------------------------------------------------------------------ kubernetes
def _inspect_kubernetes(ctx: Context, unit: Unit, version: str, bd: Path) -> Plan | None:
    """The plan if the scratch module is ready and matches a fresh derivation, else None."""
    if not (bd / "go.sum").is_file() or not (bd / "kube.json").is_file():
        return None
    # A scratch module prepared for fewer commands lacks go.sum lines the others need: prepare
    # it again instead of failing the build. One prepared before commands.json was written had
    # every command of its unit but kube-proxy (which joined the node's unit later).
    prepared = bd / "commands.json"
    had = (
        json.loads(prepared.read_text())
        if prepared.is_file()
        else [c for c in UNITS[unit.name].binaries if c != "kube-proxy"]
    )
    if not set(UNITS[unit.name].binaries) <= set(had):
        return None
    kube = json.loads((bd / "kube.json").read_text())
    upstream_mod = Path(kube["GoMod"])
    if not upstream_mod.is_file():
        return None
    edits = gobuild.derive_module_edits(gotool.read_module_json(upstream_mod, env=ctx.env), version)
    scratch = gotool.read_module_json(bd / "go.mod", env=ctx.env)
    godebug = gobuild.godebug_in(scratch)
    if (
        sorted(gobuild.replaces_in(scratch)) != sorted(edits.replaces)
        or scratch.get("Go") != edits.go
        or sorted(godebug) != sorted(edits.godebug)
        or not _requires(scratch, KUBE_MODULE, version)
    ):
        return None
    commit = (kube.get("Origin") or {}).get("Hash")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    packages = [f"{KUBE_MODULE}/cmd/{c}" for c in unit.binaries]
    ldflags = gobuild.kube_ldflags(version, commit, now)
    inputs = _key_inputs(
        ctx, unit, version, gobuild.kube_ldflags(version, commit, None),
        replaces=sorted(edits.replaces), go_line=edits.go, godebug=sorted(edits.godebug),
        excludes=sorted(edits.excludes), go_sum=_sha256(bd / "go.sum"), packages=packages,
    )  # fmt: skip
    args = ("build", "-v", "-ldflags", ldflags, "-o", "{out}/", *packages)
    return Plan(unit, version, bd, args, False, inputs, tuple(packages))


def _prepare_kubernetes(ctx: Context, unit: Unit, version: str, bd: Path) -> None:
    env = ctx.env
    bd.mkdir(parents=True, exist_ok=True)
    if not (bd / "go.mod").is_file():
        gotool.run_go(["mod", "init", "local-ccm-test.invalid/kube"], cwd=bd, env=env)
    kube = gotool.module_download(f"{KUBE_MODULE}@{version}", cwd=bd, env=env)
    (bd / "kube.json").write_text(json.dumps(kube, indent=2))
    upstream = gotool.read_module_json(Path(kube["GoMod"]), env=env)
    (bd / "upstream.json").write_text(json.dumps(upstream, indent=2))
    edits = gobuild.derive_module_edits(upstream, version)
    ctx.report(
        f"{unit.name} {version}: go {edits.go}, godebug {list(edits.godebug)}, "
        f"{len(edits.replaces)} replace lines derived from upstream go.mod"
    )
    stale = set(gobuild.replaces_in(gotool.read_module_json(bd / "go.mod", env=env)))
    drops = [f"-dropreplace={old}" for old, _ in stale - set(edits.replaces)]
    gotool.run_go(["mod", "edit", *drops, *edits.edit_args()], cwd=bd, env=env)
    # Every command of the unit's full set, so that a scratch module first prepared for a
    # partial build (kube-apiserver alone, for the demo) serves the full build too.
    commands = UNITS[unit.name].binaries
    gotool.run_go(["get", *(f"{KUBE_MODULE}/cmd/{c}@{version}" for c in commands)], cwd=bd, env=env)
    (bd / "commands.json").write_text(json.dumps(list(commands)))


# ------------------------------------------------------------------ etcd
def _inspect_etcd(ctx: Context, unit: Unit, version: str, bd: Path) -> Plan | None:
    if not (bd / "go.sum").is_file():
        return None
    if not _requires(gotool.read_module_json(bd / "go.mod", env=ctx.env), ETCD_PACKAGE, version):
        return None
    inputs = _key_inputs(ctx, unit, version, "-s -w", go_sum=_sha256(bd / "go.sum"))
    # Name the output: the package path ends in /v3.
    args = ("build", "-v", "-ldflags", "-s -w", "-o", "{out}/etcd", ETCD_PACKAGE)
    return Plan(unit, version, bd, args, False, inputs, (ETCD_PACKAGE,))


def _prepare_etcd(ctx: Context, unit: Unit, version: str, bd: Path) -> None:
    bd.mkdir(parents=True, exist_ok=True)
    if not (bd / "go.mod").is_file():
        gotool.run_go(["mod", "init", "local-ccm-test.invalid/etcd"], cwd=bd, env=ctx.env)
    gotool.run_go(["get", f"{ETCD_PACKAGE}@{version}"], cwd=bd, env=ctx.env)


# ------------------------------------------------------------------ go install units
def _inspect_install(ctx: Context, unit: Unit, version: str, bd: Path) -> Plan:
    pkgs: tuple[str, ...]
    if unit.name == "helm":
        major, _ = gobuild.major_minor(version)
        pkgs, ldflags = (f"helm.sh/helm/v{major}/cmd/helm",), gobuild.helm_ldflags(version)
    elif unit.name == "prometheus":
        pkgs, ldflags = INSTALL_PACKAGES[unit.name], gobuild.prometheus_ldflags(version)
    else:
        pkgs, ldflags = INSTALL_PACKAGES[unit.name], ""
    wanted = tuple(f"{p}@{version}" for p in pkgs)
    tags = INSTALL_TAGS.get(unit.name, "")
    args = (
        "install",
        "-v",
        *(("-tags", tags) if tags else ()),
        *(("-ldflags", ldflags) if ldflags else ()),
        *wanted,
    )
    pkg = wanted[0] if len(wanted) == 1 else list(wanted)
    inputs = _key_inputs(ctx, unit, version, ldflags, package=pkg)
    inputs["tags"] = tags
    if unit.name == "kwok":
        inputs["stages"] = list(KWOK_STAGE_DIRS)
    return Plan(unit, version, bd, args, True, inputs)


def _prepare_nothing(ctx: Context, unit: Unit, version: str, bd: Path) -> None:
    bd.mkdir(parents=True, exist_ok=True)


INSPECT = {
    "kubernetes": _inspect_kubernetes,
    "kubernetes-policy-minimum": _inspect_kubernetes,
    "kubernetes-node": _inspect_kubernetes,
    "etcd": _inspect_etcd,
    "kwok": _inspect_install,
    "helm": _inspect_install,
    "cosign": _inspect_install,
    "actionlint": _inspect_install,
    "prometheus": _inspect_install,
}
PREPARE = {
    "kubernetes": _prepare_kubernetes,
    "kubernetes-policy-minimum": _prepare_kubernetes,
    "kubernetes-node": _prepare_kubernetes,
    "etcd": _prepare_etcd,
    "kwok": _prepare_nothing,
    "helm": _prepare_nothing,
    "cosign": _prepare_nothing,
    "actionlint": _prepare_nothing,
    "prometheus": _prepare_nothing,
}


def copy_kwok_stages(ctx: Context, version: str, dest: Path) -> None:
    """Copy kwok's node stage files out of its module source, so tests need no module cache."""
    src = Path(
        gotool.module_download(f"{KWOK_MODULE}@{version}", cwd=ctx.cache, env=ctx.env)["Dir"]
    )
    dest.mkdir(parents=True, exist_ok=True)
    for sub in KWOK_STAGE_DIRS:
        stage_dir = src / "kustomize" / "stage" / "node" / sub
        files = [f for f in sorted(stage_dir.glob("*.yaml")) if f.name != "kustomization.yaml"]
        if not files:
            raise BuildError(f"kwok {version}: no stage files in {stage_dir}")
        for f in files:
            (dest / f.name).write_bytes(f.read_bytes())
            (dest / f.name).chmod(0o644)


# ------------------------------------------------------------------ checks and publishing
def verify_binary(binary: str, path: Path, pin: str) -> str:
    """Run `--version` (and `--help` where we rely on flag names); return the version output."""
    out = gotool.run_binary(path, gobuild.version_command(binary))
    if problem := gobuild.version_problem(binary, pin, out):
        raise BuildError(f"{path}: {problem}")
    if binary == "kube-apiserver":
        _check_help(path, cpargs.apiserver_flags_used(), cpargs.ADMISSION_PLUGINS)
    elif binary == "kube-controller-manager":
        controllers = (*cpargs.NODE_LIFECYCLE_CONTROLLERS, *cpargs.REAL_NODE_CONTROLLERS)
        _check_help(path, cpargs.kcm_flags_used(), controllers)
    return out.strip()


def _check_help(path: Path, flags: Sequence[str], words: Sequence[str]) -> None:
    text = gotool.run_binary(path, ["--help"])
    (path.parent / f"{path.name}.help.txt").write_text(text)
    if missing := gobuild.missing_from_help(text, flags, words):
        raise BuildError(f"{path} --help does not mention names the harness uses: {missing}")
