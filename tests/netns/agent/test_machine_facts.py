"""Machine facts read from a real /sys/class/dmi/id, mounted in a private mount namespace.

Each test mounts a tmpfs over /sys/class inside `unshare --mount`, writes the DMI files a real
machine of that kind exposes, and runs `agent.machine.read_facts` there: the adapter reads the
real path, nothing is faked in-process. The serial number, UUID and asset tag present in the
trees must never come out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SERIAL = "SERIAL-4XG7Q93"
SECRETS = {"product_serial": SERIAL, "product_uuid": "4c4c4544-0058-4710-8037-b4c04f513933"}
# Values as the kernel shows them on these machines (trailing newline included).
DELL_R650 = {
    "sys_vendor": "Dell Inc.\n",
    "product_name": "PowerEdge R650\n",
    "product_family": "PowerEdge\n",
    "board_vendor": "Dell Inc.\n",
    "board_name": "0Y2K8N\n",
    "chassis_type": "23\n",
    "bios_vendor": "Dell Inc.\n",
    "chassis_asset_tag": "\n",
    **SECRETS,
}
QEMU_Q35 = {
    "sys_vendor": "QEMU\n",
    "product_name": "Standard PC (Q35 + ICH9, 2009)\n",
    "product_version": "pc-q35-8.2\n",
    "chassis_type": "1\n",
    "chassis_vendor": "QEMU\n",
    "bios_vendor": "SeaBIOS\n",
    **SECRETS,
}
WHITEBOX = {
    "sys_vendor": "To Be Filled By O.E.M.\n",
    "product_name": "To Be Filled By O.E.M.\n",
    "board_vendor": "ASRockRack\n",
    "board_name": "X570D4U\n",
    "chassis_type": "3\n",
    **SECRETS,
}
READ = (
    "import json; from local_ccm.agent.machine import read_facts; f = read_facts(); "
    "print(json.dumps({'values': f.values(), 'missing': f.dmi_missing}))"
)


def facts_in_namespace(tmp_path: Path, tree: dict[str, str] | None) -> dict[str, Any]:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is required for the mount-namespace tests")
    source = tmp_path / "dmi"
    source.mkdir()
    for name, text in (tree or {}).items():
        (source / name).write_text(text)
    make = 'mkdir -p /sys/class/dmi/id && cp -a "$1"/. /sys/class/dmi/id/ && ' if tree else ""
    script = f'mount -t tmpfs lcct-dmi /sys/class && {make}exec "$2" -c "$3"'
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(source),
            sys.executable,
            READ,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert SERIAL not in done.stdout
    assert "4c4c4544" not in done.stdout
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_server_dmi_gives_vendor_product_and_chassis(tmp_path: Path) -> None:
    got = facts_in_namespace(tmp_path, DELL_R650)
    values = got["values"]
    assert got["missing"] is None
    assert values["dmi.sysVendor"] == "Dell Inc."
    assert values["dmi.productName"] == "PowerEdge R650"
    assert values["dmi.productFamily"] == "PowerEdge"
    assert values["dmi.chassisType"] == "rack-mount-chassis"
    assert int(values["cpu.count"]) >= 1
    assert values["arch"]


def test_vm_dmi_is_read_as_it_is(tmp_path: Path) -> None:
    values = facts_in_namespace(tmp_path, QEMU_Q35)["values"]
    assert values["dmi.sysVendor"] == "QEMU"
    assert values["dmi.productName"] == "Standard PC (Q35 + ICH9, 2009)"
    assert values["dmi.chassisType"] == "other"


def test_firmware_placeholders_are_unknown_not_values(tmp_path: Path) -> None:
    values = facts_in_namespace(tmp_path, WHITEBOX)["values"]
    assert "dmi.sysVendor" not in values
    assert "dmi.productName" not in values
    assert values["dmi.boardName"] == "X570D4U"


def test_no_dmi_is_a_normal_answer_with_a_reason(tmp_path: Path) -> None:
    got = facts_in_namespace(tmp_path, None)
    assert not any(key.startswith("dmi.") for key in got["values"])
    assert "no DMI" in got["missing"]
