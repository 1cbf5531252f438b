"""Every link of the chart's README works where operators read it: in the packaged chart
(`helm pull`, Artifact Hub), which holds only charts/local-ccm/, never the repository's docs/.

A relative link must name a file inside the packaged chart; a link into this repository must be
pinned to the chart's release tag (`make bump` moves it) and name a path, and a heading, that
exist at HEAD. The README is read from the archive `helm package` makes, as `make release`
packages it."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tests.support.chart import CHART, REPO, Helm

REPOSITORY = "https://github.com/local-ccm/local-ccm/"
# [text](target) and <https://...>; the text may span lines.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|<(https?://[^>\s]+)>")
_PINNED = re.compile(
    re.escape(REPOSITORY) + r"(?:blob|tree)/(?P<ref>[^/]+)/(?P<path>[^#]+)(?:#(?P<anchor>.+))?$"
)


def links(markdown: str) -> list[str]:
    """Every link target of ``markdown``, outside fenced code blocks."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    return [m.group(1) or m.group(2) for m in _LINK.finditer(prose)]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_at_head(path: str) -> set[str]:
    text = git_show(path)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", prose, re.M)}


def git_show(path: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{path}"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout if done.returncode == 0 else ""


def exists_at_head(path: str) -> bool:
    done = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"HEAD:{path}"],
                          capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0


def problems(target: str, packaged: set[str], tag: str) -> list[str]:
    """What is wrong with one link of the packaged README (empty: nothing)."""
    if target.startswith("#"):
        return []
    if target.startswith(REPOSITORY):
        pinned = _PINNED.match(target)
        if not pinned:
            return [f"{target}: a link into the repository names a ref and a path"]
        found = []
        if pinned["ref"] != tag:
            found.append(f"{target}: pinned to {pinned['ref']}, not the chart's tag {tag}")
        path = pinned["path"].rstrip("/")
        if not exists_at_head(path):
            found.append(f"{target}: {path} is not in the repository at HEAD")
        elif pinned["anchor"] and pinned["anchor"] not in anchors_at_head(path):
            found.append(f"{target}: {path} has no heading #{pinned['anchor']} at HEAD")
        return found
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return []  # another site: not ours to check offline
    inside = PurePosixPath("local-ccm") / target.split("#", maxsplit=1)[0]
    normal = PurePosixPath(*[p for p in inside.parts if p != "."])
    if ".." in normal.parts or normal.as_posix() not in packaged:
        return [f"{target}: not a file of the packaged chart"]
    return []


@pytest.fixture(scope="module")
def packaged_chart(chart_helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("package")
    result = chart_helm.run("package", str(CHART), "-d", str(out))
    assert result.code == 0, result.output
    (archive,) = out.glob("local-ccm-*.tgz")
    return archive


def test_every_link_of_the_packaged_chart_readme_resolves(packaged_chart: Path) -> None:
    with tarfile.open(packaged_chart) as tgz:
        packaged = {m.name for m in tgz.getmembers() if m.isfile()}
        member = tgz.extractfile("local-ccm/README.md")
        assert member is not None
        readme = member.read().decode()
    tag = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    found = links(readme)
    assert len(found) >= 4, found
    wrong = [p for target in found for p in problems(target, packaged, tag)]
    assert not wrong, "links of the packaged chart's README that lead nowhere:\n" + "\n".join(wrong)


def test_the_check_catches_what_a_packaged_chart_breaks() -> None:
    packaged = {"local-ccm/README.md", "local-ccm/values.yaml"}
    tag = "v0.4.0"
    assert problems("../../docs/install.md", packaged, tag)
    assert problems(REPOSITORY + "blob/main/docs/install.md", packaged, tag)
    assert problems(REPOSITORY + "blob/v0.4.0/docs/no-such.md", packaged, tag)
    assert problems(REPOSITORY + "blob/v0.4.0/docs/install.md#no-such-heading", packaged, tag)
    assert not problems(REPOSITORY + "blob/v0.4.0/docs/install.md#helm", packaged, tag)
    assert not problems("values.yaml", packaged, tag)
    assert not problems("#values", packaged, tag)
    assert links("see [a](b.md)\n```\n[c](d.md)\n```\n<https://x.example/>") == [
        "b.md",
        "https://x.example/",
    ]
