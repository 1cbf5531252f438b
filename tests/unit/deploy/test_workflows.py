"""Every workflow under .github/workflows passes actionlint (the pinned build, like helm's)
with no finding; a broken copy of the release workflow does not, so the check would see one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"


def actionlint(binary: Path, *files: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), "-no-color", *map(str, files)], cwd=cwd,
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip


def test_every_workflow_passes_actionlint(actionlint_binary: Path) -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert RELEASE in files
    done = actionlint(actionlint_binary, *files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_actionlint_finds_a_broken_copy(actionlint_binary: Path, tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    text = RELEASE.read_text()
    assert "${{ secrets.COSIGN_PASSWORD }}" in text
    text = text.replace("${{ secrets.COSIGN_PASSWORD }}", "${{ secret.COSIGN_PASSWORD }}")
    broken.write_text(text.replace("runs-on:", "run-on:"))
    done = actionlint(actionlint_binary, broken, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'undefined variable "secret"' in done.stdout
    assert "run-on" in done.stdout


def test_the_release_workflow_runs_only_make_targets() -> None:
    workflow = yaml.safe_load(RELEASE.read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as true
    (job,) = workflow["jobs"].values()
    runs = [" ".join(step["run"].split()) for step in job["steps"] if "run" in step]
    assert [r.split(" make ", 1)[1].split()[0] for r in runs] == [
        "setup", "lint", "release", "publish", "verify", "forge-release",
    ]  # fmt: skip
    for line in runs:
        assert line.startswith('sudo -E env "PATH=$PATH" make '), line
    # A tag pushed before `make bump` stops there, before anything is built or pushed.
    assert runs[2].endswith('make release TAG="${GITHUB_REF_NAME}"'), runs[2]
    # The release page docs/install.md's Talos URL points at: written by gh, with the token.
    assert runs[5].endswith('make forge-release TAG="${GITHUB_REF_NAME}"'), runs[5]
    assert job["steps"][-1]["env"] == {
        "GH_TOKEN": "${{ github.token }}", "GH_REPO": "${{ github.repository }}",
    }  # fmt: skip
    assert workflow["permissions"]["contents"] == "write"
    uses = [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]
    assert uses == ["actions/checkout", "actions/setup-go"]
