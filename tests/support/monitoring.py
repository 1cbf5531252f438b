"""What the monitoring checks read: the families and sample names of a /metrics text, the
metric names a PromQL expression uses, the queries of a Grafana dashboard as Grafana would
send them, the chart's rules as a promtool rule file, and a Prometheus configuration for
scraping the controllers' secure /metrics. Pure functions; the tests run promtool and
prometheus on what these return."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: The one product prefix, and the generic families (client-go, controller-runtime,
#: prometheus_client) the processes export under their upstream names (docs/metrics.md).
PRODUCT_PREFIX = "local_ccm_"
GENERIC_PREFIXES = (
    "workqueue_", "rest_client_", "leader_election_", "controller_runtime_", "process_",
    "python_",
)  # fmt: skip
_METRIC = re.compile(
    r"\b((?:local_ccm|leader_election|rest_client|workqueue|controller_runtime|process|python)"
    r"_[A-Za-z0-9_]*[A-Za-z0-9])\b"
)
#: Grafana's built-in interval variables, as a 5m rate window and a 1h range would fill them.
GRAFANA_BUILTINS = {
    "__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__range_s": "3600",
}  # fmt: skip
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.S)


# ------------------------------------------------------------------ /metrics text
def families(text: str) -> dict[str, str]:
    """Family name -> type, from the `# TYPE` lines."""
    found = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            found[name] = kind.strip()
    return found


def sample_names(text: str) -> set[str]:
    """The name of every sample line (histograms: `_bucket`, `_sum`, `_count`)."""
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def foreign(names: Sequence[str]) -> list[str]:
    """The names outside the product prefix and the generic families."""
    return sorted(n for n in names if not n.startswith((PRODUCT_PREFIX, *GENERIC_PREFIXES)))


def metric_names(expr: str) -> set[str]:
    """Every metric name of ours or of the generic families an expression mentions (the
    parts after `by`/`without` are label names and never start with these prefixes)."""
    return set(_METRIC.findall(expr))


def missing_names(used: set[str], scrapes: Mapping[str, str]) -> list[str]:
    """The names of `used` that no scrape has: neither a sample of that name nor the family
    (a labelled family whose labels have no closed set, such as a failure counter by answer
    code, has no sample until the first failure, but its `# TYPE` line is there)."""
    seen: set[str] = set()
    for text in scrapes.values():
        seen |= sample_names(text) | set(families(text))
    return sorted(used - seen)


# ------------------------------------------------------------------ Grafana
@dataclass(frozen=True)
class Query:
    """One PromQL query of a dashboard: `where` names the panel and target."""

    where: str
    expr: str


def panels(dashboard: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel, also those inside (collapsed) rows."""
    for panel in dashboard.get("panels") or ():
        yield panel
        yield from panels(panel)


def variables(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Template variable -> the value Grafana puts in a query with "All" selected (a regex
    matching everything: the queries use them only in `=~` matchers)."""
    return {v["name"]: ".*" for v in (dashboard.get("templating") or {}).get("list") or ()}


def expand(expr: str, values: Mapping[str, str]) -> str:
    """`$x`, `${x}`, `${x:format}` and `[[x]]` replaced as Grafana does; an unknown variable
    raises KeyError (a typo in a panel would otherwise reach Prometheus verbatim)."""

    def one(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        return {**GRAFANA_BUILTINS, **values}[name]

    return _VARIABLE.sub(one, expr)


def queries(dashboard: Mapping[str, Any]) -> list[Query]:
    """Every panel target's expression, expanded."""
    values = variables(dashboard)
    found = []
    for panel in panels(dashboard):
        for target in panel.get("targets") or ():
            if "expr" in target:
                where = f"panel {panel.get('id')} {panel.get('title')!r} target {target['refId']}"
                found.append(Query(where, expand(target["expr"], values)))
    return found


def variable_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    """The series selectors inside the `label_values(<selector>, <label>)` query variables."""
    found = []
    for var in (dashboard.get("templating") or {}).get("list") or ():
        query = var.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        match = _LABEL_VALUES.match(text)
        if var.get("type") == "query" and match:
            found.append(Query(f"variable {var['name']}", match.group(1)))
    return found


def recording_rules(found: Sequence[Query]) -> str:
    """One rule group recording each query: `promtool check rules` then parses every one."""
    rules = [{"record": f"local_ccm_dashboard:query_{i}", "expr": q.expr}
             for i, q in enumerate(found)]  # fmt: skip
    return yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False)


# ------------------------------------------------------------------ Prometheus
@dataclass(frozen=True)
class ScrapeJob:
    """One job scraping `target` (host:port) over HTTPS with the token in `token_file`."""

    name: str
    target: str
    token_file: Path
    ca_file: Path


def prometheus_config(jobs: Sequence[ScrapeJob], interval: str = "1s") -> str:
    """A configuration scraping each job's /metrics as the chart's PodMonitors do: HTTPS, a
    ServiceAccount token as the bearer, the serving certificate checked against `ca_file`."""
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": job.name,
                "scheme": "https",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(job.token_file)},
                "tls_config": {"ca_file": str(job.ca_file)},
                "static_configs": [{"targets": [job.target]}],
            }
            for job in jobs
        ],
    }  # fmt: skip
    return yaml.safe_dump(config, sort_keys=False)
