"""bench/fleet.py's runs: one size and one detail-ranks policy each, the server and Prometheus started and stopped.

Once every rank's series are in, compiles arrive on every rank (twice), then on one odd rank alone;
/api/v1/alerts is polled every second for TorchCompileRankDivergence. Measured along the way:
Prometheus's series, memory and CPU, its scrapes, every rule's and group's evaluation time, and
every dashboard query. Every process a run starts is stopped when it ends, Ctrl-C and errors included.

Imported by bench/fleet.py, which puts tests/ on sys.path (the test suite's real-server helpers).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fleet_prometheus import JOB, SELF_METRICS, FleetPrometheus, dashboard_queries, time_query
from servers import http_get

HERE = Path(__file__).resolve().parent
ALERT = "TorchCompileRankDivergence"

# Seconds after every rank's series are in: compiles arrive on every rank twice, then on the odd rank alone.
SHARED_STEPS_AT = (15.0, 45.0)
ODD_AT = 60.0
ALERT_TIMEOUT = 180.0

_CHILDREN: list[subprocess.Popen[bytes]] = []


def _stop(proc: subprocess.Popen[bytes], grace: float = 60) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc in _CHILDREN:
        _CHILDREN.remove(proc)


def stop_all() -> None:
    for proc in reversed(list(_CHILDREN)):
        _stop(proc, 20)


def start_server(world: int, policy: str, trace: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """bench/fleet_server.py for ``world`` ranks, and the port it serves on, once every rank's bytes are built."""
    log = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fleet_server.py"), str(world), "--detail-ranks", policy, "--trace", str(trace)],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    _CHILDREN.append(proc)
    assert proc.stdout is not None
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(300)
    if not line or not line[0].startswith(b"PORT "):
        _stop(proc)
        raise RuntimeError(f"the fleet server did not start: {(workdir / 'server.log').read_text()[-2000:]}")
    return proc, int(line[0].split()[1])


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rfc3339(ts: str) -> float:
    from datetime import datetime

    ts = re.sub(r"(\.\d{6})\d+", r"\1", ts.replace("Z", "+00:00"))
    return datetime.fromisoformat(ts).timestamp()


def _summarise(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values), "n": len(values)} if values else {}


