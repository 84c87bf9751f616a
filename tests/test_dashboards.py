"""The Grafana dashboards and alert rules, proven against a real Prometheus that scraped a real two-rank workload.

Every PromQL expression of every panel (and every template variable) is run
through Prometheus' HTTP API after substituting the template variables as
Grafana would. Each must parse and return data: the workload has a graph
break, recompiles, failures, a recompile-limit hit, compiled autograd and an
inductor compile, so even the panels that are empty when a job is healthy have
something to show. Grafana itself cannot run here; Tempo panels are checked
for structure only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboard_queries import DASHBOARDS, PROMETHEUS_UID, TEMPO_UID, all_prom_targets, panels, substitute
from tests.dashboard_queries import load as _load
from tests.helpers import WORKLOADS, start_python
from tests.servers import Prometheus, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "grafana" / "alerts" / "torch-compile-rules.yml"


def test_there_are_five_dashboards_with_unique_stable_uids():
    uids = [_load(p)["uid"] for p in DASHBOARDS]
    assert len(DASHBOARDS) == 5 and len(set(uids)) == 5
    assert all(re.fullmatch(r"torch-compile-[a-z-]+", u) for u in uids)
    assert {_load(p)["title"] for p in DASHBOARDS} >= {"torch.compile overview", "torch.compile ranks", "torch.compile caches"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_structure(path):
    dash = _load(path)
    assert dash["schemaVersion"] >= 39
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["type"] == "query"
    assert variables["rank"]["multi"] is True and variables["rank"]["includeAll"] is True
    # no hard-coded datasource uid anywhere: only the template variables (and Grafana's own annotations)
    uids = set(re.findall(r'"uid": "([^"]*)"', json.dumps(dash["panels"]) + json.dumps(dash["templating"])))
    assert uids <= {PROMETHEUS_UID, TEMPO_UID}, uids
    if TEMPO_UID in uids:
        assert variables["tempo"]["type"] == "datasource" and variables["tempo"]["query"] == "tempo"
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        if p["type"] == "row":
            continue
        queries = [t.get("expr") or t.get("query") for t in p.get("targets", [])]
        assert queries and all(queries), f"{path.stem}: panel {p['title']!r} has no query"
        assert p.get("description"), f"{path.stem}: panel {p['title']!r} does not say what it shows"
        for t in p["targets"]:
            if "expr" in t:
                assert 'job=~"$job"' in t["expr"] and 'rank=~"$rank"' in t["expr"], t["expr"]


def test_provisioning_matches_the_dashboards_and_datasources():
    ds = yaml.safe_load((ROOT / "grafana" / "provisioning" / "datasources" / "datasources.yaml").read_text())["datasources"]
    by_uid = {d["uid"]: d for d in ds}
    assert by_uid["prometheus"]["type"] == "prometheus" and by_uid["tempo"]["type"] == "tempo"
    links = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert links == [{"name": "trace_id", "datasourceUid": "tempo"}]  # the exemplar label torch-otel writes
    providers = yaml.safe_load((ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml").read_text())["providers"]
    assert providers[0]["type"] == "file" and providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[Prometheus]:
    """Two ranks of the failing workload, held alive while a real Prometheus (with the alert rules) scrapes them."""
    tmp = tmp_path_factory.mktemp("dashboards")
    base = free_port(consecutive=2)
    release = tmp / "release"
    with Prometheus([f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"], rule_files=[RULES]) as prom:
        procs = []
        for rank in (0, 1):
            env = {
                "WITH_BRIDGE": "1",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": "2",
                "COMPILED_AUTOGRAD": "1" if rank == 0 else "0",
                "INDUCTOR": "1" if rank == 0 else "0",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "prometheus",
                "OTEL_EXPORTER_PROMETHEUS_PORT": str(base),
                "RELEASE_FILE": str(release),
            }
            log = tmp / f"rank{rank}.log"
            procs.append((start_python([str(WORKLOADS / "hold.py"), str(WORKLOADS / "mixed.py")], env, log), log))
        try:
            for proc, log in procs:
                wait_until(lambda p=proc, lg=log: p.poll() is None and "HOLDING" in lg.read_text(), 300, f"{log.name} to finish")
            # Every series exists from a rank's first compile (at 0): wait for the workloads' last events instead.
            prom.wait_for('count(torch_compile_recompile_limit_hits_total{job="torch"} == 1) == 2')
            prom.wait_for('count(torch_compile_cache_requests_total{job="torch", rank="0"}) > 0')  # rank 0's inductor
            time.sleep(3)  # a few more scrapes of the final values, for rate()
            yield prom
        finally:
            release.touch()
            for proc, _ in procs:
                proc.wait(60)


@pytest.mark.parametrize("rank", [".*", "(0|1)", "1"], ids=["all-ranks", "both-selected", "rank-1"])
def test_every_panel_query_parses_and_returns_data(scraped, rank):
    targets = all_prom_targets()
    assert len(targets) >= 25
    empty, histograms = [], []
    for dash, title, expr in targets:
        if rank == "1" and "cache" in expr:
            continue  # rank 1 runs no inductor compile, so it has no cache lookups
        result = scraped.query(substitute(expr, rank))  # raises on a PromQL error
        if rank == "1" and ("_bucket" in expr or "phase_duration" in expr):
            histograms.append(result)  # rank 1 is not a detail rank (TORCH_OTEL_DETAIL_RANKS=0): it serves none
        elif not result:
            empty.append(f"{dash}: {title}: {expr}")
    assert not empty, "\n".join(empty)
    assert all(not r for r in histograms), histograms
    assert len(histograms) == (5 if rank == "1" else 0)


def test_template_variables_list_the_jobs_and_ranks(scraped):
    for path in DASHBOARDS:
        variables = {v["name"]: v for v in _load(path)["templating"]["list"]}
        for name, want in (("job", ["torch"]), ("rank", ["0", "1"])):
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", variables[name]["query"]["query"])
            assert m and m.group(2) == name
            values = scraped.api(f"label/{name}/values", **{"match[]": substitute(m.group(1), ".*")})
            assert values == want, (path.stem, name, values)


def test_alert_rules_load_and_fire_on_the_failing_workload(scraped):
    groups = scraped.api("rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert len(rules) == 9 and all(r["health"] == "ok" for r in rules.values()), rules

    def firing() -> list[dict[str, Any]]:
        return [a for a in scraped.api("alerts")["alerts"] if a["state"] == "firing"]

    def ranks(name: str) -> set[str]:
        return {a["labels"]["rank"] for a in firing() if a["labels"]["alertname"] == name}

    for name in ("TorchCompileRecompileLimitHit", "TorchCompileFailures"):
        wait_until(lambda n=name: ranks(n) == {"0", "1"}, 30, f"{name} firing for both ranks")
    # a healthy job's thresholds are not crossed by this small workload
    assert not {a["labels"]["alertname"] for a in firing()} & {"TorchCompileSlow", "TorchCompileRankSkew", "TorchStartupSlowRank"}
