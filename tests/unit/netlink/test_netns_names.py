"""Pure parts of namespace handling: namespace paths and the split of host blocks."""

from __future__ import annotations

import pytest

from local_ccm.netlink.netns import netns_path
from tests.support.netns import worker_blocks


def test_a_name_maps_to_run_netns() -> None:
    assert netns_path("lcct-1-2") == "/run/netns/lcct-1-2"


def test_an_absolute_path_is_used_as_is() -> None:
    assert netns_path("/proc/42/ns/net") == "/proc/42/ns/net"


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_names_that_would_escape_run_netns_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid network namespace name"):
        netns_path(name)


def test_without_xdist_one_process_owns_all_sixteen_blocks() -> None:
    assert worker_blocks({}) == list(range(16))


def test_xdist_workers_take_disjoint_blocks_by_index_modulo_count() -> None:
    env = {"PYTEST_XDIST_WORKER_COUNT": "3"}
    shares = [worker_blocks({**env, "PYTEST_XDIST_WORKER": f"gw{k}"}) for k in range(3)]

    assert shares[1] == [1, 4, 7, 10, 13]
    assert sorted(b for share in shares for b in share) == list(range(16))
