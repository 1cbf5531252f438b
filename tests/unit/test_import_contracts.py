"""The import contracts in pyproject.toml cover every package, including one not written yet.

Two halves. The layer lists are read from pyproject.toml and compared with the source tree:
every top-level package and module of ``local_ccm`` sits in a layer of the top-level contract,
every subpackage is a layer of the inner contract, and the components are exactly the packages
with a ``core``. And the real ``lint-imports`` runs on a copy of the tree with a sixth component,
``local_ccm.widget`` (the template's ``core``, ``api`` and ``run``): a clean one passes without a
contract edit, one whose ``core`` opens a socket or imports its own loop or API adapter fails,
naming the widget.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = "local_ccm"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


@dataclass(frozen=True)
class Layering:
    """What the two layers contracts say: the top-level layers (module names, highest first)
    and the inner contract's containers and layer tails."""

    top: tuple[frozenset[str], ...]
    containers: tuple[str, ...]
    inner: frozenset[str]


def layer_members(layer: str) -> frozenset[str]:
    """The modules of one layer string: ``a | b`` (independent) or ``a : b``, each possibly
    ``(optional)``."""
    separator = "|" if "|" in layer else ":"
    return frozenset(part.strip().strip("()").strip() for part in layer.split(separator))


def layering(config: Mapping[str, Any]) -> Layering:
    """The top-level contract is the layers contract without containers, the inner one the
    layers contract with them; exactly one of each."""
    contracts = config["tool"]["importlinter"]["contracts"]
    layered = [c for c in contracts if c["type"] == "layers"]
    top = [c for c in layered if not c.get("containers")]
    inner = [c for c in layered if c.get("containers")]
    assert len(top) == 1, "expected one layers contract without containers (the top level)"
    assert len(inner) == 1, "expected one layers contract with containers (inside a component)"
    return Layering(
        top=tuple(layer_members(layer) for layer in top[0]["layers"]),
        containers=tuple(inner[0]["containers"]),
        inner=frozenset().union(*(layer_members(layer) for layer in inner[0]["layers"])),
    )


def children(package: Path) -> Iterator[tuple[str, bool]]:
    """(name, is a package) of each module and subpackage directly in ``package``."""
    for entry in sorted(package.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file():
            yield entry.name, True
        elif entry.suffix == ".py" and entry.name != "__init__.py":
            yield entry.stem, False


def packages(root: Path, name: str = ROOT) -> Iterator[str]:
    """Every subpackage below ``root`` (the directory of package ``name``), dotted."""
    for child, is_package in children(root):
        if is_package:
            yield f"{name}.{child}"
            yield from packages(root / child, f"{name}.{child}")


def container_matches(expression: str, package: str) -> bool:
    """Whether ``package`` is one of the containers ``expression`` names (``*`` = one module)."""
    want, have = expression.split("."), package.split(".")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


def unplaced(root: Path, layers: Layering) -> list[str]:
    """Why each module or package of the tree is in no layer: top-level ones must be in the
    top-level contract, deeper packages a layer of the inner contract inside a container."""
    top = frozenset().union(*layers.top)
    problems = [
        f"{ROOT}.{child} is in no layer of the top-level contract"
        for child, _ in children(root)
        if f"{ROOT}.{child}" not in top
    ]
    for package in packages(root):
        parent, _, tail = package.rpartition(".")
        if parent == ROOT:
            continue
        if not any(container_matches(c, parent) for c in layers.containers):
            problems.append(f"{package}: {parent} is not a container of the inner contract")
        elif tail not in layers.inner:
            problems.append(f"{package} is not a layer of the inner contract")
    return problems


def component_problems(root: Path, layers: Layering) -> list[str]:
    """The components are the packages that have a ``core``: all in one top-level layer (which
    makes them independent of each other), and every package of that layer has a core."""
    with_core = {
        f"{ROOT}.{child}"
        for child, is_package in children(root)
        if is_package and (root / child / "core" / "__init__.py").is_file()
    }
    layer = next((members for members in layers.top if members & with_core), frozenset())
    return [
        f"{p} has a core but is not in the components' layer" for p in sorted(with_core - layer)
    ] + [
        f"{p} is in the components' layer but has no core package"
        for p in sorted(layer - with_core)
    ]


def read_config(path: Path = REPO / "pyproject.toml") -> dict[str, Any]:
    return tomllib.loads(path.read_text())


# ---------------------------------------------------------------- the tree as it is


def test_every_module_and_package_is_placed_in_a_layer() -> None:
    assert unplaced(REPO / "src" / ROOT, layering(read_config())) == []


def test_the_components_are_the_packages_with_a_core() -> None:
    assert component_problems(REPO / "src" / ROOT, layering(read_config())) == []


def test_an_unplaced_package_and_a_stray_core_are_named(tmp_path: Path) -> None:
    root = tmp_path / ROOT
    for package in ("", "kube", "agent", "agent/core", "agent/extra", "widget", "widget/core"):
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "util.py").write_text("")
    layers = Layering(
        top=(frozenset({"local_ccm.agent"}), frozenset({"local_ccm.kube"})),
        containers=("local_ccm.*",),
        inner=frozenset({"core"}),
    )
    assert unplaced(root, layers) == [
        "local_ccm.util is in no layer of the top-level contract",
        "local_ccm.widget is in no layer of the top-level contract",
        "local_ccm.agent.extra is not a layer of the inner contract",
    ]
    assert component_problems(root, layers) == [
        "local_ccm.widget has a core but is not in the components' layer"
    ]


