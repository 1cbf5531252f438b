"""A real node in a process of its own, to be killed: ``python -m tests.support.realnode_driver
<spec.json>`` starts the node the file describes (named after this process's pid), prints
``ready <node dir>`` once the Node is Ready and then waits to be killed. The isolation test
SIGKILLs it and checks that the node dies with it and that the next start sweeps the rest.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from local_ccm.kube.client import Client
from tests.support import nodeconf as nc
from tests.support.pause import PauseImage
from tests.support.realnode import NodeSpec, real_node


def spec_to_json(spec: NodeSpec, *, admin_kubeconfig: Path, base: Path) -> str:
    doc = {
        "name": spec.name, "api_port": spec.api_port, "kubeconfig": str(spec.kubeconfig),
        "client_ca": str(spec.client_ca), "kubelet": str(spec.kubelet),
        "pause": [str(spec.pause.archive), spec.pause.name], "logs": str(spec.logs),
        "images": [[str(i.archive), i.base_name] for i in spec.images],
        "node_ip": spec.node_ip, "admin_kubeconfig": str(admin_kubeconfig), "base": str(base),
    }  # fmt: skip
    return json.dumps(doc)


def spec_from_json(doc: Mapping[str, Any]) -> NodeSpec:
    return NodeSpec(
        name=doc["name"], api_port=doc["api_port"], kubeconfig=Path(doc["kubeconfig"]),
        client_ca=Path(doc["client_ca"]), kubelet=Path(doc["kubelet"]),
        pause=PauseImage(Path(doc["pause"][0]), doc["pause"][1]), logs=Path(doc["logs"]),
        images=tuple(nc.ImageImport(Path(a), b) for a, b in doc["images"]),
        node_ip=doc["node_ip"],
    )  # fmt: skip


def main(argv: Sequence[str]) -> int:
    doc = json.loads(Path(argv[0]).read_text())
    names = nc.NodeNames(os.getpid(), 1, Path(doc["base"]))
    kube = Client.from_kubeconfig(Path(doc["admin_kubeconfig"]), field_manager="realnode-driver")
    with real_node(spec_from_json(doc), names) as node:
        node.wait_ready(kube)
        print(f"ready {names.node_dir}", flush=True)
        while True:
            signal.pause()  # until killed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
