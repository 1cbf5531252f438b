"""Run another architecture's programs on this machine: qemu-user-static through binfmt_misc.

`make image` runs the arm64 image's interpreter once (it imports every extension module and
runs every entry point before the image is written) and D12 runs the arm64 image under qemu.
:func:`ensure` makes that possible and is idempotent: it mounts binfmt_misc at
/proc/sys/fs/binfmt_misc when nothing is mounted there, and registers the architecture's
interpreter from Debian's registration file (``/usr/lib/binfmt.d/qemu-<cpu>.conf``, package
qemu-user-static) with the ``F`` flag: the kernel opens the interpreter once, at registration,
so it also runs in chroots, containers and namespaces where the file does not exist. An entry
already registered with ``F`` is kept; one without is replaced. Root only.

``python scripts/binfmt.py arm64`` does the same from a shell; a problem exits 2 with a message.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/proc/sys/fs/binfmt_misc")
CONF_DIR = Path("/usr/lib/binfmt.d")
# Debian/Go architecture -> the kernel's (and qemu's) name of the CPU.
CPUS = {"amd64": "x86_64", "arm64": "aarch64"}
ARCHES = {cpu: arch for arch, cpu in CPUS.items()}


class BinfmtError(Exception):
    """Why another architecture's programs cannot run here, and what to do about it."""


@dataclass(frozen=True)
class Registration:
    """One line of a binfmt.d file: ``:name:type:offset:magic:mask:interpreter:flags``."""

    name: str
    kind: str
    offset: str
    magic: str
    mask: str
    interpreter: str
    flags: str

    def line(self) -> str:
        fields = (self.name, self.kind, self.offset, self.magic, self.mask, self.interpreter)
        return ":" + ":".join((*fields, self.flags))


# ---------------------------------------------------------------- pure


def native_arch(machine: str) -> str:
    """The Debian name of ``uname -m``'s architecture."""
    return ARCHES.get(machine, machine)


def parse_conf(text: str) -> Registration:
    """The registration of a binfmt.d file (comments and blank lines ignored)."""
    lines = [line for line in text.splitlines() if line.strip() and line[0] not in "#;"]
    if len(lines) != 1:
        raise BinfmtError(f"expected one registration line, found {len(lines)}")
    fields = lines[0].split(":")
    if len(fields) != 8 or fields[0] != "":
        raise BinfmtError(f"not a binfmt_misc registration: {lines[0]!r}")
    return Registration(*fields[1:])


def with_fix_binary(reg: Registration) -> Registration:
    """The same registration with the ``F`` flag (interpreter opened at registration)."""
    flags = reg.flags if "F" in reg.flags else "".join(sorted(reg.flags + "F"))
    return Registration(reg.name, reg.kind, reg.offset, reg.magic, reg.mask,
                        reg.interpreter, flags)  # fmt: skip


def parse_status(text: str) -> Mapping[str, str]:
    """``/proc/sys/fs/binfmt_misc/<name>``: ``enabled``, ``interpreter``, ``flags``..."""
    status: dict[str, str] = {}
    for line in text.splitlines():
        if line in ("enabled", "disabled"):
            status["state"] = line
        elif line:
            key, _, value = line.partition(" ")
            status[key.rstrip(":")] = value.strip()
    return status


def usable(status: Mapping[str, str]) -> bool:
    return status.get("state") == "enabled" and "F" in status.get("flags", "")


# ---------------------------------------------------------------- adapters


def mounted() -> bool:
    return (MOUNT / "register").exists()


def mount() -> None:
    done = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(MOUNT)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0 or not mounted():
        raise BinfmtError(f"cannot mount binfmt_misc at {MOUNT} (root, and a kernel with "
                          f"binfmt_misc, are needed): {done.stderr.strip()}")  # fmt: skip


def ensure(arch: str) -> None:
    """Make ``arch``'s programs runnable here (nothing to do for the native architecture)."""
    if arch == native_arch(platform.machine()):
        return
    cpu = CPUS.get(arch)
    if cpu is None:
        raise BinfmtError(f"no qemu registration known for {arch!r} (known: {sorted(CPUS)})")
    conf = CONF_DIR / f"qemu-{cpu}.conf"
    if not conf.exists():
        raise BinfmtError(f"no {conf}: install qemu-user-static (`make setup` does)")
    reg = with_fix_binary(parse_conf(conf.read_text()))
    if not Path(reg.interpreter).exists():
        raise BinfmtError(f"{conf} names {reg.interpreter}, which does not exist")
    entry = MOUNT / reg.name
    if entry.exists() and usable(parse_status(entry.read_text())):
        return
    if os.geteuid() != 0:
        raise BinfmtError(f"registering {reg.name} with binfmt_misc needs root")
    if not mounted():
        mount()
    if entry.exists():
        entry.write_text("-1")  # registered without F (or disabled): replace it
    try:
        (MOUNT / "register").write_text(reg.line())
    except OSError as exc:
        raise BinfmtError(f"the kernel refused {reg.line()!r}: {exc}") from exc
    if not (entry.exists() and usable(parse_status(entry.read_text()))):
        raise BinfmtError(f"{entry} is not enabled with the F flag after registering it")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch", nargs="+", help="Debian architecture names, e.g. arm64")
    args = parser.parse_args(argv)
    try:
        for arch in args.arch:
            ensure(arch)
    except BinfmtError as exc:
        print(f"binfmt: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
