"""What the machine says about itself, as plain values: DMI, CPU, memory, architecture.

Pure, no I/O: `machine_facts` turns the texts of a few sysfs and procfs files (read by
`agent.machine`) into `Facts`. A machine without DMI (many microVMs, some ARM boards) is a normal
case: its DMI fields are simply absent, and `Facts.dmi_missing` says why for `local-ccm detect`.
Serial numbers, UUIDs and asset tags are never read: they are identifiers, not metadata, and some
sites treat them as secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType

from local_ccm.records import dataclass

# sysfs file under /sys/class/dmi/id → the fact name rules and templates use.
DMI_FILES: Mapping[str, str] = MappingProxyType(
    {
        "sys_vendor": "sysVendor",
        "product_name": "productName",
        "product_family": "productFamily",
        "product_version": "productVersion",
        "board_vendor": "boardVendor",
        "board_name": "boardName",
        "chassis_vendor": "chassisVendor",
        "chassis_type": "chassisType",
        "bios_vendor": "biosVendor",
    }
)
DMI_FIELDS = frozenset(DMI_FILES.values())

# SMBIOS 3.x, table 17 (System Enclosure or Chassis Types), as label-friendly names.
_CHASSIS = (
    "other unknown desktop low-profile-desktop pizza-box mini-tower tower portable laptop "
    "notebook hand-held docking-station all-in-one sub-notebook space-saving lunch-box "
    "main-server-chassis expansion-chassis sub-chassis bus-expansion-chassis peripheral-chassis "
    "raid-chassis rack-mount-chassis sealed-case-pc multi-system-chassis compact-pci advanced-tca "
    "blade blade-enclosure tablet convertible detachable iot-gateway embedded-pc mini-pc stick-pc"
)

# Firmware placeholders that mean "the vendor left this empty" (seen on white-box boards; the
# list systemd's hwdb.d/20-dmi-id.hwdb marks as rubbish, and AMI's "To Be Defined By O.E.M.").
# Compared without case and without a trailing dot, which firmware writes either way.
_PLACEHOLDERS = frozenset(
    s.casefold().rstrip(".")
    for s in (
        "To Be Filled By O.E.M.",
        "To Be Defined By O.E.M.",
        "O.E.M.",
        "OEM",
        "System Name",
        "System Product Name",
        "System manufacturer",
        "System Version",
        "Default string",
        "Not Specified",
        "Not Applicable",
        "None",
        "N/A",
        "0123456789",
        "Type1ProductConfigId",
        "",
    )
)

# `uname -m` → the GOARCH spelling Kubernetes uses in kubernetes.io/arch.
_ARCH = MappingProxyType(
    {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "armv6l": "arm",
        "i686": "386",
        "i386": "386",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
        "riscv64": "riscv64",
        "loongarch64": "loong64",
    }
)


@dataclass(frozen=True)
class Facts:
    """The machine's facts. Every value is a string, ready for a template; absent = unknown."""

    dmi: Mapping[str, str] = field(default_factory=dict)
    dmi_missing: str | None = None  # why there is no DMI at all, for `detect`
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    arch: str | None = None

    def values(self) -> dict[str, str]:
        """Facts by the dotted names templates use (`dmi.productName`, `cpu.count`, …)."""
        out = {f"dmi.{name}": value for name, value in self.dmi.items()}
        if self.cpu_model:
            out["cpu.model"] = self.cpu_model
        if self.cpu_count:
            out["cpu.count"] = str(self.cpu_count)
        if self.memory_bytes:
            out["memory.gib"] = str(round(self.memory_bytes / 2**30))
        if self.arch:
            out["arch"] = self.arch
        return out


MACHINE_FACTS = frozenset({"cpu.model", "cpu.count", "memory.gib", "arch"})


def machine_facts(
    dmi_texts: Mapping[str, str] | None,
    cpuinfo: str | None,
    meminfo: str | None,
    machine: str,
    cpu_count: int | None,
) -> Facts:
    """Facts from the texts read: `dmi_texts` maps sysfs file names to contents (None: no DMI)."""
    return Facts(
        dmi={} if dmi_texts is None else dmi_fields(dmi_texts),
        dmi_missing="the kernel exposes no DMI (/sys/class/dmi/id is absent)"
        if dmi_texts is None
        else None,
        cpu_model=cpu_model(cpuinfo or ""),
        cpu_count=cpu_count,
        memory_bytes=memory_bytes(meminfo or ""),
        arch=_ARCH.get(machine, machine or None),
    )


def dmi_fields(texts: Mapping[str, str]) -> dict[str, str]:
    """Known DMI files with real content; placeholders and empty files are left out."""
    out: dict[str, str] = {}
    for file, name in DMI_FILES.items():
        value = " ".join(texts.get(file, "").split())
        if value.casefold().rstrip(".") in _PLACEHOLDERS:
            continue
        if name == "chassisType":
            value = chassis_name(value)
        out[name] = value
    return out


def chassis_name(code: str) -> str:
    """SMBIOS chassis type number → name; an unknown number stays a number."""
    try:
        number = int(code)
    except ValueError:
        return code
    names = _CHASSIS.split()
    return names[number - 1] if 1 <= number <= len(names) else code


_CPU_MODEL = re.compile(r"^(?:model name|Model|cpu model|cpu)\s*:\s*(.+)$", re.M)
_MEM_TOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB", re.M)


def cpu_model(cpuinfo: str) -> str | None:
    """The first CPU model line of /proc/cpuinfo (x86 `model name`, arm64 `Model`, …)."""
    match = _CPU_MODEL.search(cpuinfo)
    return " ".join(match.group(1).split()) if match else None


def memory_bytes(meminfo: str) -> int | None:
    match = _MEM_TOTAL.search(meminfo)
    return int(match.group(1)) * 1024 if match else None
