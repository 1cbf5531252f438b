"""Every release file the documentation names is one `make release` writes into dist/.

The docs send operators to release assets by name (the Talos URL
``releases/download/v<version>/local-ccm-talos.yaml``, the dist/ table of docs/install.md, the
demo's chart archive). A name no release has is a 404 at install time, so the names are checked
against scripts/release.py's own list (``asset_names``), which test_d17_release checks against
what a real `make release` run writes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from local_ccm import __version__

REPO = Path(__file__).resolve().parents[2]
DOCS = (
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    REPO / "charts" / "local-ccm" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
)
_VERSION = r"(?P<version>\d+\.\d+\.\d+|<version>|\{version\})"
# A release page's asset: the file name after .../releases/download/v<version>/.
_URL = re.compile(r"releases/download/v" + _VERSION + r"/(?P<name>[\w.-]+)")
# A file of dist/ by its own name (not a path such as build/image/local-ccm-0.4.0.oci.tar).
_BARE = re.compile(
    r"(?<![\w/.-])(?P<name>local[-_]ccm-" + _VERSION + r"(?:[\w.-]*[\w])?)(?![\w/-])"
)


def load_release() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", REPO / "scripts" / "release.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mentions(text: str) -> list[tuple[str, str]]:
    """(version, asset name) of every release file ``text`` names; placeholders resolve to
    the current version."""
    found = []
    for pattern in (_URL, _BARE):
        for m in pattern.finditer(text):
            version = m.group("version")
            version = __version__ if version.startswith(("<", "{")) else version
            found.append((version, m.group("name").replace(m.group("version"), version)))
    return found


def test_the_pattern_finds_urls_and_bare_names_but_not_paths() -> None:
    text = (
        "- https://github.com/local-ccm/local-ccm/releases/download/v<version>/local-ccm-talos.yaml\n"
        "| `local-ccm-0.4.0.oci.tar.digest` | `local_ccm-0.4.0-py3-none-any.whl` |\n"
        "skopeo copy oci-archive:local-ccm-0.4.0.oci.tar docker://r/x\n"
        "make image writes build/image/local-ccm-<version>.oci.tar\n"
    )
    assert mentions(text) == [
        (__version__, "local-ccm-talos.yaml"),
        ("0.4.0", "local-ccm-0.4.0.oci.tar.digest"),
        ("0.4.0", "local_ccm-0.4.0-py3-none-any.whl"),
        ("0.4.0", "local-ccm-0.4.0.oci.tar"),
    ]


def test_every_release_file_the_docs_name_is_one_make_release_writes() -> None:
    release = load_release()
    manifests = [p.relative_to(REPO).as_posix() for p in (REPO / "deploy").rglob("*.yaml")]
    wrong, seen = [], 0
    for doc in DOCS:
        if not doc.exists():
            continue
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            for version, name in mentions(line):
                seen += 1
                if name not in release.asset_names(version, manifests):
                    wrong.append(f"{doc.relative_to(REPO)}:{number}: {name}")
    assert seen >= 5, "the docs name fewer release files than they did: is the pattern stale?"
    assert not wrong, "release files the docs name but `make release` does not write:\n" + (
        "\n".join(wrong)
    )


def test_the_talos_asset_is_the_talos_manifest_under_the_docs_name() -> None:
    release = load_release()
    assert release.TALOS_ASSET == "local-ccm-talos.yaml"
    assert (REPO / release.TALOS).is_file()
    install = (REPO / "docs" / "install.md").read_text()
    assert f"releases/download/v<version>/{release.TALOS_ASSET}" in install


def test_a_release_tag_must_name_the_version_and_its_changelog_section() -> None:
    tag_problems = load_release().tag_problems
    changelog = "## [Unreleased]\n\n## [1.2.3]\n\n## [1.2.0]\n"
    assert tag_problems("v1.2.3", "1.2.3", changelog) == []
    (wrong,) = tag_problems("v1.3.0", "1.2.3", changelog)
    assert "the tag v1.3.0 is not this version's (v1.2.3" in wrong
    assert "make bump" in wrong
    (unlisted,) = tag_problems("v1.2.4", "1.2.4", changelog)
    assert "no `## [1.2.4]` section" in unlisted
    assert len(tag_problems("1.2.3", "1.2.3", changelog)) == 1  # the tag has its v
    assert len(tag_problems("v1.2", "1.2", changelog)) == 1  # 1.2 is not 1.2.0 or 1.2.3


def test_a_tagged_release_is_the_tagged_commit_unchanged() -> None:
    tree_problems = load_release().tree_problems
    head = "a" * 40
    assert tree_problems("v1.2.3", "", head, head) == []
    assert tree_problems("v1.2.3", "", None, head) == []  # a rehearsal before tagging
    (moved,) = tree_problems("v1.2.3", "", "b" * 40, head)
    assert moved == (
        "the tag v1.2.3 names bbbbbbbbbbbb, not the checked-out commit aaaaaaaaaaaa: "
        "check out the tag"
    )
    changed = " M src/local_ccm/__init__.py\nM  charts/local-ccm/values.yaml\n"
    (dirty,) = tree_problems("v1.2.3", changed, head, head)
    assert dirty.startswith(
        "uncommitted changes to src/local_ccm/__init__.py, charts/local-ccm/values.yaml: "
    )
    many = "".join(f" M f{i}\n" for i in range(8))
    (listed,) = tree_problems("v1.2.3", many, head, head)
    assert "f0, f1, f2, f3, f4 and 3 more" in listed
