"""bench/fleet/metrics.py's Prometheus pipeline, and what is measured through it: its own series and memory, and every dashboard query.

The test suite's Prometheus runner (``tests/servers.py``), with the bench's configuration: Debian's
``prometheus`` scrapes every simulated rank as its own target (``__metrics_path__`` and ``instance`` set
per target, ``job`` from the scrape config), evaluates ``grafana/alerts/torch-compile-rules.yml`` as
shipped and sends its alerts to an Alertmanager. Only scrape and evaluation intervals are set.

The other pipeline (vmagent, VictoriaMetrics, vmalert) is ``fleet_vm.py``'s; both answer the same
questions (:class:`FleetPrometheus`'s methods below the process ones), so ``fleet_run.py`` measures either.

Imported by bench/fleet/metrics.py.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.fleet.ranks import sample_name
from tests.servers import Prometheus, http_get

RULES = ROOT / "grafana" / "alerts" / "torch-compile-rules.yml"
DASHBOARDS = ROOT / "grafana" / "dashboards"
JOB = "torch"
RANKS_PER_NODE = 8  # instance = node<rank // 8>:<9464 + rank % 8>, as 8 ranks per host would be scraped

SELF_METRICS = (
    "prometheus_tsdb_head_series",
    "prometheus_tsdb_head_chunks",
    "prometheus_tsdb_head_samples_appended_total",
    "process_resident_memory_bytes",
    "go_memstats_heap_inuse_bytes",
    "process_cpu_seconds_total",
    "prometheus_rule_group_iterations_missed_total",
    "prometheus_target_scrapes_exceeded_sample_limit_total",
    "prometheus_target_scrape_pool_exceeded_target_limit_total",
)


class FleetPrometheus(Prometheus):
    """Prometheus scraping ``world`` ranks, each its own target, all served on the fleet server's ``server_port``.

    No exemplar storage. A large job's Prometheus is given longer: 60 s to be ready, 120 s per API call,
    60 s to exit on SIGTERM.
    """

    ready_timeout = 60
    stop_grace = 60
    api_timeout = 120

    pipeline = "prometheus"

    def __init__(
        self,
        world: int,
        server_port: int,
        scrape: str,
        evaluation: str,
        rules: Path = RULES,
        alertmanager_url: str | None = None,
    ) -> None:
        super().__init__([], [rules])
        self.world, self.server_port, self.scrape, self.evaluation = world, server_port, scrape, evaluation
        self.alertmanager_url = alertmanager_url

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "global": {"scrape_interval": self.scrape, "evaluation_interval": self.evaluation},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [scrape_config(self.world, self.server_port)],
        }
        if self.alertmanager_url:
            am = self.alertmanager_url.split("://", 1)[1]
            out["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]}
        return out

    def flags(self) -> list[str]:
        return []

    def __enter__(self) -> FleetPrometheus:
        if shutil.which("prometheus") is None:
            raise SystemExit("prometheus is not installed (apt-get install prometheus)")
        try:
            super().__enter__()
        except BaseException:  # Ctrl-C or a failed start: no process, no files left behind
            if hasattr(self, "_p"):
                self._p.stop(self.stop_grace)
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        return self

    @property
    def pid(self) -> int:
        return self._p.proc.pid

    # -- what fleet_run.py asks of a pipeline (fleet_vm.FleetVM answers the same) --------------------------------

    def components(self) -> dict[str, int]:
        """Each process of the pipeline, by name: its pid."""
        return {"prometheus": self.pid}

    def store_api(self, path: str, **params: str) -> Any:
        """The store's Prometheus API, as Grafana asks it."""
        return self.api(path, **params)

    def ruler_view(self, promql: str) -> list[dict[str, Any]]:
        """An instant query as the ruler sees the store now (Prometheus: every sample it has)."""
        return self.api("query", query=promql)["result"]

    def rule_groups(self) -> list[dict[str, Any]]:
        """The ruler's /api/v1/rules groups."""
        return self.api("rules")["groups"]

    def ruler_alerts(self) -> list[dict[str, Any]]:
        """The ruler's pending and firing alerts (/api/v1/alerts)."""
        return self.api("alerts")["alerts"]

    def stats(self) -> dict[str, float]:
        """The pipeline's own numbers, by common names: series stored, samples ingested (a counter), evaluations missed."""
        m = self.self_metrics(SELF_METRICS)
        return {
            **m,
            "series_stored": m.get("prometheus_tsdb_head_series", 0.0),
            "samples_ingested_total": m.get("prometheus_tsdb_head_samples_appended_total", 0.0),
            "rule_iterations_missed_total": m.get("prometheus_rule_group_iterations_missed_total", 0.0),
        }

    def series_count(self) -> float | None:
        return self.stats()["series_stored"]

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def self_metrics(self, names: tuple[str, ...]) -> dict[str, float]:
        """Prometheus's own /metrics: the named series summed over their label sets."""
        out: dict[str, float] = {}
        for line in http_get(f"{self.url}/metrics", timeout=30).splitlines():
            if line.startswith("#"):
                continue
            name = sample_name(line)
            if name == "prometheus_target_interval_length_seconds" and 'quantile="0.99"' in line:
                out["scrape_interval_p99"] = max(out.get("scrape_interval_p99", 0.0), float(line.rsplit(" ", 1)[1]))
            if name in names:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def proc_status(self) -> dict[str, float]:
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
        return out


def scrape_config(world: int, server_port: int) -> dict[str, Any]:
    """The ``torch`` job: every simulated rank its own target, all on the fleet server's port (one path each)."""
    targets = []
    for rank in range(world):
        node, slot = divmod(rank, RANKS_PER_NODE)
        labels = {"__metrics_path__": f"/rank/{rank}", "instance": f"node{node:04d}:{9464 + slot}"}
        targets.append({"targets": [f"127.0.0.1:{server_port}"], "labels": labels})
    return {"job_name": JOB, "static_configs": targets}


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title or variable, PromQL) for every query the shipped dashboards send Prometheus."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        dash = json.loads(path.read_text())
        panels = [p2 for p in dash["panels"] for p2 in (p, *p.get("panels", []))]
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t and t.get("datasource", p.get("datasource", {})).get("uid") == "${datasource}":
                    out.append((path.stem, p["title"], t["expr"]))
        for v in dash["templating"]["list"]:
            q = v.get("query")
            if isinstance(q, dict) and "label_values" in q.get("query", ""):
                out.append((path.stem, f"variable ${v['name']}", q["query"]))
    return out


def _substitute(expr: str) -> str:
    """What Grafana sends for job=torch, rank=All (.*), with $__rate_interval at 4x a 15 s scrape."""
    out = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "1h")
    return out.replace("$job", JOB).replace("$rank", ".*")


def time_query(pipe: Any, expr: str, reps: int = 3) -> dict[str, Any]:
    """A dashboard query as Grafana would send it, ``reps`` times: median and max seconds, and its result's length.

    ``pipe``: a pipeline (its ``store_api``). A query the store refuses or times out is recorded with its error.
    """
    expr = _substitute(expr)
    m = re.fullmatch(r"label_values\((.*), (\w+)\)", expr)
    times, n = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        try:
            if m:
                data = pipe.store_api(f"label/{m.group(2)}/values", **{"match[]": m.group(1)})
                n = len(data)
            else:
                data = pipe.store_api("query", query=expr)
                n = len(data["result"])
        except (OSError, AssertionError, ValueError) as exc:
            return {"median_s": None, "max_s": None, "result_len": None, "error": str(exc)[:300]}
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "max_s": max(times), "result_len": n}
