"""Each binary's flags to options in one call, as its entry point does it before logging starts:
parse (with IPAM's environment fix-up first), then validate; every problem at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from local_ccm.agent import options as agent
from local_ccm.agent.options import AgentOptions, ConfigResolver, RulesOpener
from local_ccm.cli import central
from local_ccm.cli import ipam as cli_ipam
from local_ccm.cli import lifecycle as cli_lifecycle
from local_ccm.flags import Problem, parse
from local_ccm.ipam import options as ipam
from local_ccm.ipam.options import IpamOptions
from local_ccm.lifecycle import options as lifecycle
from local_ccm.lifecycle.options import LifecycleOptions


def load_agent(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    resolve: ConfigResolver | None = None,
    open_rules: RulesOpener | None = None,
) -> AgentOptions | list[Problem]:
    parsed = parse(agent.FLAGS, argv, env)
    return agent.options_from(parsed, env, resolve=resolve, open_rules=open_rules)


def load_lifecycle(argv: Sequence[str], env: Mapping[str, str]) -> LifecycleOptions | list[Problem]:
    """The binary's whole table (its controller's flags and the process's own, as
    `central.single_flags` makes it), so a Deployment's command line parses as in the Pod."""
    table = central.single_flags(cli_lifecycle.controller())
    return lifecycle.options_from(parse(table, argv, env))


def load_ipam(argv: Sequence[str], env: Mapping[str, str]) -> IpamOptions | list[Problem]:
    fixed_env, warnings, problems = ipam.resolve_resource_lock_env(env)
    parsed = parse(central.single_flags(cli_ipam.controller()), argv, fixed_env)
    return ipam.options_from(parsed, env, warnings=warnings, problems=problems)
