"""The Helm chart under test: render it with the built helm binary, parse the
output, and send rendered objects to the test apiserver as server-side apply.

Helm runs with its own HELM_CACHE_HOME / HELM_CONFIG_HOME / HELM_DATA_HOME in a temporary
directory, so a developer's Helm setup is never read or written, and always with
``--kube-version`` (Helm v4's default comes from its client library, not from any cluster).
Server-side apply goes through ``http.client`` with the admin certificate, because the check
needs the response's ``Warning`` headers, which the product's REST layer does not expose.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import yaml

from tests.support.adminhttp import AdminHttp

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "local-ccm"
CI_DIR = CHART / "ci"
DEPLOY = REPO / "deploy"
PINS = REPO / "tests" / "control-plane.toml"
#: The oldest Kubernetes the chart claims (Chart.yaml kubeVersion: the oldest the tests run a
#: real kube-apiserver of) and the oldest with the admission policy (ValidatingAdmissionPolicy
#: is GA from 1.30): the same minor.
OLDEST_KUBE_VERSION = "1.30.0"
OLDEST_POLICY_KUBE_VERSION = "1.30.0"
#: The oldest Kubernetes the chart renders node-ipam-controller for (its CRD's CEL rules).
IPAM_MINIMUM_KUBE_VERSION = "1.31.0"
#: What `make manifests` renders with; the IPAM files are rendered for
#: IPAM_MINIMUM_KUBE_VERSION (the chart refuses IPAM below it).
STATIC_KUBE_VERSION = "1.30.0"
FIELD_MANAGER = "local-ccm-chart-test"


def pinned_kube_version(pins: Path = PINS) -> str:
    """The control plane's Kubernetes version without the leading ``v`` (e.g. ``1.37.1``)."""
    return str(tomllib.loads(pins.read_text())["kubernetes"]).removeprefix("v")


def ci_values() -> list[Path]:
    """Every ``charts/local-ccm/ci/*-values.yaml``, sorted."""
    return sorted(CI_DIR.glob("*-values.yaml"))


def values_set_name(path: Path) -> str:
    return path.name.removesuffix("-values.yaml")


