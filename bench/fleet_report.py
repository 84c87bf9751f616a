"""bench/fleet.py's report: the Markdown tables it prints from the runs' results (one column per run)."""

from __future__ import annotations

import statistics
from typing import Any


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f} MiB"


def _s(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f} s"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f} ms"


def _cols(runs: list[dict[str, Any]]) -> list[str]:
    return [f"{r['ranks']:,} ranks, {r['detail_ranks']}" for r in runs]


def _steady(d: dict[str, Any]) -> dict[str, float]:
    return d.get("steady") or d.get("all") or {}


def table(runs: list[dict[str, Any]]) -> str:
    """The main results: one column per run."""

    def row(name: str, fn: Any) -> str:
        cells = []
        for r in runs:
            try:
                cells.append(fn(r))
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                cells.append("-")
        return f"| {name} | " + " | ".join(cells) + " |"

    def grp(r: dict[str, Any], g: str) -> str:
        v = _steady(r["groups"][g])
        return f"{_ms(v.get('median'))} / {_ms(v.get('max'))}"

    def slowest(r: dict[str, Any]) -> str:
        q = max(r["queries"], key=lambda q: q["median_s"])
        return f"{_ms(statistics.median(x['median_s'] for x in r['queries']))} / {_ms(q['median_s'])} ({q['panel']})"

    rows = [
        "| | " + " | ".join(_cols(runs)) + " |",
        "|---|" + "---|" * len(runs),
        row("series per rank, rank 0 / others", lambda r: f"{r['served']['series_rank0']} / {r['served']['series_further']}"),
        row(
            "bytes per scrape, rank 0 / others",
            lambda r: f"{r['served']['bytes_rank0'] / 1024:.1f} / {r['served']['bytes_further'] / 1024:.1f} KiB",
        ),
        row("series stored (prometheus_tsdb_head_series)", lambda r: f"{r['head_series']:,.0f}"),
        row("every rank's series in, after Prometheus started", lambda r: _s(r["series_in_s"], 0)),
        row(
            "Prometheus RSS, steady / peak (VmRSS, VmHWM)",
            lambda r: f"{_mb(r['memory_steady']['VmRSS'])} / {_mb(r['memory_peak'])}",
        ),
        row("Go heap in use (steady)", lambda r: _mb(r["memory_steady"]["go_memstats_heap_inuse_bytes"])),
        row("RSS per stored series", lambda r: f"{r['memory_steady']['VmRSS'] / r['head_series']:,.0f} B"),
        row("Prometheus CPU once the series are in", lambda r: f"{r['cpu_cores_steady']['prometheus']:.2f} cores"),
        row(
            "machine over the run: busy / ours / other processes",
            lambda r: " / ".join(f"{r['machine_cpu'][k]:.2f}" for k in ("busy_cores", "ours_cores", "others_cores")) + " cores",
        ),
        row("CPU stall (/proc/pressure/cpu some)", lambda r: f"{r['machine_cpu']['cpu_stall_share']:.0%}"),
        row(
            "scrape duration p50 / p99 (last scrape of each target)",
            lambda r: f"{_ms(r['scrapes']['duration_p50_s'])} / {_ms(r['scrapes']['duration_p99_s'])}",
        ),
        row("targets up", lambda r: f"{r['scrapes']['targets_up']:,.0f} / {r['scrapes']['targets']:,.0f}"),
        row("group torch-compile, evaluation median / max", lambda r: grp(r, "torch-compile")),
        row("group torch-compile-divergence, evaluation median / max", lambda r: grp(r, "torch-compile-divergence")),
        row("rule group evaluations missed (over the interval)", lambda r: f"{r['rule_iterations_missed_end']:.0f}"),
        row("false divergence alerts while compiles arrived on every rank", lambda r: str(r["alert"]["false_alarm_count"])),
        row(
            "odd rank's compile to TorchCompileRankDivergence pending / firing (seen in /api/v1/alerts)",
            lambda r: f"{_s(r['alert']['pending_after_s'])} / {_s(r['alert']['firing_after_s'])}",
        ),
        row("... pending, by the evaluation's own timestamp (activeAt)", lambda r: _s(r["alert"]["active_at_after_s"])),
        row(
            "names the odd rank, and only it",
            lambda r: (
                ("yes" if r["alert"]["only_the_odd_rank"] else "NO: " + ",".join(r["alert"]["ranks_named_at_end"]))
                + f" ({', '.join(r['alert']['aspects_named'])})"
            ),
        ),
        row("dashboard queries: median / slowest", slowest),
        row("run's wall time", lambda r: _s(r["wall_s"], 0)),
    ]
    return "\n".join(rows)


def rules_table(runs: list[dict[str, Any]]) -> str:
    names = list(runs[0]["rules"])
    rows = ["| rule, evaluation median / max | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for n in names:
        cells = []
        for r in runs:
            v = _steady(r["rules"].get(n, {}))
            cells.append(f"{_ms(v.get('median'))} / {_ms(v.get('max'))}")
        rows.append(f"| {n.split('/', 1)[1]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def dashboards_table(runs: list[dict[str, Any]]) -> str:
    dashes = list(runs[0]["dashboards"])
    rows = ["| dashboard (queries), median / max | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for d in dashes:
        cells = [f"{_ms(r['dashboards'][d]['median'])} / {_ms(r['dashboards'][d]['max'])}" for r in runs]
        rows.append(f"| {d} ({runs[0]['dashboards'][d]['queries']}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def slowest_table(runs: list[dict[str, Any]], n: int = 5) -> str:
    """The slowest queries of the largest run, with the same query's time in the others."""
    big = max(runs, key=lambda r: (r["ranks"], r["head_series"]))
    top = sorted(big["queries"], key=lambda q: -q["median_s"])[:n]
    rows = ["| slowest queries (median of 3) | " + " | ".join(_cols(runs)) + " |", "|---|" + "---|" * len(runs)]
    for q in top:
        cells = []
        for r in runs:
            m = [x for x in r["queries"] if x["expr"] == q["expr"] and x["panel"] == q["panel"]]
            cells.append(_ms(m[0]["median_s"]) if m else "-")
        rows.append(f"| {q['dashboard']}: {q['panel']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
