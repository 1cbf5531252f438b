"""The image `make image` built, unpacked and run by a real OCI runtime (runc).

The archive's tag names an image index with one image per platform (linux/amd64,
linux/arm64). skopeo copies one platform's image out of it (``oci-archive:`` to an OCI layout;
this machine's unless ``arch`` says otherwise) and umoci unpacks it into a root file system
shared by every container of a test module; each container gets its own
bundle whose ``config.json`` starts from the one umoci derived from the image's config (user
65532:65532, entry point, environment) and is then tightened to what the chart asks of a pod:
read-only root, no capability in any set, no new privileges. A container either joins a
network namespace the test made (by path, as a hostNetwork pod shares the Node's) or, without
one, shares the namespace pytest runs in (in `make test`, one with only ``lo``).

:func:`binary_image` goes the other way (pure): a static binary packed as a one-layer OCI image
archive that ``ctr images import`` takes by the name in its index: the real-node tier's pause
image (tests/support/pause.py) and the Go original's agent in the join benchmark
(tests/bench/test_compare_join.py). Nothing is pulled: no registry is reachable.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import io
import json
import platform
import posixpath
import re
import secrets
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ccm import __version__
from tests.support.agent_process import AgentProcess

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = REPO / "build" / "image"
KUBECONFIG_IN_CONTAINER = "/etc/local-ccm/kubeconfig"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}


def oci_arch(machine: str) -> str:
    """``uname -m`` in OCI spelling."""
    return ARCHES.get(machine, machine)


# ------------------------------------------------------------------ writing an image (pure)
def _canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data)}


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _tar(files: Sequence[tuple[str, bytes | None, int]]) -> bytes:
    """A tar of (name, content, mode), owned by 0:0, every time stamp 0; content None is a
    directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 0
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _parents(path: str) -> list[str]:
    """The directories above ``path`` (relative, outermost first): ``usr``, ``usr/local``..."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def binary_image(
    binary: bytes, *, path: str, name: str, arch: str, user: str | None = None
) -> bytes:
    """The OCI image layout (as a tar) of one layer holding ``binary`` at the absolute ``path``
    (mode 0755, its parent directories 0755), which is the image's entry point, run as ``user``
    (the runtime's default, root, when None). ``name`` is both the containerd image name and,
    after the colon, the layout's ref name. The same inputs give the same bytes."""
    inside = posixpath.normpath(path).lstrip("/")
    dirs: list[tuple[str, bytes | None, int]] = [(d, None, 0o755) for d in _parents(inside)]
    layer_tar = _tar([*dirs, (inside, binary, 0o755)])
    layer = gzip.compress(layer_tar, compresslevel=9, mtime=0)
    run = {"Entrypoint": [f"/{inside}"], "WorkingDir": "/", **({"User": user} if user else {})}
    config = _canonical({
        "architecture": arch, "os": "linux", "config": run,
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
    })  # fmt: skip
    manifest = _canonical({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": _descriptor(CONFIG_TYPE, config), "layers": [_descriptor(LAYER_TYPE, layer)],
    })  # fmt: skip
    names = {"io.containerd.image.name": name,
             "org.opencontainers.image.ref.name": name.rpartition(":")[2]}  # fmt: skip
    entry = {**_descriptor(MANIFEST_TYPE, manifest), "annotations": names}
    index = _canonical({"schemaVersion": 2, "manifests": [entry]})
    blobs: list[tuple[str, bytes | None, int]] = [
        (f"blobs/sha256/{hashlib.sha256(b).hexdigest()}", b, 0o644)
        for b in (config, layer, manifest)
    ]
    layout = _canonical({"imageLayoutVersion": "1.0.0"})
    return _tar([("oci-layout", layout, 0o644), ("index.json", index, 0o644), *sorted(blobs)])


# ------------------------------------------------------------------ reading the project's image
def image_archive(version: str = __version__) -> Path:
    return IMAGE_DIR / f"local-ccm-{version}.oci.tar"


def image_ref(version: str = __version__) -> str:
    return f"v{version}"


def host_arch() -> str:
    """This machine's architecture as OCI names it (amd64, arm64)."""
    return oci_arch(platform.machine())


@dataclass(frozen=True)
class PlatformImage:
    """One platform's entry of the archive's image index, with its manifest and config."""

    platform: Mapping[str, str]
    digest: str  # of the manifest
    manifest: Mapping[str, Any]
    config: Mapping[str, Any]

    @property
    def config_digest(self) -> str:
        """What containerd reports as the image ID of this platform's image."""
        return str(self.manifest["config"]["digest"])


@dataclass(frozen=True)
class Archive:
    """The archive as its own bytes say, read with tarfile (no tool in between)."""

    index_digest: str  # what the tag names: the image index
    index: Mapping[str, Any]
    platforms: Mapping[str, PlatformImage]  # by architecture


def read_archive(archive: Path) -> Archive:
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> Any:
            member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None, digest
            return json.load(member)

        layout = tar.extractfile("index.json")
        assert layout is not None
        (tagged,) = json.load(layout)["manifests"]
        index = blob(tagged["digest"])
        platforms = {}
        for entry in index["manifests"]:
            manifest = blob(entry["digest"])
            platforms[entry["platform"]["architecture"]] = PlatformImage(
                entry["platform"], entry["digest"], manifest, blob(manifest["config"]["digest"])
            )
    return Archive(tagged["digest"], index, platforms)


@dataclass(frozen=True)
class Unpacked:
    """An image unpacked by umoci: its root file system and umoci's runtime config."""

    rootfs: Path
    config: Mapping[str, Any]
    layout: Path


def run_tool(argv: Sequence[str], timeout: float = 120) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"$ {' '.join(argv)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def unpack(archive: Path, workdir: Path, arch: str | None = None) -> Unpacked:
    """``arch``'s image of the archive (this machine's by default), unpacked."""
    layout = workdir / "layout"
    ref = image_ref()
    choose = ["--override-arch", arch] if arch else []
    run_tool(["skopeo", "copy", "--quiet", *choose, f"oci-archive:{archive}",
              f"oci:{layout}:{ref}"])  # fmt: skip
    bundle = workdir / "bundle"
    run_tool(["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)])
    config = json.loads((bundle / "config.json").read_text())
    return Unpacked(bundle / "rootfs", config, layout)


def container_config(
    base: Mapping[str, Any],
    *,
    rootfs: Path,
    args: Sequence[str],
    env: Mapping[str, str] = {},
    netns_path: str | None = None,
    read_only_files: Mapping[str, Path] = {},
) -> dict[str, Any]:
    """umoci's config for the image, tightened: read-only root, no capabilities, no new
    privileges, no terminal; ``args`` run with the image's user and environment plus ``env``;
    the network namespace at ``netns_path`` or the caller's; files bind-mounted read-only."""
    config = copy.deepcopy(dict(base))
    process = config["process"]
    process["args"] = list(args)
    process["terminal"] = False
    process["noNewPrivileges"] = True
    process["capabilities"] = {s: [] for s in ("bounding", "effective", "inheritable",
                                               "permitted", "ambient")}  # fmt: skip
    process["env"] = [*process["env"], *(f"{k}={v}" for k, v in env.items())]
    config["root"] = {"path": str(rootfs), "readonly": True}
    others = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
    network = [{"type": "network", "path": netns_path}] if netns_path else []
    config["linux"]["namespaces"] = [*others, *network]
    config["mounts"] = [
        *config["mounts"],
        *({"destination": dest, "type": "bind", "source": str(src),
           "options": ["bind", "ro", "nosuid", "nodev", "noexec"]}
          for dest, src in read_only_files.items()),
    ]  # fmt: skip
    return config


class Runc:
    """runc with its own state directory (nothing shared with another runtime user)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)

    def bundle(self, parent: Path, config: Mapping[str, Any]) -> tuple[Path, str]:
        cid = f"lccm-{secrets.token_hex(4)}"
        bundle = parent / cid
        bundle.mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle, cid

    def command(self, bundle: Path, cid: str) -> list[str]:
        return ["runc", "--root", str(self.state), "run", "--bundle", str(bundle), cid]

    def run(self, parent: Path, config: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
        bundle, cid = self.bundle(parent, config)
        try:
            return subprocess.run(self.command(bundle, cid), capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=60, check=False)  # fmt: skip
        finally:
            self.delete(cid)

    def init_pid(self, cid: str) -> int:
        state = json.loads(run_tool(["runc", "--root", str(self.state), "state", cid]))
        return int(state["pid"])

    def delete(self, cid: str) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(["runc", "--root", str(self.state), "delete", "--force", cid],
                           capture_output=True, timeout=30, check=False)  # fmt: skip


class ContainerAgent(AgentProcess):
    """:class:`AgentProcess`, but the agent is the image's ``local-ccm`` in a runc container
    that joins the test's network namespace; the kubeconfig is bind-mounted read-only.
    ``pid`` stays runc's (it forwards SIGTERM); :meth:`proc_status` reads the agent's."""

    def __init__(self, runc: Runc, image: Unpacked, agent: AgentProcess) -> None:
        super().__init__(agent.netns, agent.argv, log_path=agent.log_path,
                         kubeconfig=agent.kubeconfig, api_url=agent.api_url)  # fmt: skip
        self.runc, self.image = runc, image
        files = {KUBECONFIG_IN_CONTAINER: self.kubeconfig} if self.kubeconfig else {}
        env = {"KUBECONFIG": KUBECONFIG_IN_CONTAINER} if self.kubeconfig else {}
        config = container_config(image.config, rootfs=image.rootfs,
                                  args=["/usr/local/bin/local-ccm", *self.argv], env=env,
                                  netns_path=f"/run/netns/{self.netns}",
                                  read_only_files=files)  # fmt: skip
        self.bundle, self.cid = runc.bundle(self.log_path.parent, config)

    def command(self) -> list[str]:
        return self.runc.command(self.bundle, self.cid)

    def environment(self) -> dict[str, str]:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    def proc_status(self) -> dict[str, str]:
        lines = Path(f"/proc/{self.runc.init_pid(self.cid)}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def root_mount_options(self) -> list[str]:
        """The options of ``/`` as the agent sees it (its mountinfo line for ``/``)."""
        text = Path(f"/proc/{self.runc.init_pid(self.cid)}/mountinfo").read_text()
        found = re.search(r"^\S+ \S+ \S+ \S+ / (\S+)", text, re.MULTILINE)
        assert found, text
        return found.group(1).split(",")

    def stop(self, grace: float = 10.0) -> int | None:
        try:
            return super().stop(grace)
        finally:
            self.runc.delete(self.cid)
