"""Run the agent in-process with only its netlink side in a test namespace
(pattern 3 in docs/testing.md), and small helpers the agent's integration tests share.

The agent gets its own thread and event loop; ``stop()`` sets its stop event (the same path
as SIGTERM) and waits for the exit code. Options come from the real flag loader, so a test's
argv is exactly a command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from local_ccm.agent.options import AgentOptions
from local_ccm.agent.run import Agent
from local_ccm.cli.agent import serve_agent
from local_ccm.kube.client import Client
from local_ccm.kube.errors import ApiError
from tests.support import resources as r
from tests.support.options import load_agent as load_options

QUIET_HTTP = ("--metrics-bind-address=0", "--health-probe-bind-address=0")
# Short intervals so a scenario sees ticks, settles and resyncs within its timeout.
FAST = ("--reconcile-interval=1s", "--settle-time=1s", "--resync-interval=1m")


def options(
    argv: Sequence[str], kubeconfig: Path, env: Mapping[str, str] | None = None
) -> AgentOptions:
    """Validated options for ``argv``; credentials from ``kubeconfig`` via $KUBECONFIG."""
    loaded = load_options(list(argv), {"KUBECONFIG": str(kubeconfig), **(env or {})})
    if not isinstance(loaded, AgentOptions):
        raise AssertionError(f"invalid test command line {list(argv)}: {loaded}")
    return loaded


class InProcessAgent:
    """``with InProcessAgent(opts, netns=ns.name) as agent:`` runs the loop until the block ends."""

    def __init__(self, opts: AgentOptions, *, netns: str | None) -> None:
        self.options = opts
        self.netns = netns
        self.agent: Agent | None = None
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="agent-under-test", daemon=True)

    def _main(self) -> None:
        try:
            self.exit_code = asyncio.run(self._run())
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            self._started.set()

    async def _run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def started(agent: Agent) -> None:
            self.agent = agent
            self._started.set()

        return await serve_agent(self.options, stop=self._stop, netns=self.netns, on_start=started)

    def start(self) -> InProcessAgent:
        self._thread.start()
        if not self._started.wait(30):
            raise AssertionError("the agent did not start within 30 s")
        if self.error is not None:
            raise AssertionError(f"the agent failed at start-up: {self.error!r}") from self.error
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the agent did not stop within {timeout}s")
        if self.error is not None:
            raise AssertionError(f"the agent crashed: {self.error!r}") from self.error
        return self.exit_code

    def __enter__(self) -> InProcessAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_once(opts: AgentOptions, *, netns: str | None) -> int:
    """``--run-once`` in-process (its own event loop in this thread)."""
    return asyncio.run(serve_agent(opts, netns=netns))


# ------------------------------------------------------------------ reading results
def addresses(kube: Client, name: str) -> list[tuple[str, str]]:
    node = kube.get(r.NODES, name)
    return [(a["type"], a["address"]) for a in (node.get("status") or {}).get("addresses") or []]


def taint_keys(node: Mapping[str, Any]) -> list[str]:
    return [t["key"] for t in (node.get("spec") or {}).get("taints") or []]


def condition(node: Mapping[str, Any], kind: str) -> tuple[str, str] | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status")), str(c.get("reason"))
    return None


def event_reasons(kube: Client, node: str, namespace: str = "default") -> list[str]:
    try:
        found = kube.list(
            r.EVENTS, namespace=namespace, field_selector=f"involvedObject.name={node}"
        )
    except ApiError:
        return []
    return [str(e.get("reason")) for e in found.get("items") or []]


def metric(agent: Agent, name: str, labels: Mapping[str, str] | None = None) -> float:
    """One sample of the agent's registry (0 when absent)."""
    value = agent.metrics.registry.get_sample_value(name, dict(labels or {}))
    return 0.0 if value is None else value
