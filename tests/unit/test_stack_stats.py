"""The pure parts of the whole-stack comparison: usage per process, the agents' extrapolation,
the totals and goals, the generated tables and the README's line; its settings; and the
harness's pure pieces (the chart's command line, what counts as addressed and approved)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.bench import compare_stack, stack_load
from tests.bench import compare_stats as c
from tests.bench import stack_stats as s


def process(rss: list[float], **extra: Any) -> dict[str, Any]:
    base = {"name": "p", "rss_mib": rss, "hwm_mib": max(rss, default=0.0), "cpu_s": 1.0,
            "requests": 10, "response_bytes": 1_000_000, "startup_cpu_s": 0.5}  # fmt: skip
    return {**base, **extra}


def result(window_s: float = 3600.0, nodes: int = 1000) -> dict[str, Any]:
    """Ours: 2 agents measured (10 and 30 MiB) standing for `nodes`, one manager; Go: 2
    agents (30 and 34 MiB) and two controllers."""
    ours = [
        {"name": "agent", "label": "local-ccm agent", "count": nodes,
         "processes": [process([10.0, 10.0, 12.0], cpu_s=0.5, requests=1),
                       process([30.0], cpu_s=1.5, requests=3)]},
        {"name": "local-ccm-controller-manager", "label": "manager",
         "processes": [process([40.0, 50.0, 45.0], hwm_mib=60.0, cpu_s=20.0, requests=1800)]},
    ]  # fmt: skip
    go = [
        {"name": "agent", "label": "Go agent", "count": nodes,
         "processes": [process([30.0], cpu_s=1.0, requests=720),
                       process([34.0], cpu_s=1.0, requests=720)]},
        {"name": "node-lifecycle-controller", "label": "nlc",
         "processes": [process([30.0], cpu_s=20.0, requests=1900)]},
        {"name": "kubelet-csr-approver", "label": "csr",
         "processes": [process([40.0], cpu_s=4.0, requests=1800)]},
    ]  # fmt: skip
    return {"nodes": nodes, "window_s": window_s,
            "load": {"services_live": 10, "services_created": 130, "services_deleted": 120,
                     "csrs": 120, "churn_s": 30.0},
            "stacks": {"ours": {"components": ours}, "go": {"components": go}}}  # fmt: skip


# ------------------------------------------------------------------ usage and extrapolation
def test_a_process_is_its_median_rss_its_peak_and_its_counts() -> None:
    usage = s.process_usage(process([10.0, 40.0, 12.0], hwm_mib=41.0, cpu_s=2.0))
    assert usage.rss_steady_mib == 12.0
    assert usage.rss_peak_mib == 41.0
    assert (usage.cpu_s, usage.requests, usage.response_bytes) == (2.0, 10.0, 1e6)


def test_the_peak_is_never_below_a_sample() -> None:
    assert s.process_usage(process([10.0, 50.0], hwm_mib=20.0)).rss_peak_mib == 50.0


def test_a_process_without_a_sample_is_an_error_not_zero() -> None:
    with pytest.raises(ValueError, match="no RSS sample"):
        s.process_usage(process([]))


def test_extrapolation_is_the_mean_of_the_sample_times_the_count() -> None:
    a, b = s.Usage(10.0, 12.0, 1.0, 2.0, 100.0), s.Usage(30.0, 32.0, 3.0, 4.0, 300.0)
    assert s.extrapolate([a, b], 1000) == s.Usage(20_000.0, 22_000.0, 2_000.0, 3_000.0, 2e5)
    assert s.extrapolate([a, b], 2) == a + b  # the whole population measured: its sum
    with pytest.raises(ValueError, match="no process measured"):
        s.extrapolate([], 1000)


def test_components_say_which_are_extrapolated_and_from_how_many() -> None:
    agent, manager = s.components(result())[:2]
    assert (agent.measured, agent.count, agent.extrapolated) == (2, 1000, True)
    assert agent.usage.rss_steady_mib == pytest.approx((10.0 + 30.0) / 2 * 1000)
    assert agent.usage.requests == pytest.approx(2 * 1000)
    assert (manager.measured, manager.count, manager.extrapolated) == (1, 1, False)
    assert manager.usage.rss_steady_mib == 45.0
    assert s.processes_text(agent) == "1 000 (mean of 2 measured × 1 000)"
    assert s.processes_text(manager) == "1"


def test_totals_add_every_component_of_a_stack() -> None:
    total = s.totals(s.components(result(nodes=10)))
    assert total["ours"].rss_steady_mib == pytest.approx(20.0 * 10 + 45.0)
    assert total["go"].cpu_s == pytest.approx(1.0 * 10 + 20.0 + 4.0)
    assert total["go"].requests == pytest.approx(720 * 10 + 1900 + 1800)


# ------------------------------------------------------------------ rows and goals
def test_counts_are_per_hour_whatever_the_window() -> None:
    hour = {ln.row.key: ln for ln in s.lines(result(window_s=3600.0))}
    quarter = {ln.row.key: ln for ln in s.lines(result(window_s=900.0))}
    assert quarter["requests"].ours == pytest.approx(4 * hour["requests"].ours)
    assert quarter["cpu_s"].go == pytest.approx(4 * hour["cpu_s"].go)
    assert quarter["rss_steady_mib"].ours == hour["rss_steady_mib"].ours  # not a rate
    assert hour["response_bytes"].ours == pytest.approx((1000 * 1.0 + 1.0) * 1e6 / s.MB)


def test_goals_are_memory_cpu_and_requests_at_most_the_go_stack() -> None:
    goals = {row.key: row.goal for row in s.ROWS}
    assert goals["rss_steady_mib"] == goals["cpu_s"] == goals["requests"] == c.Goal("ratio", 1.0)
    assert goals["response_bytes"] is None
    lines = {ln.row.key: ln for ln in s.lines(result())}
    assert lines["requests"].verdict == "met"  # 2 000 + 1 800 against 720 000 + 3 700
    assert lines["rss_steady_mib"].verdict == "met"  # 20 045 against 32 070
    assert lines["cpu_s"].ratio == pytest.approx((1.0 * 1000 + 20.0) / (1.0 * 1000 + 24.0))
    assert lines["cpu_s"].verdict == "met"  # 1 020 against 1 024: at most is enough


def test_a_stack_above_the_go_stack_misses_the_goal() -> None:
    heavy = result()
    heavy["stacks"]["ours"]["components"][1]["processes"][0]["cpu_s"] = 100.0
    lines = {ln.row.key: ln for ln in s.lines(heavy)}
    assert (lines["cpu_s"].ratio or 0.0) > 1
    assert lines["cpu_s"].verdict == "missed"


# ------------------------------------------------------------------ text
def test_the_totals_table_has_a_row_per_measure_with_ratio_and_verdict() -> None:
    table = s.totals_table(result()).splitlines()
    assert len(table) == 2 + len(s.ROWS)
    assert table[2].startswith("| memory, steady (sum of each process's median RSS) | MiB | ")
    assert "| ≤ 1× Go | **met** (0.63×) |" in table[2]
    assert table[-1].endswith("| – | – |")  # start-up CPU: shown, no goal


def test_the_components_table_lists_each_component_then_each_total() -> None:
    table = s.components_table(result(nodes=10)).splitlines()
    assert len(table) == 2 + 5 + 2
    assert table[2].startswith("| local-ccm | local-ccm agent | 10 (mean of 2 measured × 10) |")
    assert table[3].startswith("| local-ccm | manager | 1 | 45.0 | 60.0 |")
    assert table[-2].startswith("| local-ccm | **total** | | **245** |")
    assert table[-1].startswith("| Go stack | **total** | |")


def test_the_facts_name_the_scale_the_load_and_the_extrapolation() -> None:
    text = s.facts_text(result())
    assert text.startswith("1 000 kwok Nodes per plane; a window of one hour (3600 s).")
    assert "10 LoadBalancer Services live, one created and the oldest deleted every 30 s" in text
    assert "(local-ccm 2, Go stack 2)" in text


def test_render_fills_both_marker_pairs_and_keeps_the_prose() -> None:
    page = "\n".join(["intro", c.marker("stack"), "PLACEHOLDER", c.marker("stack", end=True),
                      "between", c.marker("stack-components"), "PLACEHOLDER",
                      c.marker("stack-components", end=True), "outro"])  # fmt: skip
    out = s.render(page, result())
    assert "PLACEHOLDER" not in out
    assert out.startswith("intro\n")
    assert out.endswith("outro")
    assert "\nbetween\n" in out
    assert s.totals_table(result()) in out
    assert s.components_table(result()) in out


def test_the_readme_line_names_scale_window_and_the_three_ratios() -> None:
    line = s.readme_line(result())
    assert line.startswith("Measured side by side on 1 000 Nodes for one hour,")
    assert "memory 0.63×, CPU 1.00×, API requests 0.0053×" in line
    readme = f"# x\n{c.marker('readme')}\nplaceholder\n{c.marker('readme', end=True)}\nrest\n"
    assert s.render_readme(readme, result()) == (
        f"# x\n{c.marker('readme')}\n{line}\n{c.marker('readme', end=True)}\nrest\n"
    )


@pytest.mark.parametrize(
    ("value", "text"), [(None, "–"), (0.8123, "0.81×"), (1.0, "1.00×"), (0.1, "0.10×"),
                        (0.0038, "0.0038×"), (0.0, "0×")],
)  # fmt: skip
def test_ratio_text_keeps_two_significant_digits_below_a_tenth(
    value: float | None, text: str
) -> None:
    assert s.ratio_text(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(3600.0, "one hour"), (3601.2, "one hour"), (600.0, "10 minutes"),
                          (180.4, "3 minutes"), (60.0, "60 s")],
)  # fmt: skip
def test_window_text(seconds: float, text: str) -> None:
    assert s.window_text(seconds) == text


# ------------------------------------------------------------------ settings
def test_stack_settings_from_the_environment() -> None:
    got = c.settings_from_env({"BENCH_STACK_NODES": "1000", "BENCH_STACK_WINDOW": "600",
                               "BENCH_STACK_AGENTS": "3", "BENCH_STACK_SERVICES": "50",
                               "BENCH_STACK_CHURN": "20"})  # fmt: skip
    assert (got.stack_nodes, got.stack_window_s, got.stack_agents) == (1000, 600.0, 3)
    assert (got.stack_services, got.stack_churn_s) == (50, 20.0)


def test_bench_hour_makes_the_stack_window_an_hour_which_may_be_longer_never_shorter() -> None:
    """The agents' real hour is the stack's window: a window shorter than it is refused."""
    assert c.settings_from_env({"BENCH_HOUR": "1"}).stack_window_s == 3600.0
    longer = c.settings_from_env({"BENCH_HOUR": "1", "BENCH_STACK_WINDOW": "4000"})
    assert (longer.agent_hour_s, longer.stack_window_s) == (3600.0, 4000.0)
    assert c.settings_from_env({"BENCH_STACK_WINDOW": "300"}).stack_window_s == 300.0
    assert c.settings_from_env({}).stack_window_s == c.Settings().stack_window_s
    with pytest.raises(ValueError, match=r"BENCH_STACK_WINDOW must be at least BENCH_HOUR"):
        c.settings_from_env({"BENCH_HOUR": "1", "BENCH_STACK_WINDOW": "300"})


def test_stack_settings_must_be_positive_numbers() -> None:
    with pytest.raises(ValueError, match="BENCH_STACK_AGENTS='0' must be positive"):
        c.settings_from_env({"BENCH_STACK_AGENTS": "0"})
    with pytest.raises(ValueError, match="BENCH_STACK_NODES='many' is not a number"):
        c.settings_from_env({"BENCH_STACK_NODES": "many"})


def test_the_stack_line_names_its_settings() -> None:
    settings = c.Settings(stack_nodes=1000, stack_window_s=3600.0).as_dict()
    assert c.settings_text("stack", settings) == (
        "`BENCH_STACK_NODES=1000`, `BENCH_STACK_WINDOW=3600`, `BENCH_STACK_AGENTS=5`, "
        "`BENCH_STACK_SERVICES=10`, `BENCH_STACK_CHURN=30`"
    )


# ------------------------------------------------------------------ the harness's pure pieces
def test_the_managers_command_line_is_the_charts_with_its_servers_on_loopback() -> None:
    chart_args = ["--controllers=node-lifecycle,node-ipam", "--namespace=$(POD_NAMESPACE)",
                  "--node-name=$(NODE_NAME)", "--metrics-bind-address=:8090",
                  "--health-probe-bind-address=:8091", "--v=2"]  # fmt: skip
    got = compare_stack.manager_argv(chart_args, namespace="kube-system", node="kwok-00000",
                                     metrics="127.0.0.1:1", health="127.0.0.1:2")  # fmt: skip
    assert got == ["--controllers=node-lifecycle,node-ipam", "--namespace=kube-system",
                   "--node-name=kwok-00000", "--metrics-bind-address=127.0.0.1:1",
                   "--health-probe-bind-address=127.0.0.1:2", "--v=2"]  # fmt: skip


def service(
    name: str, *, ingress: Sequence[str] = (), note: str = "", deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if note:
        meta["annotations"] = {stack_load.KUBEVIP_ANNOTATION: note}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"loadBalancer": {"ingress": [{"ip": ip} for ip in ingress]}}
    return {"metadata": meta, "status": status}


def test_addressed_is_the_status_for_ours_and_the_annotation_for_kube_vip() -> None:
    svc = service("a", ingress=["198.18.0.1"], note="198.18.0.2,fd00::2")
    assert stack_load.addresses(svc, "ours") == ["198.18.0.1"]
    assert stack_load.addresses(svc, "go") == ["198.18.0.2", "fd00::2"]
    assert stack_load.addresses(service("b"), "go") == []


def test_a_duplicate_is_one_address_on_two_live_services() -> None:
    items = [service("a", ingress=["198.18.0.1"]), service("b", ingress=["198.18.0.1"]),
             service("c", ingress=["198.18.0.2"]),
             service("d", ingress=["198.18.0.2"], deleting=True)]  # fmt: skip
    assert stack_load.duplicates(items, "ours") == ["198.18.0.1"]


def test_approved_means_an_approved_condition_and_no_denied_one() -> None:
    def csr(*kinds: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": k, "status": "True"} for k in kinds]}}

    assert stack_load.is_approved(csr("Approved"))
    assert not stack_load.is_approved(csr())
    assert not stack_load.is_approved(csr("Denied"))
    assert not stack_load.is_approved(csr("Approved", "Denied"))
    assert not stack_load.is_approved({})
