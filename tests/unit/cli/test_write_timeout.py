"""The write fence holds for every central controller: with leader election on, each
composition hands its API adapter the election's write timeout (so a deposed leader's write
gives up before a successor can hold the Lease), and each adapter puts it on every write.
Nothing here reaches an API server: the units are built, never run, and the adapters talk to a
scripted transport."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pytest

from local_ccm import flags
from local_ccm.bmc.api import KubeBmcApi
from local_ccm.cli import bmc, central, csr, ipam, lbipam, lifecycle, manager
from local_ccm.cli.central import Place
from local_ccm.csr.api import KubeCsrApi
from local_ccm.ipam import options as ipam_options
from local_ccm.ipam.api import KubeIpamApi
from local_ccm.kube.aio import AsyncClient
from local_ccm.kube.backoff import RetryPolicy
from local_ccm.kube.client import Client
from local_ccm.kube.config import ClusterConfig
from local_ccm.lbipam.api import KubeLbApi
from local_ccm.lifecycle.api import KubeNodeApi
from local_ccm.lifecycle.options import FLAGS as LIFECYCLE_FLAGS
from local_ccm.runtime.host import election_config, write_timeout_of
from tests.fakes.transport import FakeTransport, json_response

CLUSTER = ClusterConfig("https://127.0.0.1:1")  # never dialled
# Not the defaults (15 s, 10 s: 5 s), and not the client's 15 s: min(12 - 9, 9 / 2) = 3 s.
LEASE = ["--leader-elect-lease-duration=12s", "--leader-elect-renew-deadline=9s",
         "--leader-elect-retry-period=2s",
         "--leader-elect-resource-namespace=kube-system"]  # fmt: skip
Adapters = list[dict[str, Any]]


def recorded(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> Adapters:
    """The keyword arguments of every adapter `module` builds under `name`."""
    real: Callable[..., Any] = getattr(module, name)
    seen: Adapters = []

    def build(*args: Any, **kw: Any) -> Any:
        seen.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(module, name, build)
    return seen


def load(entry: central.Row, table: flags.FlagSet, argv: Sequence[str]) -> central.Bound:
    fixed = central.fix_env({}, [entry])
    parsed = flags.parse(table, list(argv), fixed[0])
    assert isinstance(parsed, flags.Parsed), parsed
    loaded = entry.bind(parsed, fixed)
    assert not isinstance(loaded, list), loaded
    return loaded


TABLES = {"node-lifecycle": LIFECYCLE_FLAGS, "node-ipam": ipam_options.FLAGS}


def build(name: str, argv: Sequence[str]) -> central.Bound:
    """Build `name`'s unit from `argv` as the path does, with the process settings its own
    options give; the loaded controller. The lifecycle controller probes nothing here (no
    test socket is opened)."""
    more = ["--probe=none"] if name == "node-lifecycle" else []
    loaded = load(load_entry(name), TABLES.get(name) or manager.manager_flags(), [*argv, *more])
    loaded.build(loaded.shared(), Place(CLUSTER, "me"))
    return loaded


def load_entry(name: str) -> central.Row:
    rows: dict[str, central.Row] = {
        "node-lifecycle": lifecycle.controller(), "node-ipam": ipam.controller(),
        "csr": csr.controller(), "lbipam": lbipam.controller(), "bmc": bmc.controller(),
    }  # fmt: skip
    return rows[name]


CASES = [("node-lifecycle", lifecycle, "KubeNodeApi"), ("node-ipam", ipam, "KubeIpamApi"),
         ("csr", csr, "KubeCsrApi"), ("lbipam", lbipam, "KubeLbApi"),
         ("bmc", bmc, "KubeBmcApi")]  # fmt: skip


@pytest.mark.parametrize(("name", "module", "adapter"), CASES)
def test_with_leader_election_the_adapter_gets_the_election_s_write_timeout(
    monkeypatch: pytest.MonkeyPatch, name: str, module: ModuleType, adapter: str
) -> None:
    seen = recorded(monkeypatch, module, adapter)
    lease = build(name, ["--leader-elect=true", *LEASE]).shared().lease
    assert lease is not None
    assert [kw.get("write_timeout") for kw in seen] == [election_config(lease, "-").write_timeout]
    assert seen[0]["write_timeout"] == 3.0


@pytest.mark.parametrize(("name", "module", "adapter"), CASES)
def test_without_leader_election_writes_keep_the_client_s_timeout(
    monkeypatch: pytest.MonkeyPatch, name: str, module: ModuleType, adapter: str
) -> None:
    seen = recorded(monkeypatch, module, adapter)
    build(name, ["--leader-elect=false"])
    assert [kw.get("write_timeout") for kw in seen] == [None]


def test_the_helper_is_the_election_s_write_timeout_or_none() -> None:
    lease = load(lifecycle.controller(), LIFECYCLE_FLAGS, LEASE).shared().lease
    assert lease is not None
    assert write_timeout_of(lease) == election_config(lease, "x").write_timeout == 3.0
    assert write_timeout_of(None) is None


# ---------------------------------------------------------------- every write carries it


def scripted(answers: int) -> tuple[AsyncClient, FakeTransport]:
    fake = FakeTransport([json_response(200, {"metadata": {"name": "x"}})] * answers)
    client = Client(CLUSTER, field_manager="fm", transport=fake, timeout=15.0,
                    retry=RetryPolicy(max_attempts=1))  # fmt: skip
    return AsyncClient(client), fake


def test_every_csr_write_carries_the_write_timeout() -> None:
    client, fake = scripted(3)
    api = KubeCsrApi(client, write_timeout=3.0)

    async def writes() -> None:
        await api.get_csr("c")
        await api.update_approval({"metadata": {"name": "c"}})
        await api.create_event("ns", {"metadata": {"name": "e"}})

    asyncio.run(writes())
    assert fake.timeouts == [15.0, 3.0, 3.0]  # the read keeps the client's


def test_every_lb_ipam_write_carries_the_write_timeout() -> None:
    client, fake = scripted(4)
    api = KubeLbApi(client, None, write_timeout=3.0)

    async def writes() -> None:
        await api.patch_service("ns", "s", [])
        await api.patch_service_status("ns", "s", [])
        await api.write_pool_status("p", {})
        await api.create_event("ns", {"metadata": {"name": "e"}})

    asyncio.run(writes())
    assert fake.timeouts == [3.0] * 4


def test_every_node_ipam_write_carries_the_write_timeout() -> None:
    client, fake = scripted(5)
    api = KubeIpamApi(client, write_timeout=3.0)

    async def writes() -> None:
        await api.get_node("n")
        await api.patch_node("n", [])
        await api.patch_cluster_cidr("c", [])
        await api.patch_cluster_cidr_status("c", {})
        await api.create_event("ns", {"metadata": {"name": "e"}})

    asyncio.run(writes())
    assert fake.timeouts == [15.0, 3.0, 3.0, 3.0, 3.0]


def test_every_node_bmc_write_carries_the_write_timeout() -> None:
    client, fake = scripted(4)
    api = KubeBmcApi(client, write_timeout=3.0)

    async def writes() -> None:
        await api.get_secret("ns", "s")
        await api.write_status("n", {})
        await api.patch_node("n", [])
        await api.create_event("ns", {"metadata": {"name": "e"}})

    asyncio.run(writes())
    assert fake.timeouts == [15.0, 3.0, 3.0, 3.0]  # the Secret read keeps the client's


def test_the_lifecycle_adapter_writes_carry_it_too() -> None:
    client, fake = scripted(2)
    api = KubeNodeApi(client, write_timeout=3.0)
    asyncio.run(api.patch_node("n", []))
    asyncio.run(api.create_event("ns", {"metadata": {"name": "e"}}))
    assert fake.timeouts == [3.0, 3.0]
