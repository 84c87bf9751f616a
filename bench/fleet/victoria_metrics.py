"""bench/fleet/metrics.py's VictoriaMetrics pipeline: two vmagent members share the scrape, VictoriaMetrics stores, vmalert evaluates.

Debian's ``victoria-metrics`` package (1.79): ``vmagent`` members ``0`` and ``1`` of
``-promscrape.cluster.membersCount=2`` read one scrape config (the same ``torch`` job as the Prometheus
pipeline's: every simulated rank its own target) and each scrapes its half of the targets, remote-writing to
one single-node ``victoria-metrics``. ``vmalert`` evaluates ``grafana/alerts/torch-compile-rules.yml``
unchanged against it (``-datasource.url``), writes the recording rules' series and the alerts' state back
(``-remoteWrite.url``) and sends firing alerts to the Alertmanager (``-notifier.url``). Only the scrape and
evaluation intervals are set, and the two flags collector-config/README.md ships: VictoriaMetrics's
``-search.latencyOffset`` (``LATENCY_OFFSET``: a sample shows in queries without ``nocache=1``, as vmalert asks,
once it is that old; the default is 30 s) and vmalert's ``-datasource.queryTimeAlignment=false`` (by default it
asks as of the evaluation time rounded down to the interval); every other flag is the binaries' default.

The processes are the test suite's runners (``tests/servers.py``). Imported by bench/fleet/metrics.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.fleet.prometheus import RULES, scrape_config
from bench.fleet.ranks import sample_name
from tests.servers import VictoriaMetrics, VMAgent, VMAlert

VM_METRICS = (
    "vm_rows_inserted_total",  # every sample it took in (remote write from the vmagents and vmalert)
    "vm_new_timeseries_created_total",
    "vm_slow_row_inserts_total",
    "vm_slow_series_creates_total",
    "process_resident_memory_bytes",
    "go_memstats_heap_inuse_bytes",
    "process_cpu_seconds_total",
)
VMAGENT_METRICS = (
    "vm_promscrape_targets",  # by status: up, down
    "vm_promscrape_scraped_samples_sum",
    "vm_promscrape_scrapes_failed_total",
    "vm_promscrape_scrapes_skipped_by_sample_limit_total",
    "vmagent_remotewrite_pending_data_bytes",
    "vmagent_remotewrite_packets_dropped_total",
    "vmagent_remotewrite_rows_pushed_after_relabel_total",
)
LATENCY_OFFSET = "5s"  # collector-config/README.md's victoria-metrics command
VMALERT_FLAGS = ["-datasource.queryTimeAlignment=false"]  # and its vmalert command's
VMALERT_METRICS = (
    "vmalert_iteration_missed_total",
    "vmalert_execution_errors_total",
    "vmalert_alerts_sent_total",
    "vmalert_alerts_send_errors_total",
    "vmalert_remotewrite_dropped_rows_total",
    "vmalert_remotewrite_sent_rows_total",
)


def _metrics(text: str, names: tuple[str, ...], prefix: str = "") -> dict[str, float]:
    """The named series of a /metrics page, summed over their label sets (``vm_promscrape_targets`` by status)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = sample_name(line)
        if name == "vm_cache_entries" and 'type="storage/hour_metric_ids"' in line:
            out[prefix + "hour_metric_ids"] = float(line.rsplit(" ", 1)[1])
        if name not in names:
            continue
        if name == "vm_promscrape_targets":
            name += "_up" if 'status="up"' in line else "_down"
        out[prefix + name] = out.get(prefix + name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class FleetVM:
    """vmagent x ``members`` (sharded scrape) -> VictoriaMetrics <- vmalert (rules) -> Alertmanager at ``alertmanager_url``.

    A large job's processes are given longer, as :class:`fleet_prometheus.FleetPrometheus`'s: 60 s to be ready,
    120 s per API call, 60 s to exit on SIGTERM.
    """

    pipeline = "vm"

    def __init__(
        self,
        world: int,
        server_port: int,
        scrape: str,
        evaluation: str,
        rules: Path = RULES,
        alertmanager_url: str = "",
        members: int = 2,
    ) -> None:
        self.world, self.server_port, self.scrape, self.evaluation = world, server_port, scrape, evaluation
        self.rules, self.alertmanager_url, self.members = rules, alertmanager_url, members
        self.vm: VictoriaMetrics | None = None
        self.agents: list[VMAgent] = []
        self.alert: VMAlert | None = None

    def config(self) -> dict[str, Any]:
        """The scrape config every vmagent member reads."""
        return {"global": {"scrape_interval": self.scrape}, "scrape_configs": [scrape_config(self.world, self.server_port)]}

    @staticmethod
    def _long(server: Any) -> Any:
        server.ready_timeout, server.stop_grace, server.api_timeout = 60, 60, 120
        return server

    def __enter__(self) -> FleetVM:
        for program in ("victoria-metrics", "vmagent", "vmalert"):
            if shutil.which(program) is None:
                raise SystemExit(f"{program} is not installed (apt-get install victoria-metrics)")
        self.dir = Path(tempfile.mkdtemp(prefix="torch-otel-fleet-vm-"))
        try:
            (self.dir / "scrape.yml").write_text(json.dumps(self.config()))  # JSON is YAML
            self.vm = self._long(VictoriaMetrics([f"-search.latencyOffset={LATENCY_OFFSET}"])).__enter__()
            for member in range(self.members):
                agent = VMAgent(self.dir / "scrape.yml", self.vm.write_url, member, self.members)
                self.agents.append(self._long(agent).__enter__())
            self.alert = self._long(
                VMAlert(
                    [self.rules],
                    self.vm.url,
                    self.vm.url,
                    self.alertmanager_url,
                    evaluation_interval=self.evaluation,
                    flags=VMALERT_FLAGS,
                )
            ).__enter__()
        except BaseException:  # Ctrl-C or a failed start: no process, no files left behind
            self.__exit__(None, None, None)
            raise
        return self

    def _servers(self) -> list[Any]:
        return [s for s in (self.alert, *self.agents, self.vm) if s is not None]

    def stop(self) -> None:
        for s in self._servers():
            if hasattr(s, "_p"):
                s.stop()

    def __exit__(self, *exc: object) -> None:
        for s in self._servers():
            if hasattr(s, "_p"):
                s.__exit__(None, None, None)
            else:
                shutil.rmtree(s.dir, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def port(self) -> int:
        assert self.vm is not None
        return self.vm.port

    # -- what fleet_run.py asks of a pipeline (as fleet_prometheus.FleetPrometheus) ---------------------------------

    def components(self) -> dict[str, int]:
        assert self.vm is not None and self.alert is not None
        return {
            "victoria-metrics": self.vm.pid,
            **{f"vmagent-{a.member}": a.pid for a in self.agents},
            "vmalert": self.alert.pid,
        }

    def store_api(self, path: str, **params: str) -> Any:
        """VictoriaMetrics's Prometheus API, with ``nocache=1``: each repetition does the work (no cached result)."""
        assert self.vm is not None
        return self.vm.api(path, **params, nocache="1")

    def api(self, path: str, **params: str) -> Any:
        return self.store_api(path, **params)

    def query(self, promql: str) -> list[dict[str, Any]]:
        assert self.vm is not None
        return self.vm.query(promql)

    def ruler_view(self, promql: str) -> list[dict[str, Any]]:
        """An instant query as vmalert asks it (without ``nocache``): what the rules can see now."""
        assert self.vm is not None
        return self.vm.query(promql, fresh=False)

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def rule_groups(self) -> list[dict[str, Any]]:
        assert self.alert is not None
        return self.alert.api("rules")["groups"]

    def ruler_alerts(self) -> list[dict[str, Any]]:
        assert self.alert is not None
        return self.alert.alerts()

    def stats(self) -> dict[str, float]:
        assert self.vm is not None and self.alert is not None
        out = _metrics(self.vm.metrics(), VM_METRICS, "vm:")
        for a in self.agents:
            for k, v in _metrics(a.metrics(), VMAGENT_METRICS, "vmagent:").items():
                out[k] = out.get(k, 0.0) + v  # summed over the members
        out.update(_metrics(self.alert.metrics(), VMALERT_METRICS, "vmalert:"))
        # series stored: those VictoriaMetrics saw this hour (none of them is older than the run)
        out["series_stored"] = out.get("vm:hour_metric_ids", 0.0)
        out["samples_ingested_total"] = out.get("vm:vm_rows_inserted_total", 0.0)
        out["rule_iterations_missed_total"] = out.get("vmalert:vmalert_iteration_missed_total", 0.0)
        return out

    def series_count(self) -> float | None:
        """Every series VictoriaMetrics holds (/api/v1/series/count)."""
        assert self.vm is not None
        return float(self.vm.api("series/count")[0])

    def agent_targets(self) -> list[int]:
        """How many targets each member scrapes."""
        return [len(a.targets()) for a in self.agents]
