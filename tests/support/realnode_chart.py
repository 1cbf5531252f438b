"""The project's chart on a real node: packaged as `make release` packages it
(scripts/release.py's ``chart``), installed with the real helm, the image taken from the node's
containerd (``imagePullPolicy: Never``, the repository and tag it was imported under)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support import resources as r
from tests.support.chart import REPO, helm
from tests.support.realnode_cluster import Cluster

RELEASE = "local-ccm"
NAMESPACE = "kube-system"
INSTALL_TIMEOUT = "5m"
# The controller manager's Pods carry the lifecycle controller's component label (the chart
# renders the manager from the lifecycle controller's Deployment).
MANAGER = "app.kubernetes.io/component=node-lifecycle-controller"


def _release_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_script", REPO / "scripts" / "release.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_chart(out: Path, helm_binary: Path) -> Path:
    """``helm package charts/local-ccm`` into ``out``, exactly as `make release` does (its
    files dated by the last commit)."""
    script = _release_script()
    return Path(script.chart(out, helm_binary, script.source_date_epoch()))


def node_values(cluster: Cluster) -> dict[str, Any]:
    """What every install on the real node sets: the imported image, the API server through the
    node's loopback relay (no kube-proxy makes the `kubernetes` Service reachable), and the
    InternalIP by route lookup toward the node's gateway. The lifecycle controller is off: its
    Deployment is not what these scenarios are about and would cost two more Pods."""
    repository, tag = cluster.image
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "apiServer": {"host": "127.0.0.1", "port": cluster.node.spec.api_port},
        "ipDetection": {"internalIPTarget": cluster.node.gateway, "externalIPTarget": ""},
        "nodeLifecycleController": {"enabled": False},
    }


def install_chart(
    cluster: Cluster, helm_binary: Path, chart: Path, values: Mapping[str, Any]
) -> float:
    """``helm install --wait`` of the packaged ``chart``; returns the seconds it took."""
    return run_helm(cluster, helm_binary, "install", chart, values=values)


def install_packaged(
    cluster: Cluster, helm_binary: Path, tmp_path_factory: pytest.TempPathFactory,
    values: Mapping[str, Any],
) -> float:  # fmt: skip
    """The chart packaged as `make release` does, installed over `node_values` with `values`
    on top (top-level keys replace); the seconds ``helm install --wait`` took."""
    chart = package_chart(tmp_path_factory.mktemp("chart"), helm_binary)
    return install_chart(cluster, helm_binary, chart, {**node_values(cluster), **values})


def run_helm(
    cluster: Cluster,
    helm_binary: Path,
    verb: str,
    chart: Path | str | None,
    *,
    values: Mapping[str, Any] = {},
    extra: Sequence[str] = (),
    release: str = RELEASE,
) -> float:
    """``helm <verb> --wait`` of ``release`` (``install``, ``upgrade`` or, with no chart,
    ``uninstall``; ``chart`` a packaged file, a chart directory or an ``oci://`` reference);
    returns the seconds it took, or fails with helm's output and the node's logs."""
    with helm(helm_binary) as h:
        values_file = h.home / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        args = [verb, release, *([str(chart), "-f", str(values_file)] if chart else [])]
        started = time.monotonic()
        result = h.run(
            *args, *extra, "--namespace", NAMESPACE,
            "--kubeconfig", str(cluster.plane.admin_kubeconfig),
            "--wait", "--timeout", INSTALL_TIMEOUT, timeout=360,
        )  # fmt: skip
        seconds = time.monotonic() - started
    if result.code != 0:
        raise AssertionError(f"helm {verb} failed ({result.code}):\n{result.output}\n"
                             f"{cluster.node.tails()}")  # fmt: skip
    return seconds


def manager_pod(cluster: Cluster) -> dict[str, Any]:
    """The one controller-manager Pod of the release."""
    pods: list[dict[str, Any]] = cluster.kube.list(
        r.PODS, namespace=NAMESPACE, label_selector=MANAGER
    )["items"]
    (pod,) = pods
    return pod