# ---------------------------------------------------------------- lint-imports on a sixth component


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of src/local_ccm and pyproject.toml, shared by the widget variants below."""
    base = tmp_path_factory.mktemp("contracts")
    shutil.copytree(
        REPO / "src" / ROOT,
        base / "src" / ROOT,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", base / "pyproject.toml")
    return base


def lint_imports(tree: Path, widget: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Write ``local_ccm/widget`` (path under it -> text), run the real lint-imports on the
    copy, and remove the widget again."""
    package = tree / "src" / ROOT / "widget"
    try:
        for relative, text in widget.items():
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            (package / relative).write_text(text)
        return subprocess.run(
            [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree / "src")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(package, ignore_errors=True)


def widget(
    core: str = "",
    run: str = "from local_ccm.widget import api, core\n",
    api: str = "from local_ccm.widget import core\n",
) -> dict[str, str]:
    """The template's files: ``core/``, the API adapter ``api.py`` and the loop ``run.py``."""
    return {"__init__.py": "", "core/__init__.py": core, "api.py": api, "run.py": run}


@pytest.mark.timeout(60)
def test_a_clean_sixth_component_passes_without_a_contract_edit(tree: Path) -> None:
    result = lint_imports(tree, widget(core="import ipaddress\n"))
    assert result.returncode == 0, result.stdout + result.stderr


@dataclass(frozen=True)
class Broken:
    core: str
    contract: str
    says: str


BROKEN = {
    "socket": Broken(
        "import socket\n",
        "Core packages and the pure halves of the adapters do no I/O BROKEN",
        "local_ccm.widget.core is not allowed to import socket",
    ),
    "kube-client": Broken(
        "from local_ccm.kube import client\n",
        "Core packages and the pure halves of the adapters do no I/O BROKEN",
        "local_ccm.widget.core is not allowed to import local_ccm.kube.client",
    ),
    "asyncio": Broken(
        "import asyncio\n",
        "Component cores neither wait nor reach the process around them BROKEN",
        "local_ccm.widget.core is not allowed to import asyncio",
    ),
    "own-loop": Broken(
        "from local_ccm.widget import run\n",
        "Inside a component, core decides and everything else builds on it BROKEN",
        "local_ccm.widget.core is not allowed to import local_ccm.widget.run",
    ),
    "own-api": Broken(
        "from local_ccm.widget import api\n",
        "Inside a component, core decides and everything else builds on it BROKEN",
        "local_ccm.widget.core is not allowed to import local_ccm.widget.api",
    ),
}


@pytest.mark.timeout(60)
def test_a_sixth_component_speaks_no_http(tree: Path) -> None:
    result = lint_imports(tree, widget(run="import ssl\n"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Only the kube package speaks HTTP (and the runtime serves it) BROKEN" in result.stdout
    assert "local_ccm.widget is not allowed to import ssl" in result.stdout
    assert "local_ccm.widget.run -> ssl" in result.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_sixth_components_core_is_held_to_the_contracts(tree: Path, case: str) -> None:
    broken = BROKEN[case]
    result = lint_imports(tree, widget(core=broken.core, run="import ipaddress\n"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken.contract in result.stdout
    assert broken.says in result.stdout
