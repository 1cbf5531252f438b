"""The pure parts of building the Go originals: pins, where the tarballs are, cache keys."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.bench import lb_peers
from tests.support import originals as o
from tests.support.gotool import GoInfo

GO = GoInfo("go1.26.8", "linux", "amd64", Path("/m"), Path("/c"))


def entry(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "go-agent", "tarball": "agent-src.tar.gz", "sha256": "a" * 64,
        "project": "github.com/example/agent", "snapshot": "v1.0.0", "commit": "abc1234",
        "license": "Apache-2.0", "top": "agent-v1.0.0", "ldflags": "-w -s",
        "go_args": ["build", "-ldflags", "{ldflags}", "-o", "{out}/", "./cmd/agent"],
        "binaries": ["agent"], "help_mentions": ["node-name"],
    }  # fmt: skip
    return {**base, **changes}


def test_the_committed_pins_parse_and_name_every_peer() -> None:
    names = [x.name for x in o.load_originals()]
    assert names == ["go-local-ccm", "go-node-lifecycle-controller", "go-node-ipam-controller",
                     "go-metallb-controller", "go-kube-vip-cloud-provider",
                     "go-kubelet-csr-approver"]  # fmt: skip


def test_the_metallb_build_keeps_the_crds_the_lb_part_installs() -> None:
    metallb = next(x for x in o.load_originals() if x.name == lb_peers.METALLB)
    assert lb_peers.CRD_FOLDER in metallb.keep


def test_every_problem_is_reported_at_once() -> None:
    bad = entry(sha256="XYZ", binaries=[], extra=1)
    del bad["top"]
    with pytest.raises(ValueError, match=r"originals\.toml") as caught:
        o.parse_originals({"original": [bad, entry()]})
    text = str(caught.value)
    for part in ("top: missing", "extra: unknown key", "sha256: 'XYZ'", "binaries: empty",
                 "go-agent: name used twice"):  # fmt: skip
        assert part in text


def test_the_command_fills_in_the_output_folder_and_ldflags() -> None:
    (original,) = o.parse_originals({"original": [entry()]})
    assert original.command(Path("/tmp/out")) == [
        "go", "build", "-ldflags", "-w -s", "-o", "/tmp/out/", "./cmd/agent",
    ]  # fmt: skip


def test_the_folder_comes_from_the_environment_else_beside_the_checkout() -> None:
    root = Path("/work/checkout")
    assert o.originals_dir({o.DIR_ENV: "/x"}, root) == Path("/x")
    assert o.originals_dir({}, root) == Path("/work/shared/upstream")


def test_a_missing_tarball_names_the_file_its_checksum_and_the_variable() -> None:
    (original,) = o.parse_originals({"original": [entry()]})
    text = o.missing_tarball_message(original, Path("/nowhere"))
    assert "agent-src.tar.gz" in text
    assert "a" * 64 in text
    assert o.DIR_ENV in text


def test_the_cache_key_moves_with_the_source_the_toolchain_and_the_flags() -> None:
    (original,) = o.parse_originals({"original": [entry()]})
    name = o.entry_name(original, GO)
    assert name.startswith("go-agent-v1.0.0-go1.26.8-")
    assert o.entry_name(original, GO) == name  # stable
    assert o.entry_name(replace(original, sha256="b" * 64), GO) != name
    assert o.entry_name(replace(original, ldflags=""), GO) != name
    assert o.entry_name(original, replace(GO, version="go1.26.9")) != name
    assert o.key_inputs(original, GO)["env"]["CGO_ENABLED"] == "0"


def test_help_may_spell_a_flag_with_one_dash_or_two() -> None:
    (original,) = o.parse_originals({"original": [entry(help_mentions=["a-b", "c", "d"])]})
    assert o.missing_from_help("  -a-b string\n  --c\n  -dd\n", original) == ["d"]


def test_kept_source_paths_are_optional_relative_and_part_of_the_key() -> None:
    (plain,) = o.parse_originals({"original": [entry()]})
    assert plain.keep == ()
    assert "keep" not in o.key_inputs(plain, GO)  # entries without it keep their old keys
    (kept,) = o.parse_originals({"original": [entry(keep=["config/crd/bases"])]})
    assert kept.keep == ("config/crd/bases",)
    assert o.entry_name(kept, GO) != o.entry_name(plain, GO)
    with pytest.raises(ValueError, match=r"keep: ") as caught:
        o.parse_originals({"original": [entry(keep=["/etc", "../x", "a/../../b", 3])]})
    text = str(caught.value)
    for part in ("'/etc' is not a relative path", "'../x' is not", "'a/../../b' is not",
                 "keep: not a list of strings"):  # fmt: skip
        assert part in text