def _machine_cpu() -> tuple[float, float]:
    """The machine's busy CPU seconds (all cores), and CPU-stall time (/proc/pressure/cpu "some", seconds)."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    busy = (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")
    stall = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        stall = int(some.rsplit("total=", 1)[1]) / 1e6
    return busy, stall


def _rule_series(evals: dict[str, float], ready: float) -> list[tuple[float, float]]:
    """{lastEvaluation: seconds} -> [(evaluation time after Prometheus was ready, seconds)], in order."""
    return sorted((_rfc3339(k) - ready, v) for k, v in evals.items())


def run_one(world: int, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"torch-otel-fleet-{world}-{policy}-"))
    odd = world * 3 // 4 + 1  # a rank in a node of its own, not 0
    out: dict[str, Any] = {"ranks": world, "detail_ranks": policy, "odd_rank": odd}
    tag = f"[{world} ranks, {policy}]"
    server = prom = None
    busy0, stall0 = _machine_cpu()
    wall0, self0 = time.time(), time.process_time()
    try:
        t0 = time.monotonic()
        server, sport = start_server(world, policy, args.trace, workdir)
        out["server_build_s"] = time.monotonic() - t0
        base = f"http://127.0.0.1:{sport}"
        stats0 = json.loads(http_get(f"{base}/stats", timeout=30))
        out["served"] = {k: stats0[k] for k in ("series_total", "series_rank0", "series_further", "bytes_rank0", "bytes_further")}
        print(
            f"{tag} server up in {out['server_build_s']:.1f}s: {stats0['series_total']:,} series "
            f"(rank 0 {stats0['series_rank0']}, others {stats0['series_further']})",
            flush=True,
        )
        prom = FleetPrometheus(world, sport, args.scrape_interval, args.eval_interval).__enter__()  # left in the finally below
        ready = time.time()
        print(f"{tag} prometheus ready on :{prom.port}", flush=True)
        # every rank's series, and the 5 series Prometheus adds per target (up, scrape_duration_seconds, ...)
        expected = stats0["series_total"] + 5 * world

        samples: list[dict[str, Any]] = []
        rule_evals: dict[tuple[str, str], dict[str, float]] = {}  # (group, rule) -> {lastEvaluation: seconds}
        group_evals: dict[str, dict[str, float]] = {}
        alert_polls: list[dict[str, Any]] = []
        steps_done = 0
        t_odd: float | None = None
        series_in_at: float | None = None
        first_pending = first_firing = None
        false_alarms: list[dict[str, Any]] = []
        cpu_mark: tuple[float, float, float] | None = None
        next_sample = 0.0
        while True:
            now = time.time()
            rel = now - ready
            # the timeline starts once every rank's series are in (or after 180 s, whatever is in by then)
            t_base = series_in_at if series_in_at is not None else (180.0 if rel >= 180 else None)
            if t_base is not None:
                while steps_done < len(SHARED_STEPS_AT) and rel >= t_base + SHARED_STEPS_AT[steps_done]:
                    steps_done += 1
                    json.loads(http_get(f"{base}/control?step={steps_done}&odd=-1", timeout=30))
                if t_odd is None and rel >= t_base + ODD_AT:
                    t_odd = json.loads(http_get(f"{base}/control?step={steps_done}&odd={odd}", timeout=30))["at"]
                    print(f"{tag} rank {odd} compiled something the others did not", flush=True)
            t_q = time.perf_counter()
            alerts = [a for a in prom.api("alerts")["alerts"] if a["labels"].get("alertname") == ALERT]
            poll_s = time.perf_counter() - t_q
            seen = [
                {
                    "rank": a["labels"].get("rank"),
                    "aspect": a["labels"].get("aspect"),
                    "state": a["state"],
                    "activeAt": a["activeAt"],
                }
                for a in alerts
            ]
            alert_polls.append({"t": now, "poll_s": poll_s, "alerts": seen})
            if t_odd is None:
                false_alarms.extend({"t_rel": rel, **a} for a in seen)
            elif seen:
                if first_pending is None:
                    first_pending = now
                if first_firing is None and any(a["state"] == "firing" for a in seen):
                    first_firing = now
            if now >= next_sample:
                next_sample = now + (5 if series_in_at is not None else 2)
                snap = {"t_rel": rel, **prom.self_metrics(SELF_METRICS), **prom.proc_status()}
                snap["server_cpu_s"] = _proc_cpu(server.pid)
                samples.append(snap)
                if series_in_at is None and snap.get("prometheus_tsdb_head_series", 0) >= expected:
                    series_in_at = rel
                    cpu_mark = (time.time(), snap["process_cpu_seconds_total"], snap["server_cpu_s"])
                    print(f"{tag} every rank's series in after {rel:.0f}s", flush=True)
                for g in prom.api("rules")["groups"]:
                    if g.get("lastEvaluation", "").startswith("0001"):
                        continue
                    group_evals.setdefault(g["name"], {})[g["lastEvaluation"]] = g["evaluationTime"]
                    for r in g["rules"]:
                        if not r.get("lastEvaluation", "").startswith("0001"):
                            rule_evals.setdefault((g["name"], r["name"]), {})[r["lastEvaluation"]] = r["evaluationTime"]
            if first_firing is not None and now - first_firing > 2:
                break
            if t_odd is not None and now - t_odd > ALERT_TIMEOUT:
                print(f"{tag} {ALERT} did not fire within {ALERT_TIMEOUT:.0f}s", flush=True)
                break
            time.sleep(max(0.0, 1.0 - (time.time() - now)))

        # the steady window, from every series in until the alert fired: CPU used per second
        last = samples[-1]
        if cpu_mark is not None and last["t_rel"] + ready > cpu_mark[0]:
            span = last["t_rel"] + ready - cpu_mark[0]
            out["cpu_cores_steady"] = {
                "prometheus": (last["process_cpu_seconds_total"] - cpu_mark[1]) / span,
                "server": (last["server_cpu_s"] - cpu_mark[2]) / span,
                "window_s": span,
            }
        out["series_in_s"] = series_in_at
        out["memory_steady"] = {
            k: last.get(k) for k in ("VmRSS", "VmHWM", "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
        }
        out["head_series"] = last.get("prometheus_tsdb_head_series")
        out["head_chunks"] = last.get("prometheus_tsdb_head_chunks")
        out["rule_iterations_missed"] = last.get("prometheus_rule_group_iterations_missed_total")
        out["scrape_interval_p99_s"] = last.get("scrape_interval_p99")

        # the alert
        alert: dict[str, Any] = {"false_alarms_before_odd": false_alarms[:20], "false_alarm_count": len(false_alarms)}
        if t_odd is not None:
            alert["odd_at_s"] = t_odd - ready
            alert["pending_after_s"] = None if first_pending is None else first_pending - t_odd
            alert["firing_after_s"] = None if first_firing is None else first_firing - t_odd
            after = [a for p in alert_polls if p["t"] >= t_odd for a in p["alerts"]]
            if after:
                # the evaluation that made it pending, by its own timestamp (the API shows it once that evaluation ends)
                alert["active_at_after_s"] = min(_rfc3339(a["activeAt"]) for a in after) - t_odd
            alert["ranks_named_after_odd"] = sorted({a["rank"] for a in after})
            alert["aspects_named"] = sorted({a["aspect"] for a in after})
        alert["alerts_poll_s"] = _summarise([p["poll_s"] for p in alert_polls])
        out["alert"] = alert
        print(f"{tag} alert: {json.dumps({k: v for k, v in alert.items() if 'false_alarms' not in k})}", flush=True)

        # scrapes
        out["scrapes"] = {
            "targets_up": prom.scalar(f'count(up{{job="{JOB}"}} == 1)'),
            "targets": prom.scalar(f'count(up{{job="{JOB}"}})'),
            "duration_p50_s": prom.scalar(f'quantile(0.5, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_p99_s": prom.scalar(f'quantile(0.99, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_max_2m_s": prom.scalar(f'max(max_over_time(scrape_duration_seconds{{job="{JOB}"}}[2m]))'),
            "samples_per_round": prom.scalar(f'sum(scrape_samples_scraped{{job="{JOB}"}})'),
        }

        # every dashboard query, after the alert fired (the data is in, and a few scrapes old)
        queries = []
        for dash, title, expr in dashboard_queries():
            queries.append({"dashboard": dash, "panel": title, "expr": expr, **time_query(prom, expr)})
        out["queries"] = queries
        by_dash: dict[str, list[float]] = {}
        for q in queries:
            by_dash.setdefault(q["dashboard"], []).append(q["median_s"])
        out["dashboards"] = {d: {**_summarise(v), "queries": len(v)} for d, v in by_dash.items()}

        # did any other rank get named, up to now (a few evaluations after the alert fired)?
        late = [a for a in prom.api("alerts")["alerts"] if a["labels"].get("alertname") == ALERT]
        alert["ranks_named_at_end"] = sorted({a["labels"].get("rank") for a in late})
        alert["states_at_end"] = sorted({a["state"] for a in late})
        alert["only_the_odd_rank"] = alert.get("ranks_named_after_odd") == [str(odd)] and alert["ranks_named_at_end"] == [
            str(odd)
        ]

        # rule evaluation times: every evaluation seen, and those that began once every series was in
        steady_from = series_in_at if series_in_at is not None else float("inf")
        out["rules"] = {}
        for (g, r), d in rule_evals.items():
            ts = _rule_series(d, ready)
            out["rules"][f"{g}/{r}"] = {
                "all": _summarise([v for _, v in ts]),
                "steady": _summarise([v for t, v in ts if t >= steady_from]),
            }
        out["groups"] = {}
        for g, d in group_evals.items():
            ts = _rule_series(d, ready)
            out["groups"][g] = {
                "all": _summarise([v for _, v in ts]),
                "steady": _summarise([v for t, v in ts if t >= steady_from]),
                "evaluations": [(round(t, 1), round(v, 4)) for t, v in ts],
            }

        end = {**prom.self_metrics(SELF_METRICS), **prom.proc_status()}
        out["memory_end"] = {
            k: end.get(k) for k in ("VmRSS", "VmHWM", "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
        }
        # the kernel updates VmHWM lazily: the peak is the larger of it and every VmRSS read
        out["memory_peak"] = max([end.get("VmHWM", 0), end.get("VmRSS", 0), *(x.get("VmRSS", 0) for x in samples)])
        out["rule_iterations_missed_end"] = end.get("prometheus_rule_group_iterations_missed_total")
        out["samples"] = samples
        stats1 = json.loads(http_get(f"{base}/stats", timeout=30))
        out["server"] = {"requests": stats1["requests"], "bytes": stats1["bytes"], "cpu_s": stats1["cpu_s"]}

        # the whole run's CPU on this machine: ours (Prometheus, the server, this process) and everyone else's
        busy1, stall1 = _machine_cpu()
        wall = time.time() - wall0
        ours = _proc_cpu(prom.pid) + _proc_cpu(server.pid) + time.process_time() - self0
        out["machine_cpu"] = {
            "wall_s": wall,
            "busy_cores": (busy1 - busy0) / wall,
            "ours_cores": ours / wall,
            "others_cores": max(0.0, (busy1 - busy0 - ours) / wall),
            "cpu_stall_share": (stall1 - stall0) / wall,
            "prometheus_cores": _proc_cpu(prom.pid) / wall,
        }
        print(f"{tag} machine: {json.dumps({k: round(v, 2) for k, v in out['machine_cpu'].items()})}", flush=True)
        return out
    finally:
        if prom is not None:
            t0 = time.monotonic()
            prom.stop()
            out["prometheus_stop_s"] = time.monotonic() - t0
            prom.__exit__(None, None, None)  # its data directory
        if server is not None:
            _stop(server)
        shutil.rmtree(workdir, ignore_errors=True)
        out["wall_s"] = time.monotonic() - t_start
