"""`make publish` / `make verify` (scripts/publish.py): the commands docs/install.md shows are
the ones the script runs, and bad input is refused with every problem listed, exit 2."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "install.md"
SECTION = "### Push to your own registry: `make publish`"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("publish", REPO / "scripts" / "publish.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("publish", module)
    spec.loader.exec_module(module)
    return module


publish = _load()


def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(REPO / "scripts" / "publish.py"), *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False,
                          env=env, timeout=30)  # fmt: skip


def doc_blocks() -> list[list[str]]:
    """The ``sh`` blocks of the section, as lists of lines."""
    text = DOCS.read_text()
    assert SECTION in text
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return [block.strip().splitlines() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_the_docs_show_exactly_the_make_targets_and_what_they_run() -> None:
    make, runs, verifies = doc_blocks()
    registry = "registry.example/local-ccm"
    assert [line.split("#")[0].strip() for line in make] == [
        "cosign generate-key-pair",
        "make release",
        f"COSIGN_PASSWORD=... make publish REGISTRY={registry} COSIGN_KEY=cosign.key",
        f"make verify REGISTRY={registry} COSIGN_PUB=cosign.pub",
    ]
    shown = script("publish", "--registry", registry, "--key", "cosign.key", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert runs == shown.stdout.splitlines()
    checked = script("verify", "--registry", registry, "--key", "cosign.pub", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    assert verifies == checked.stdout.splitlines()


def test_the_make_targets_pass_the_variables_the_docs_name() -> None:
    done = subprocess.run(
        ["make", "-n", "publish", "verify", "REGISTRY=r.example/x", "COSIGN_KEY=k",
         "COSIGN_PUB=p", "REGISTRY_CA=ca.pem", "REGISTRY_INSECURE=1"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if "scripts/publish.py" in line]
    publish_line, verify_line = lines
    for line in lines:
        assert '--registry "r.example/x"' in line
        assert '--ca-file "ca.pem"' in line
        assert "--insecure" in line
    assert "publish.py publish" in publish_line
    assert '--key "k"' in publish_line
    assert "publish.py verify" in verify_line
    assert '--key "p"' in verify_line
    quiet = subprocess.run(
        ["make", "-n", "publish", "REGISTRY=r.example/x", "REGISTRY_INSECURE=0"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "--insecure" not in quiet.stdout
    assert "--ca-file" not in quiet.stdout


@pytest.mark.parametrize(
    "registry",
    ["ghcr.io/example", "127.0.0.1:5000/a/b", "registry.example", "localhost:5000/x_y/z-1",
     "[::1]:5000/x"],
)  # fmt: skip
def test_good_registries(registry: str) -> None:
    assert publish.registry_problems(registry) == []


@pytest.mark.parametrize(
    ("registry", "says"),
    [
        ("", "empty"), ("oci://ghcr.io/x", "no scheme"), ("https://ghcr.io/x", "no scheme"),
        ("ghcr.io/Example", "lower-case"), ("ghcr.io/x:v1", "lower-case"),
        ("ghcr.io/x@sha256:00", "lower-case"), ("ghcr.io//x", "lower-case"),
        ("ghcr.io/x/", "lower-case"), ("-bad.example/x", "lower-case"),
    ],
)  # fmt: skip
def test_bad_registries(registry: str, says: str) -> None:
    (problem,) = publish.registry_problems(registry)
    assert says in problem


def test_key_references(tmp_path: Path) -> None:
    key = tmp_path / "cosign.key"
    key.write_text("x")
    assert publish.key_problems(str(key), {}, private=True) == []
    assert publish.key_problems("env://K", {"K": "pem"}, private=True) == []
    assert publish.key_problems("awskms:///alias/x", {}, private=True) == []
    assert "not set" in publish.key_problems("", {}, private=True)[0]
    assert "$K is empty" in publish.key_problems("env://K", {}, private=False)[0]
    assert "COSIGN_PUB" in publish.key_problems(str(tmp_path / "no"), {}, private=False)[0]


def test_environment_problems() -> None:
    assert publish.environment_problems({"COSIGN_PASSWORD": ""}, signing=True) == []
    assert publish.environment_problems({}, signing=False) == []
    (password,) = publish.environment_problems({}, signing=True)
    assert "COSIGN_PASSWORD" in password
    (pair,) = publish.environment_problems({"REGISTRY_USER": "u"}, signing=False)
    assert "go together" in pair


def test_the_auth_file_names_the_registry_host_only() -> None:
    auths = json.loads(publish.auth_json("ghcr.io/example", "me", "s3cret"))["auths"]
    assert list(auths) == ["ghcr.io"]
    assert base64.b64decode(auths["ghcr.io"]["auth"]) == b"me:s3cret"


def test_tls_options_per_tool() -> None:
    release = publish.Release("1.2.3", Path("dist/a.oci.tar"), Path("dist/a.tgz"))
    tools = publish.Tools()
    target = publish.Target("r.example/x", insecure=True, ca_file="/ca.pem",
                            auth_file="/a/config.json", cert_dir="/certs")  # fmt: skip
    inspect_image, inspect_chart, skopeo, helm, image_sign, chart_sign = publish.publish_commands(
        tools, target, release, "k", digest_file="d", image_digest="sha256:1"
    )
    assert inspect_image == ["skopeo", "inspect", "--raw", "--tls-verify=false",
                             "--cert-dir=/certs", "--authfile=/a/config.json",
                             "docker://r.example/x/local-ccm:v1.2.3"]  # fmt: skip
    assert inspect_chart[-1] == "docker://r.example/x/charts/local-ccm:1.2.3"
    assert skopeo[:6] == ["skopeo", "copy", "--all", "--preserve-digests", "--digestfile=d",
                          "--dest-tls-verify=false"]  # fmt: skip
    assert "--dest-cert-dir=/certs" in skopeo
    assert "--dest-authfile=/a/config.json" in skopeo
    assert skopeo[-1] == "docker://r.example/x/local-ccm:v1.2.3"
    assert helm == [
        "helm", "push", "--plain-http", "--ca-file=/ca.pem", "--registry-config=/a/config.json",
        "dist/a.tgz", "oci://r.example/x/charts",
    ]  # fmt: skip
    assert image_sign[-4:] == [
        "--allow-insecure-registry", "--allow-http-registry", "--registry-cacert=/ca.pem",
        "r.example/x/local-ccm@sha256:1",
    ]  # fmt: skip
    # The image's index and every platform's manifest; a chart has one manifest.
    assert "--recursive" in image_sign
    assert "--recursive" not in chart_sign
    plain = publish.Target("r.example/x")
    for argv in publish.publish_commands(tools, plain, release, "k", digest_file="d"):
        assert not [a for a in argv if "insecure" in a or "tls" in a or "http" in a], argv


def test_helm_push_digest() -> None:
    out = "Pushed: r.example/x/charts/local-ccm:1.2.3\nDigest: sha256:" + "a" * 64 + "\n"
    assert publish.chart_digest(out) == "sha256:" + "a" * 64
    with pytest.raises(publish.PublishError, match="no digest"):
        publish.chart_digest("Pushed: something\n")


def test_bad_input_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "REGISTRY_USER": "u"}
    done = script("publish", "--registry", "HTTPS://Registry/X", "--key", str(tmp_path / "k"),
                  "--dist", str(tmp_path / "dist"), "--ca-file", str(tmp_path / "ca"),
                  env=env)  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    for expected in ("REGISTRY=HTTPS://Registry/X", "REGISTRY_CA=", "COSIGN_KEY=",
                     "COSIGN_PASSWORD is not set", "REGISTRY_USER and REGISTRY_PASSWORD",
                     "`skopeo`", "`helm`", "`cosign`", "run `make release` first"):  # fmt: skip
        assert expected in done.stderr, (expected, done.stderr)
    assert done.stdout == ""


def dist_with_sums(dist: Path) -> Any:
    """A dist/ holding the published files and a SHA256SUMS over them."""
    dist.mkdir()
    release = publish.Release(
        "1.2.3", dist / "local-ccm-1.2.3.oci.tar", dist / "local-ccm-1.2.3.tgz"
    )
    files = {release.image_archive: b"archive", release.digest_file: b"sha256:00\n",
             release.chart: b"chart", dist / "deploy" / "x.yaml": b"x: 1\n"}  # fmt: skip
    lines = []
    for path, data in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {path.relative_to(dist).as_posix()}\n")
    (dist / "SHA256SUMS").write_text("".join(sorted(lines)))
    return release


def test_dist_must_match_its_sha256sums(tmp_path: Path) -> None:
    release = dist_with_sums(tmp_path / "dist")
    dist = tmp_path / "dist"
    assert publish.release_problems(release, dist) == []
    release.chart.write_bytes(b"another chart")
    (dist / "deploy" / "x.yaml").unlink()
    problems = publish.release_problems(release, dist)
    assert len(problems) == 2, problems
    assert "local-ccm-1.2.3.tgz: its sha256 is not the one in SHA256SUMS" in problems[1]
    assert "x.yaml: listed in SHA256SUMS, missing" in problems[0]
    (dist / "SHA256SUMS").write_text("")
    assert len(publish.release_problems(release, dist)) == 3  # the published three, unlisted
    (dist / "SHA256SUMS").unlink()
    (only,) = publish.release_problems(release, dist)
    assert "no SHA256SUMS" in only


def test_a_changed_dist_is_refused_before_anything_is_pushed(tmp_path: Path) -> None:
    release = dist_with_sums(tmp_path / "dist")
    release.image_archive.write_bytes(b"another archive")
    key = tmp_path / "cosign.key"
    key.write_text("x")
    done = script("publish", "--registry", "r.example/x", "--key", str(key),
                  "--dist", str(tmp_path / "dist"), "--skopeo", "/bin/false",
                  "--helm", "/bin/false", "--cosign", "/bin/false",
                  env={"PATH": "/usr/bin:/bin", "COSIGN_PASSWORD": ""})  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{release.image_archive}: its sha256 is not the one in SHA256SUMS" in done.stderr
    assert done.stdout == ""


def test_a_tag_holding_another_image_or_chart_is_a_conflict() -> None:
    index = b'{"schemaVersion":2}'
    ours = publish.sha256(index)
    assert publish.image_conflict("r/x:v1", None, ours) is None
    assert publish.image_conflict("r/x:v1", index, ours) is None
    other = publish.image_conflict("r/x:v1", b'{"schemaVersion":2 }', ours)
    assert other is not None
    assert other.startswith("r/x:v1 already holds another image")
    assert "REPLACE=1" in other
    assert "make bump" in other

    def chart_manifest(content: bytes) -> bytes:
        layer = {"mediaType": publish.CHART_LAYER, "digest": publish.sha256(content)}
        config = {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": "x"}
        return json.dumps({"config": config, "layers": [layer]}).encode()

    assert publish.chart_conflict("r/c:1", None, b"tgz") is None
    assert publish.chart_conflict("r/c:1", chart_manifest(b"tgz"), b"tgz") is None
    conflict = publish.chart_conflict("r/c:1", chart_manifest(b"other"), b"tgz")
    assert conflict is not None
    assert publish.sha256(b"other") in conflict
    assert publish.chart_conflict("r/c:1", index, b"tgz") is not None  # not a chart at all
    assert publish.chart_conflict("r/c:1", b"<html>", b"tgz") is not None
    assert publish.chart_conflict("r/c:1", b"[]", b"tgz") is not None


def test_verify_compares_the_registry_with_dist(tmp_path: Path) -> None:
    """`make verify` with dist/: the tag's image must be the archive's digest and the chart's
    layer dist/'s .tgz; each difference is listed with both digests."""
    release = publish.Release("1.2.3", tmp_path / "local-ccm-1.2.3.oci.tar",
                              tmp_path / "local-ccm-1.2.3.tgz")  # fmt: skip
    index = b'{"schemaVersion":2}'
    release.digest_file.write_text(publish.sha256(index) + "\n")
    release.chart.write_bytes(b"tgz")
    layer = {"mediaType": publish.CHART_LAYER, "digest": publish.sha256(b"tgz")}
    chart = json.dumps({"layers": [layer]}).encode()
    assert publish.content_problems(release, "r/x:v1.2.3", index, "r/c:1.2.3", chart) == []
    moved = b'{"schemaVersion":2 }'
    other = json.dumps({"layers": [{**layer, "digest": publish.sha256(b"other")}]}).encode()
    assert publish.content_problems(release, "r/x:v1.2.3", moved, "r/c:1.2.3", other) == [
        f"r/x:v1.2.3 is {publish.sha256(moved)}, not {publish.sha256(index)} "
        "(local-ccm-1.2.3.oci.tar.digest in dist/)",
        f"r/c:1.2.3 holds the chart {publish.sha256(b'other')}, not local-ccm-1.2.3.tgz in "
        f"dist/ ({publish.sha256(b'tgz')})",
    ]
    assert publish.content_problems(release, "r/x:v1.2.3", None, "r/c:1.2.3", None) == [
        "r/x:v1.2.3: the registry has no such image",
        "r/c:1.2.3: the registry has no such chart",
    ]
