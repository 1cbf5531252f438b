"""The chart's l2Announcement switch (docs/l2-announcement.md): off (the default), the agent is
as before — no --l2-* flag, no capability, no Lease Role; on, the agent gets the flags its
own parser accepts, root with NET_RAW as its only capability, and exactly the RBAC the
announcement checks at start-up. Needs only the helm binary."""

from __future__ import annotations

from typing import Any

from local_ccm.cli.announce import announce_permissions
from tests.integration.lbipam.test_lb13_chart import granted
from tests.support.chart import Helm, Obj, args_of, component, container, parse, select
from tests.support.options import load_agent
from tests.unit.agent.test_options import IN_CLUSTER, fake_resolve

ON = {"l2Announcement.enabled": "true", "controllerManager.loadBalancer.class": "x.io/lb",
      "l2Announcement.leaseDuration": "12s", "l2Announcement.renewDeadline": "8s",
      "l2Announcement.renewPeriod": "4s"}  # fmt: skip
NAMESPACE = "kube-system"


def render(chart_helm: Helm, kube_version: str, values: dict[str, str]) -> list[Obj]:
    return parse(chart_helm.template(kube_version=kube_version, set_values=values))


def agent_rbac(objs: list[Obj]) -> list[Obj]:
    label = "app.kubernetes.io/component"
    return [o for o in objs if o["kind"] in {"ClusterRole", "Role"}
            and o["metadata"].get("labels", {}).get(label) == "agent"]  # fmt: skip


def test_off_by_default_the_agent_has_no_l2_flag_capability_or_lease_role(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, {})
    agent = component(objs, "agent")
    assert not [a for a in args_of(agent) if a.startswith("--l2-")]
    context: dict[str, Any] = container(agent).get("securityContext") or {}
    assert "add" not in (context.get("capabilities") or {})
    assert "runAsUser" not in context
    assert not [r for r in select(objs, "Role") if "l2" in r["metadata"]["name"]]
    assert ("list", "discovery.k8s.io", "endpointslices", "", "") not in granted(agent_rbac(objs))


def test_on_the_agent_gets_its_flags_net_raw_and_exactly_the_rbac_it_checks(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, ON)
    agent = component(objs, "agent")
    context = container(agent)["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    assert context["runAsUser"] == 0
    assert context["runAsNonRoot"] is False
    assert context["allowPrivilegeEscalation"] is False
    argv = [a.replace("$(NODE_NAME)", "n1") for a in args_of(agent)]
    options = load_agent(argv, IN_CLUSTER, resolve=fake_resolve)
    assert not isinstance(options, list), [str(p) for p in options]
    assert options.l2 is not None
    assert (options.l2.lease_namespace, options.l2.lb_class) == (NAMESPACE, "x.io/lb")
    assert (options.l2.lease_duration, options.l2.renew_deadline) == (12.0, 8.0)
    needed = {(a.verb, a.group, a.resource, a.namespace, a.name)
              for a in announce_permissions(options)}  # fmt: skip
    assert needed <= granted(agent_rbac(objs))
    off = granted(agent_rbac(render(chart_helm, kube_version, {})))
    assert granted(agent_rbac(objs)) - off == needed - off  # nothing more than it checks
