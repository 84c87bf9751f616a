"""bench/fleet/metrics.py's report: the Markdown tables it prints from the runs' results (one column per run).

python -m bench.fleet.report RESULTS.json [MORE.json ...]    # the tables again, the files' runs side by side
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

PIPELINE_NAMES = {"prometheus": "Prometheus", "vm": "vmagent x2, VictoriaMetrics, vmalert"}
STORE = {"prometheus": "prometheus", "vm": "victoria-metrics"}
# the processes of each pipeline (the Alertmanager and the fleet server are measured beside them)
PIPELINE_PROCESSES = {"prometheus": ("prometheus",), "vm": ("victoria-metrics", "vmagent-0", "vmagent-1", "vmalert")}


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f} MiB"


def _s(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f} s"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.1f} ms"


def _ranks(a: dict[str, Any], key: str) -> str:
    """The ranks an alert named, short: all of them when few, else how many and the first few."""
    ranks = sorted(a.get(key) or [], key=int)
    n = a.get(f"{key}_count", len(ranks))
    if not n:
        return "none"
    return ",".join(ranks) if n <= 5 else f"{n:,} ranks ({','.join(ranks[:3])}, ...)"


def _pipe(r: dict[str, Any]) -> str:
    return r.get("pipeline", "prometheus")


def _cols(runs: list[dict[str, Any]]) -> list[str]:
    return [f"{PIPELINE_NAMES[_pipe(r)]}: {r['ranks']:,} ranks, {r['detail_ranks']}" for r in runs]


def _steady(d: dict[str, Any]) -> dict[str, float]:
    return d.get("steady") or d.get("all") or {}


def _row(runs: list[dict[str, Any]], name: str, fn: Any) -> str:
    cells = []
    for r in runs:
        try:
            cells.append(fn(r))
        except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
            cells.append("-")
    return f"| {name} | " + " | ".join(cells) + " |"


def _head(runs: list[dict[str, Any]], first: str = "") -> list[str]:
    return [f"| {first} | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]


def _pipeline_rss(r: dict[str, Any], key: str) -> float:
    mem = r[key]
    return sum(mem[n] for n in PIPELINE_PROCESSES[_pipe(r)])


def _pipeline_cpu(r: dict[str, Any]) -> float:
    return sum(r["cpu_cores_steady"][n] for n in PIPELINE_PROCESSES[_pipe(r)])


def table(runs: list[dict[str, Any]]) -> str:
    """The main results: one column per run."""

    def row(name: str, fn: Any) -> str:
        return _row(runs, name, fn)

    def grp(r: dict[str, Any], g: str) -> str:
        v = _steady(r["groups"][g])
        return f"{_ms(v.get('median'))} / {_ms(v.get('max'))}"

    def slowest(r: dict[str, Any]) -> str:
        ok = [q for q in r["queries"] if q["median_s"] is not None]
        q = max(ok, key=lambda q: q["median_s"])
        return f"{_ms(statistics.median(x['median_s'] for x in ok))} / {_ms(q['median_s'])} ({q['panel']})"

    def named(r: dict[str, Any]) -> str:
        a = r["alert"]
        if a["only_the_odd_rank"]:
            return f"yes ({', '.join(a['aspects_at_alertmanager'])})"
        return f"NO: {_ranks(a, 'ranks_named_after_odd')} at the ruler, {_ranks(a, 'ranks_at_alertmanager_at_end')} at the Alertmanager"

    rows = [
        *_head(runs),
        row("series per rank, rank 0 / others", lambda r: f"{r['served']['series_rank0']} / {r['served']['series_further']}"),
        row(
            "bytes per scrape, rank 0 / others",
            lambda r: f"{r['served']['bytes_rank0'] / 1024:.1f} / {r['served']['bytes_further'] / 1024:.1f} KiB",
        ),
        row("series stored (Prometheus: head series; VictoriaMetrics: series/count)", lambda r: f"{r['series_count_end']:,.0f}"),
        row("samples taken in, once every series was in", lambda r: f"{r['ingest_samples_per_s']:,.0f} /s"),
        row("every rank's series in, after the pipeline started", lambda r: _s(r["series_in_s"], 0)),
        row(
            "store RSS, steady / peak (Prometheus, or VictoriaMetrics)",
            lambda r: f"{_mb(r['memory_steady'][STORE[_pipe(r)]])} / {_mb(r['memory_peak'][STORE[_pipe(r)]])}",
        ),
        row(
            "whole pipeline RSS, steady / sum of peaks",
            lambda r: f"{_mb(_pipeline_rss(r, 'memory_steady'))} / {_mb(_pipeline_rss(r, 'memory_peak'))}",
        ),
        row("pipeline RSS per stored series", lambda r: f"{_pipeline_rss(r, 'memory_steady') / r['series_count_end']:,.0f} B"),
        row("pipeline CPU once the series are in", lambda r: f"{_pipeline_cpu(r):.2f} cores"),
        row(
            "machine over the run: busy / ours / other processes",
            lambda r: " / ".join(f"{r['machine_cpu'][k]:.2f}" for k in ("busy_cores", "ours_cores", "others_cores")) + " cores",
        ),
        row("CPU stall (/proc/pressure/cpu some)", lambda r: f"{r['machine_cpu']['cpu_stall_share']:.0%}"),
        row(
            "scrape duration p50 / p99 (last scrape of each target)",
            lambda r: f"{_ms(r['scrapes']['duration_p50_s'])} / {_ms(r['scrapes']['duration_p99_s'])}",
        ),
        row(
            "targets up (per vmagent member)",
            lambda r: (
                f"{r['scrapes']['targets_up']:,.0f} / {r['scrapes']['targets']:,.0f}"
                + (
                    f" ({' + '.join(f'{n:,}' for n in r['scrapes']['targets_per_vmagent'])})"
                    if "targets_per_vmagent" in r["scrapes"]
                    else ""
                )
            ),
        ),
        row("group torch-compile, evaluation median / max", lambda r: grp(r, "torch-compile")),
        row("group torch-compile-divergence, evaluation median / max", lambda r: grp(r, "torch-compile-divergence")),
        row("rule group evaluations missed", lambda r: f"{r['rule_iterations_missed_end']:.0f}"),
        row(
            "false divergence alerts while compiles arrived on every rank: ruler / Alertmanager",
            lambda r: f"{r['alert']['false_alarm_count']} / {r['alert']['false_alarms_at_alertmanager']}",
        ),
        row(
            "odd rank's compile to TorchCompileRankDivergence pending / firing (ruler) / at the Alertmanager",
            lambda r: " / ".join(_s(r["alert"][k]) for k in ("pending_after_s", "firing_after_s", "at_alertmanager_after_s")),
        ),
        row("... pending, by the evaluation's own timestamp (activeAt)", lambda r: _s(r["alert"]["active_at_after_s"])),
        row(
            "odd compile to its fingerprints in the ruler's queries (scrape and store delay)",
            lambda r: _s(r["alert"].get("visible_to_ruler_after_s")),
        ),
        row(
            "... then to the Alertmanager, against two evaluation intervals plus for",
            lambda r: f"{_s(r['alert'].get('at_alertmanager_after_visible_s'))} (bound {_s(r['alert'].get('bound_s'), 0)})",
        ),
        row("names the odd rank, and only it (ruler and Alertmanager)", named),
        row("dashboard queries: median / slowest", slowest),
        row("dashboard queries that failed", lambda r: str(len(r["query_errors"]))),
        row("run's wall time", lambda r: _s(r["wall_s"], 0)),
    ]
    return "\n".join(rows)


def components_table(runs: list[dict[str, Any]]) -> str:
    """Each process: RSS once every series was in, its peak, and its CPU from then until the alert was at the Alertmanager."""
    names: list[str] = []
    for r in runs:
        names += [n for n in r["memory_steady"] if n not in names]
    rows = _head(runs, "process: RSS steady / peak, CPU (cores)")
    for n in names:

        def cell(r: dict[str, Any], n: str = n) -> str:
            if n not in r["memory_steady"]:
                return ""
            cpu = r.get("cpu_cores_steady", {}).get(n)
            return f"{_mb(r['memory_steady'][n])} / {_mb(r['memory_peak'][n])}, " + ("-" if cpu is None else f"{cpu:.2f}")

        rows.append(_row(runs, n, cell))
    return "\n".join(rows)


def rules_table(runs: list[dict[str, Any]]) -> str:
    names: list[str] = []
    for r in runs:
        names += [n for n in r["rules"] if n not in names]
    rows = _head(runs, "rule, evaluation median / max")
    for n in names:
        cells = []
        for r in runs:
            v = _steady(r["rules"].get(n, {}))
            cells.append(f"{_ms(v.get('median'))} / {_ms(v.get('max'))}")
        rows.append(f"| {n.split('/', 1)[1]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def dashboards_table(runs: list[dict[str, Any]]) -> str:
    dashes = list(runs[0]["dashboards"])
    rows = _head(runs, "dashboard (queries), median / max")
    for d in dashes:
        cells = [
            f"{_ms(r['dashboards'][d]['median'])} / {_ms(r['dashboards'][d]['max'])}" if d in r["dashboards"] else "-"
            for r in runs
        ]
        rows.append(f"| {d} ({runs[0]['dashboards'][d]['queries']}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def slowest_table(runs: list[dict[str, Any]], n: int = 5) -> str:
    """The slowest queries of the largest run (on either pipeline), with the same query's time in the others."""
    big = max(runs, key=lambda r: (r["ranks"], r.get("series_count_end") or 0))
    top = sorted((q for q in big["queries"] if q["median_s"] is not None), key=lambda q: -q["median_s"])[:n]
    rows = _head(runs, "slowest queries (median of 3)")
    for q in top:
        cells = []
        for r in runs:
            m = [x for x in r["queries"] if x["expr"] == q["expr"] and x["panel"] == q["panel"]]
            cells.append(_ms(m[0]["median_s"]) if m else "-")
        rows.append(f"| {q['dashboard']}: {q['panel']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    runs = []
    for path in argv:
        doc = json.loads(Path(path).read_text())
        for r in doc["runs"]:
            r.setdefault("rules_file", doc.get("config", {}).get("rules_file", ""))
            runs.append(r)
    for tab in (table, components_table, rules_table, dashboards_table, slowest_table):
        print(tab(runs))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