@dataclass(frozen=True)
class HelmResult:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass(frozen=True)
class Helm:
    """The helm binary with private HELM_* directories under ``home``."""

    binary: Path
    home: Path

    def env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[var] = str(self.home / var.lower())
        return env

    def run(self, *args: str, timeout: float = 120.0) -> HelmResult:
        done = subprocess.run(
            [str(self.binary), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return HelmResult(done.returncode, done.stdout, done.stderr)

    def template_result(
        self,
        *,
        kube_version: str,
        release: str = "local-ccm",
        namespace: str = "kube-system",
        values: Sequence[Path] = (),
        set_values: Mapping[str, str] = {},
        chart: Path = CHART,
    ) -> HelmResult:
        """``helm template`` (with CRDs); the caller checks the exit code."""
        args = ["template", release, str(chart), "--namespace", namespace]
        args += ["--kube-version", kube_version, "--include-crds"]
        args += _value_args(values, set_values)
        return self.run(*args)

    def template(self, **kwargs: Any) -> str:
        """Rendered YAML; raises AssertionError with helm's output on failure."""
        result = self.template_result(**kwargs)
        if result.code != 0:
            raise AssertionError(f"helm template failed ({result.code}):\n{result.output}")
        return result.stdout

    def notes(
        self, *, values: Sequence[Path] = (), set_values: Mapping[str, str] = {}
    ) -> HelmResult:
        """NOTES.txt as ``helm install --dry-run=client`` prints it. ``install`` has no
        ``--kube-version``: the client library's version applies (Helm v4: a current one)."""
        args = ["install", "notes", str(CHART), "--dry-run=client"]
        return self.run(*args, *_value_args(values, set_values))

    def lint(
        self,
        *,
        kube_version: str,
        values: Sequence[Path] = (),
        set_values: Mapping[str, str] = {},
        chart: Path = CHART,
    ) -> HelmResult:
        args = ["lint", str(chart), "--strict", "--kube-version", kube_version]
        return self.run(*args, *_value_args(values, set_values))


def _value_args(values: Sequence[Path], set_values: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for path in values:
        args += ["-f", str(path)]
    for key, value in set_values.items():
        args += ["--set", f"{key}={value}"]
    return args


@contextmanager
def helm(binary: Path) -> Iterator[Helm]:
    """A :class:`Helm` whose private directories are removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="local-ccm-helm-"))
    try:
        yield Helm(binary, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


# ------------------------------------------------------------------ rendered objects
def parse(rendered: str) -> list[Obj]:
    """The non-empty documents of a multi-document YAML stream."""
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def select(objs: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = select(objs, kind, name)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def workloads(objs: Iterable[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]


def container(workload: Obj) -> Obj:
    containers: list[Obj] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    return containers[0]


def args_of(workload: Obj) -> list[str]:
    return list(container(workload)["args"])


def flag(workload: Obj, name: str) -> str | None:
    """The value of ``--name=value`` in the workload's args (the last one wins), else None."""
    prefix = f"--{name}="
    values = [a.removeprefix(prefix) for a in args_of(workload) if a.startswith(prefix)]
    return values[-1] if values else None


def component(objs: Iterable[Obj], name: str) -> Obj:
    """The workload whose pods carry ``app.kubernetes.io/component: name``."""
    for w in workloads(objs):
        labels = w["spec"]["template"]["metadata"]["labels"]
        if labels.get("app.kubernetes.io/component") == name:
            return w
    raise AssertionError(f"no workload for component {name}")


# ------------------------------------------------------------------ API paths
@dataclass(frozen=True)
class Kind:
    plural: str
    namespaced: bool


KINDS: Mapping[str, Kind] = {
    "ServiceAccount": Kind("serviceaccounts", True),
    "Pod": Kind("pods", True),
    "ConfigMap": Kind("configmaps", True),
    "Namespace": Kind("namespaces", False),
    "ClusterRole": Kind("clusterroles", False),
    "ClusterRoleBinding": Kind("clusterrolebindings", False),
    "Role": Kind("roles", True),
    "RoleBinding": Kind("rolebindings", True),
    "DaemonSet": Kind("daemonsets", True),
    "Deployment": Kind("deployments", True),
    "PodDisruptionBudget": Kind("poddisruptionbudgets", True),
    "ValidatingAdmissionPolicy": Kind("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": Kind("validatingadmissionpolicybindings", False),
    "CustomResourceDefinition": Kind("customresourcedefinitions", False),
    "PodMonitor": Kind("podmonitors", True),
    "PrometheusRule": Kind("prometheusrules", True),
    "LoadBalancerIPPool": Kind("loadbalancerippools", False),
}


def object_path(obj: Obj, namespace: str) -> str:
    """The REST path of ``obj`` (namespaced objects without a namespace go to ``namespace``)."""
    kind = KINDS[obj["kind"]]
    api_version = obj["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    name = quote(obj["metadata"]["name"], safe="")
    if kind.namespaced:
        ns = obj["metadata"].get("namespace") or namespace
        return f"{base}/namespaces/{ns}/{kind.plural}/{name}"
    return f"{base}/{kind.plural}/{name}"


@dataclass(frozen=True)
class ApplyResult:
    status: int
    body: Any
    warnings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.warnings


def server_side_apply(
    admin: AdminHttp,
    obj: Obj,
    *,
    namespace: str,
    dry_run: bool,
    field_manager: str = FIELD_MANAGER,
) -> ApplyResult:
    """Server-side apply with ``fieldValidation=Strict`` (and ``dryRun=All`` if asked);
    ``warnings`` holds every ``Warning`` response header."""
    query: dict[str, str] = {
        "fieldManager": field_manager,
        "fieldValidation": "Strict",
        "force": "true",
    }
    if dry_run:
        query["dryRun"] = "All"
    path = f"{object_path(obj, namespace)}?{urlencode(query)}"
    ctx = ssl.create_default_context(cafile=str(admin.ca_file))
    ctx.load_cert_chain(str(admin.cert_file), str(admin.key_file))
    conn = http.client.HTTPSConnection("127.0.0.1", admin.port, context=ctx, timeout=30)
    try:
        headers = {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"}
        conn.request("PATCH", path, body=json.dumps(obj).encode(), headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        warnings = tuple(resp.headers.get_all("Warning") or ())
        return ApplyResult(resp.status, json.loads(body) if body else None, warnings)
    finally:
        conn.close()


def apply_all(
    admin: AdminHttp, objs: Iterable[Obj], *, namespace: str, dry_run: bool
) -> list[tuple[Obj, ApplyResult]]:
    """Apply each object; returns the ones that failed or warned (empty = all good)."""
    failures = []
    for obj in objs:
        result = server_side_apply(admin, obj, namespace=namespace, dry_run=dry_run)
        if not result.ok:
            failures.append((obj, result))
    return failures


def describe_failures(failures: Sequence[tuple[Obj, ApplyResult]]) -> str:
    lines = []
    for obj, result in failures:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        message = result.body.get("message") if isinstance(result.body, dict) else result.body
        lines.append(f"{what}: HTTP {result.status} {message} warnings={list(result.warnings)}")
    return "\n".join(lines)


# ------------------------------------------------------------------ one component's RBAC, in a test
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
DEFAULT_RELEASE = "local-ccm"
DEFAULT_NAMESPACE = "kube-system"


def render_defaults(h: Helm, kube_version: str) -> list[Obj]:
    """The chart with its default values, as release ``local-ccm`` in ``kube-system``."""
    rendered = h.template(
        kube_version=kube_version, release=DEFAULT_RELEASE, namespace=DEFAULT_NAMESPACE
    )
    return parse(rendered)


def shipped_rbac(helm_binary: Path, component: str) -> ShippedRbac:
    """``component``'s RBAC from a default render for the pinned Kubernetes version (~0.2 s:
    a session-scoped fixture calls this once)."""
    with helm(helm_binary) as h:
        return ShippedRbac.of(render_defaults(h, pinned_kube_version()), component)


@dataclass(frozen=True)
class RbacTarget:
    """Where one test puts a component's RBAC: ClusterRoles, Roles and bindings renamed
    ``<prefix><rest of the chart's name>``, the ServiceAccount ``service_account`` in
    ``namespace``, objects of the release namespace moved there (others, e.g. the events Role
    in ``default``, stay), the test's labels added. Rules and roleRef kinds are untouched."""

    prefix: str
    service_account: str
    namespace: str
    labels: Mapping[str, str]

    def name_of(self, kind: str, name: str) -> str:
        if kind == "ServiceAccount":
            return self.service_account
        if not name.startswith(DEFAULT_RELEASE):
            raise AssertionError(f"{kind} {name!r} is not named after the release")
        return self.prefix + name.removeprefix(DEFAULT_RELEASE)

    def namespace_of(self, namespace: str | None) -> str:
        return self.namespace if namespace in (None, DEFAULT_NAMESPACE) else str(namespace)

    def subject(self, subject: Obj) -> Obj:
        if subject["kind"] != "ServiceAccount" or subject.get("namespace") != DEFAULT_NAMESPACE:
            return dict(subject)
        return {**subject, "name": self.service_account, "namespace": self.namespace}

    def adapt(self, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        meta = out["metadata"]
        meta["name"] = self.name_of(out["kind"], meta["name"])
        meta["labels"] = {**meta.get("labels", {}), **self.labels}
        if KINDS[out["kind"]].namespaced:
            meta["namespace"] = self.namespace_of(meta.get("namespace"))
        if "roleRef" in out:
            ref = out["roleRef"]
            ref["name"] = self.name_of(ref["kind"], ref["name"])
        if "subjects" in out:
            out["subjects"] = [self.subject(s) for s in out["subjects"]]
        return out


@dataclass(frozen=True)
class ShippedRbac:
    """One component's ServiceAccount, (Cluster)Roles and bindings exactly as the chart ships
    them (:func:`render_defaults`), so tests run under the real RBAC, not a copy of it."""

    objects: tuple[Obj, ...]

    @classmethod
    def of(cls, rendered: Iterable[Obj], component: str) -> ShippedRbac:
        label = "app.kubernetes.io/component"
        found = tuple(
            o for o in rendered
            if o["kind"] in RBAC_KINDS and o["metadata"].get("labels", {}).get(label) == component
        )  # fmt: skip
        if not found:
            raise AssertionError(f"the chart renders no RBAC for component {component}")
        return cls(found)

    def for_test(self, target: RbacTarget) -> list[Obj]:
        return [target.adapt(o) for o in self.objects]


def bound_to_user(objs: Iterable[Obj], user: str) -> list[Obj]:
    """``objs`` without the ServiceAccount, every binding's subject the client-certificate user
    ``user`` instead (an agent authenticating with a certificate, e.g. the benchmarks)."""
    rbac = "rbac.authorization.k8s.io"
    subject = {"kind": "User", "name": user, "apiGroup": rbac}
    return [
        {**o, "subjects": [subject]} if "subjects" in o else o
        for o in objs
        if o["kind"] != "ServiceAccount"
    ]


# ------------------------------------------------------------------ static manifests
STATIC_NAMESPACE = "kube-system"
STATIC_VALUES = (DEPLOY / "values" / "static.yaml",)
TALOS_VALUES = (*STATIC_VALUES, DEPLOY / "values" / "talos.yaml")
IPAM_ON = {"nodeIpamController.enabled": "true"}
_AGENT_RBAC = ("agent-serviceaccount", "agent-clusterrole", "agent-clusterrolebinding",
               "agent-events-role")  # fmt: skip
# Both controllers' files carry the metrics-reader ClusterRole: either may be applied alone.
_NLC_RBAC = ("nlc-serviceaccount", "nlc-clusterrole", "nlc-lease-role", "nlc-events-role",
             "metrics-reader-clusterrole")  # fmt: skip
_IPAM_RBAC = ("ipam-serviceaccount", "ipam-clusterrole", "ipam-lease-role", "ipam-events-role",
              "metrics-reader-clusterrole")  # fmt: skip


@dataclass(frozen=True)
class StaticFile:
    """One file under deploy/: the templates it shows (empty: all) and its values."""

    path: str
    templates: tuple[str, ...] = ()
    values: tuple[Path, ...] = STATIC_VALUES
    set_values: Mapping[str, str] = field(default_factory=dict)
    kube_version: str = STATIC_KUBE_VERSION


def _ipam_file(path: str, templates: tuple[str, ...]) -> StaticFile:
    return StaticFile(path, templates, set_values=IPAM_ON, kube_version=IPAM_MINIMUM_KUBE_VERSION)


STATIC_FILES = (
    StaticFile("rbac.yaml", _AGENT_RBAC),
    StaticFile("daemonset.yaml", ("agent-daemonset",)),
    StaticFile("admission-policy.yaml", ("agent-admissionpolicy",)),
    StaticFile("nlc-rbac.yaml", _NLC_RBAC),
    StaticFile("nlc-deployment.yaml", ("nlc-deployment", "nlc-pdb")),
    _ipam_file("ipam-crd.yaml", ("ipam-crd",)),
    _ipam_file("ipam-rbac.yaml", _IPAM_RBAC),
    _ipam_file("ipam-deployment.yaml", ("ipam-deployment", "ipam-pdb")),
    StaticFile("local-ccm.yaml"),
    StaticFile("talos/local-ccm.yaml", values=TALOS_VALUES),
)


def render_static(h: Helm, spec: StaticFile, image: str) -> str:
    """The text of one static file: a header, then helm's output."""
    args = ["template", "local-ccm", str(CHART), "--namespace", STATIC_NAMESPACE]
    args += ["--kube-version", spec.kube_version]
    for template in spec.templates:
        args += ["--show-only", f"templates/{template}.yaml"]
    values = {"image.repository": image, **spec.set_values}
    result = h.run(*args, *_value_args(spec.values, values))
    if result.code != 0:
        raise RuntimeError(f"helm template for deploy/{spec.path} failed:\n{result.output}")
    used = " ".join(str(v.relative_to(REPO)) for v in spec.values)
    sets = " ".join(f"--set {k}={v}" for k, v in values.items() if k != "image.repository")
    header = (
        "# Generated by `make manifests` from charts/local-ccm; do not edit.\n"
        f"# helm template local-ccm charts/local-ccm -n {STATIC_NAMESPACE} "
        f"--kube-version {spec.kube_version} -f {used}{' ' + sets if sets else ''}\n"
    )
    return header + result.stdout


def write_manifests(h: Helm, out: Path, image: str) -> list[Path]:
    written = []
    for spec in STATIC_FILES:
        path = out / spec.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_static(h, spec, image))
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.support.chart manifests [OUT] [--image REPO]`` (the Makefile's
    ``manifests`` target)."""
    import argparse  # noqa: PLC0415 - only the command line needs it

    from tests.support.binaries import ensure  # noqa: PLC0415 - may build helm

    parser = argparse.ArgumentParser(prog="python -m tests.support.chart")
    parser.add_argument("command", choices=["manifests"])
    parser.add_argument("out", nargs="?", type=Path, default=DEPLOY)
    parser.add_argument("--image", default="ghcr.io/local-ccm/local-ccm")
    opts = parser.parse_args(argv)
    with helm(ensure(["helm"]).path("helm")) as h:
        for path in write_manifests(h, opts.out, opts.image):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
