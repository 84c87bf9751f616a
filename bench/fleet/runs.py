"""bench/fleet/metrics.py's runs: one pipeline, size and detail-ranks policy each; the server, the pipeline and an Alertmanager
started and stopped.

Once every rank's series are in, compiles arrive on every rank (twice), then on one odd rank alone. Every
second the ruler's alerts (Prometheus's or vmalert's /api/v1/alerts) and the Alertmanager's (/api/v2/alerts)
are read for TorchCompileRankDivergence. Measured along the way: the series stored and the samples taken in,
every process's memory and CPU (the store, the scrapers, the ruler, the Alertmanager, the fleet server), the
scrapes, every rule's and group's evaluation time, and every dashboard query. Every process a run starts is
stopped when it ends, Ctrl-C and errors included.

A pipeline is ``fleet_prometheus.FleetPrometheus`` (one Prometheus scrapes, stores and evaluates) or
``fleet_vm.FleetVM`` (two vmagent members share the scrape, VictoriaMetrics stores, vmalert evaluates).

Imported by bench/fleet/metrics.py; the real servers are the test suite's (tests.servers).
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

from bench.fleet.prometheus import JOB, RULES, FleetPrometheus, dashboard_queries, time_query
from bench.fleet.ranks import FP
from bench.fleet.victoria_metrics import FleetVM
from tests.servers import Alertmanager, http_get

ALERT = "TorchCompileRankDivergence"
PIPELINES = {"prometheus": FleetPrometheus, "vm": FleetVM}

# Seconds after every rank's series are in: compiles arrive on every rank twice, then on the odd rank alone.
SHARED_STEPS_AT = (15.0, 45.0)
ODD_AT = 60.0
ALERT_TIMEOUT = 300.0  # seconds after the odd rank's compile: the run ends without the alert
SERIES_IN_TIMEOUT = 240.0  # seconds after the pipeline started: the timeline starts with whatever is in

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
    """bench/fleet/server.py for ``world`` ranks, and the port it serves on, once every rank's bytes are built."""
    log = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.fleet.server", str(world), "--detail-ranks", policy, "--trace", str(trace)],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    _CHILDREN.append(proc)
    assert proc.stdout is not None
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(600)
    if not line or not line[0].startswith(b"PORT "):
        _stop(proc)
        raise RuntimeError(f"the fleet server did not start: {(workdir / 'server.log').read_text()[-2000:]}")
    return proc, int(line[0].split()[1])


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc(pid: int) -> dict[str, float]:
    """A process's CPU seconds so far, and its VmRSS and VmHWM (bytes)."""
    out = {"cpu_s": _proc_cpu(pid)}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


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
    """{lastEvaluation: seconds} -> [(evaluation time after the pipeline was ready, seconds)], in order."""
    return sorted((_rfc3339(k) - ready, v) for k, v in evals.items())


def _named(alerts: list[dict[str, Any]], state_key: str) -> list[dict[str, Any]]:
    """The divergence alerts among ``alerts`` (a ruler's or the Alertmanager's): rank, aspect and state."""
    out = []
    for a in alerts:
        if a["labels"].get("alertname") != ALERT:
            continue
        state = a.get("state") if state_key == "state" else a.get("status", {}).get("state")
        when = a.get("activeAt") or a.get("startsAt")
        out.append({"rank": a["labels"].get("rank"), "aspect": a["labels"].get("aspect"), "state": state, "at": when})
    return out


def _alert_for(rules: Path) -> float:
    """The divergence alert's ``for:`` in seconds, from the rule file the run evaluates."""
    import yaml

    for g in yaml.safe_load(rules.read_text())["groups"]:
        for r in g["rules"]:
            if r.get("alert") == ALERT:
                return _seconds(r.get("for", "0s"))
    return 0.0


def _seconds(duration: str) -> float:
    """A Prometheus duration of one unit ("15s", "1m") in seconds."""
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def _fingerprints(pipe: Any, rank: int) -> dict[str, float]:
    """The rank's fingerprints by aspect, as the ruler's query sees them now."""
    try:
        rows = pipe.ruler_view(f'{FP}{{job="{JOB}", rank="{rank}"}}')
    except (OSError, AssertionError, ValueError):
        return {}
    return {r["metric"].get("aspect", ""): float(r["value"][1]) for r in rows}


def _served_fingerprints(base: str, rank: int) -> dict[str, float]:
    """The rank's fingerprints by aspect, as the simulator serves them now (what a scrape would store)."""
    out = {}
    for line in http_get(f"{base}/rank/{rank}", timeout=30).splitlines():
        m = re.match(FP + r'\{.*aspect="(\w+)".*\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


RANK_LISTS = ("ranks_named_after_odd", "ranks_named_at_end", "ranks_at_alertmanager", "ranks_at_alertmanager_at_end")


def shorten_rank_lists(alert: dict[str, Any], keep: int = 20) -> None:
    """Every rank named, counted (``<list>_count``), and the first ``keep`` of them kept: a run that named every rank
    of 16,384 would otherwise write them all."""
    for key in RANK_LISTS:
        if key in alert:
            ranks = sorted(alert[key], key=lambda r: int(r) if str(r).isdigit() else -1)
            alert[f"{key}_count"] = len(ranks)
            alert[key] = ranks[:keep]


def run_one(world: int, policy: str, args: argparse.Namespace, pipeline: str = "prometheus") -> dict[str, Any]:
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"torch-otel-fleet-{pipeline}-{world}-{policy}-"))
    odd = world * 3 // 4 + 1  # a rank in a node of its own, not 0
    rules = Path(getattr(args, "rules", RULES))
    out: dict[str, Any] = {
        "pipeline": pipeline,
        "ranks": world,
        "detail_ranks": policy,
        "odd_rank": odd,
        "rules_file": str(rules),
    }
    tag = f"[{pipeline}, {world} ranks, {policy}]"
    server = pipe = am = None
    busy0, stall0 = _machine_cpu()
    wall0, self0 = time.time(), time.process_time()
    comps: dict[str, int] = {}
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
        am = Alertmanager().__enter__()  # left in the finally below
        cls: Any = PIPELINES[pipeline]
        pipe = cls(world, sport, args.scrape_interval, args.eval_interval, rules, am.url).__enter__()
        ready = time.time()
        comps = {**pipe.components(), "alertmanager": am.pid, "server": server.pid}
        print(f"{tag} {pipeline} ready; processes {comps}", flush=True)
        # every rank's series, and the 5 series a scraper adds per target (up, scrape_duration_seconds, ...)
        expected = stats0["series_total"] + 5 * world

        samples: list[dict[str, Any]] = []
        rule_evals: dict[tuple[str, str], dict[str, float]] = {}  # (group, rule) -> {lastEvaluation: seconds}
        group_evals: dict[str, dict[str, float]] = {}
        ruler_polls: list[dict[str, Any]] = []
        am_polls: list[dict[str, Any]] = []
        steps_done = 0
        t_odd: float | None = None
        t_visible: float | None = None
        odd_fp: dict[str, float] = {}
        series_in_at: float | None = None
        first_pending = first_firing = first_at_am = None
        false_alarms: list[dict[str, Any]] = []
        false_at_am: list[dict[str, Any]] = []
        mark: dict[str, Any] | None = None  # when every series was in: time, each process's CPU, samples taken in
        next_sample = 0.0
        while True:
            now = time.time()
            rel = now - ready
            # the timeline starts once every rank's series are in (or after SERIES_IN_TIMEOUT, whatever is in by then)
            t_base = series_in_at if series_in_at is not None else (SERIES_IN_TIMEOUT if rel >= SERIES_IN_TIMEOUT else None)
            if t_base is not None:
                while steps_done < len(SHARED_STEPS_AT) and rel >= t_base + SHARED_STEPS_AT[steps_done]:
                    steps_done += 1
                    json.loads(http_get(f"{base}/control?step={steps_done}&odd=-1", timeout=30))
                if t_odd is None and rel >= t_base + ODD_AT:
                    t_odd = json.loads(http_get(f"{base}/control?step={steps_done}&odd={odd}", timeout=30))["at"]
                    odd_fp = _served_fingerprints(base, odd)  # what the odd rank serves from now on
                    print(f"{tag} rank {odd} compiled something the others did not", flush=True)
            if t_odd is not None and t_visible is None and _fingerprints(pipe, odd) == odd_fp:
                t_visible = time.time()  # the ruler's next evaluation can see the odd rank's new fingerprints
            t_q = time.perf_counter()
            seen = _named(pipe.ruler_alerts(), "state")
            poll_s = time.perf_counter() - t_q
            at_am = _named(am.alerts(), "status")
            ruler_polls.append({"t": now, "poll_s": poll_s, "alerts": seen})
            am_polls.append({"t": now, "alerts": at_am})
            if t_odd is None:
                false_alarms.extend({"t_rel": rel, **a} for a in seen)
                false_at_am.extend({"t_rel": rel, **a} for a in at_am)
            else:
                if seen and first_pending is None:
                    first_pending = now
                if first_firing is None and any(a["state"] == "firing" for a in seen):
                    first_firing = now
                if at_am and first_at_am is None:
                    first_at_am = now
                    print(f"{tag} {ALERT} at the Alertmanager {now - t_odd:.0f}s after the odd compile", flush=True)
            if now >= next_sample:
                next_sample = now + (5 if series_in_at is not None else 2)
                snap: dict[str, Any] = {"t_rel": rel, **pipe.stats()}
                snap["proc"] = {name: _proc(pid) for name, pid in comps.items()}
                samples.append(snap)
                if series_in_at is None and snap.get("series_stored", 0) >= expected:
                    series_in_at = rel
                    mark = {
                        "t": time.time(),
                        "cpu": {n: p["cpu_s"] for n, p in snap["proc"].items()},
                        "samples": snap["samples_ingested_total"],
                    }
                    print(f"{tag} every rank's series in after {rel:.0f}s", flush=True)
                for g in pipe.rule_groups():
                    if g.get("lastEvaluation", "").startswith("0001"):
                        continue
                    # Prometheus times the group; vmalert times each rule only: the group is their sum (they run in turn)
                    g_time = g.get("evaluationTime")
                    if g_time is None:
                        g_time = sum(r.get("evaluationTime", 0.0) for r in g["rules"])
                    group_evals.setdefault(g["name"], {})[g["lastEvaluation"]] = g_time
                    for r in g["rules"]:
                        if not r.get("lastEvaluation", "").startswith("0001"):
                            rule_evals.setdefault((g["name"], r["name"]), {})[r["lastEvaluation"]] = r["evaluationTime"]
            if first_at_am is not None and now - first_at_am > 2:
                break
            if t_odd is not None and now - t_odd > ALERT_TIMEOUT:
                print(f"{tag} {ALERT} did not reach the Alertmanager within {ALERT_TIMEOUT:.0f}s", flush=True)
                break
            time.sleep(max(0.0, 1.0 - (time.time() - now)))

        # the steady window, from every series in until the alert reached the Alertmanager: CPU per process, samples in
        last = samples[-1]
        if mark is not None and last["t_rel"] + ready > mark["t"]:
            span = last["t_rel"] + ready - mark["t"]
            out["cpu_cores_steady"] = {n: (last["proc"][n]["cpu_s"] - mark["cpu"][n]) / span for n in comps}
            out["cpu_cores_steady"]["window_s"] = span
            out["ingest_samples_per_s"] = (last["samples_ingested_total"] - mark["samples"]) / span
        out["series_in_s"] = series_in_at
        out["memory_steady"] = {n: last["proc"][n].get("VmRSS") for n in comps}
        out["series_stored"] = last.get("series_stored")
        out["stats_steady"] = {k: v for k, v in last.items() if k != "proc"}

        # the alert: at the ruler, and at the Alertmanager
        alert: dict[str, Any] = {
            "false_alarms_before_odd": false_alarms[:20],
            "false_alarm_count": len(false_alarms),
            "false_alarms_at_alertmanager": len(false_at_am),
        }
        if t_odd is not None:
            alert["odd_at_s"] = t_odd - ready
            alert["pending_after_s"] = None if first_pending is None else first_pending - t_odd
            alert["firing_after_s"] = None if first_firing is None else first_firing - t_odd
            alert["at_alertmanager_after_s"] = None if first_at_am is None else first_at_am - t_odd
            # from the moment a query as the ruler asks it returns the odd rank's new fingerprints (the scrape and
            # the store's own delay behind), against the rules' bound: two evaluation intervals plus the alert's for
            alert["visible_to_ruler_after_s"] = None if t_visible is None else t_visible - t_odd
            if t_visible is not None and first_at_am is not None:
                alert["at_alertmanager_after_visible_s"] = first_at_am - t_visible
            alert["bound_s"] = 2 * _seconds(args.eval_interval) + _alert_for(rules)
            after = [a for p in ruler_polls if p["t"] >= t_odd for a in p["alerts"]]
            if after:
                # the evaluation that made it pending, by its own timestamp (the API shows it once that evaluation ends)
                alert["active_at_after_s"] = min(_rfc3339(a["at"]) for a in after) - t_odd
            alert["ranks_named_after_odd"] = sorted({a["rank"] for a in after})
            alert["aspects_named"] = sorted({a["aspect"] for a in after})
            am_after = [a for p in am_polls if p["t"] >= t_odd for a in p["alerts"]]
            alert["ranks_at_alertmanager"] = sorted({a["rank"] for a in am_after})
            alert["aspects_at_alertmanager"] = sorted({a["aspect"] for a in am_after})
        alert["alerts_poll_s"] = _summarise([p["poll_s"] for p in ruler_polls])
        out["alert"] = alert
        print(f"{tag} alert: {json.dumps({k: v for k, v in alert.items() if 'false_alarms_before' not in k})}", flush=True)

        # scrapes, as the store has them
        out["scrapes"] = {
            "targets_up": pipe.scalar(f'count(up{{job="{JOB}"}} == 1)'),
            "targets": pipe.scalar(f'count(up{{job="{JOB}"}})'),
            "duration_p50_s": pipe.scalar(f'quantile(0.5, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_p99_s": pipe.scalar(f'quantile(0.99, scrape_duration_seconds{{job="{JOB}"}})'),
            "duration_max_2m_s": pipe.scalar(f'max(max_over_time(scrape_duration_seconds{{job="{JOB}"}}[2m]))'),
            "samples_per_round": pipe.scalar(f'sum(scrape_samples_scraped{{job="{JOB}"}})'),
        }
        if isinstance(pipe, FleetVM):
            out["scrapes"]["targets_per_vmagent"] = pipe.agent_targets()

        # every dashboard query, after the alert reached the Alertmanager (the data is in, and a few scrapes old)
        queries = []
        for dash, title, expr in dashboard_queries():
            queries.append({"dashboard": dash, "panel": title, "expr": expr, **time_query(pipe, expr)})
        out["queries"] = queries
        by_dash: dict[str, list[float]] = {}
        for q in queries:
            if q["median_s"] is not None:
                by_dash.setdefault(q["dashboard"], []).append(q["median_s"])
        out["dashboards"] = {d: {**_summarise(v), "queries": len(v)} for d, v in by_dash.items()}
        out["query_errors"] = [q for q in queries if q.get("error")]

        # did any other rank get named, up to now (a few evaluations after the alert reached the Alertmanager)?
        late = _named(pipe.ruler_alerts(), "state")
        late_am = _named(am.alerts(), "status")
        alert["ranks_named_at_end"] = sorted({a["rank"] for a in late})
        alert["ranks_at_alertmanager_at_end"] = sorted({a["rank"] for a in late_am})
        alert["states_at_end"] = sorted({a["state"] for a in late})
        alert["only_the_odd_rank"] = (
            alert.get("ranks_named_after_odd") == [str(odd)]
            and alert["ranks_named_at_end"] == [str(odd)]
            and alert.get("ranks_at_alertmanager") == [str(odd)]
            and alert["ranks_at_alertmanager_at_end"] == [str(odd)]
        )
        shorten_rank_lists(alert)

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

        end = pipe.stats()
        end_proc = {name: _proc(pid) for name, pid in comps.items()}
        out["stats_end"] = end
        out["series_count_end"] = pipe.series_count()
        # the kernel updates VmHWM lazily: the peak is the larger of it and every VmRSS read
        out["memory_peak"] = {
            n: max([end_proc[n].get("VmHWM", 0), end_proc[n].get("VmRSS", 0), *(s["proc"][n].get("VmRSS", 0) for s in samples)])
            for n in comps
        }
        out["rule_iterations_missed_end"] = end.get("rule_iterations_missed_total")
        out["samples"] = samples
        stats1 = json.loads(http_get(f"{base}/stats", timeout=30))
        out["server"] = {"requests": stats1["requests"], "bytes": stats1["bytes"], "cpu_s": stats1["cpu_s"]}

        # the whole run's CPU on this machine: ours (the pipeline, the Alertmanager, the server, this process) and everyone else's
        busy1, stall1 = _machine_cpu()
        wall = time.time() - wall0
        procs_cpu = {n: p["cpu_s"] for n, p in end_proc.items()}
        ours = sum(procs_cpu.values()) + time.process_time() - self0
        out["machine_cpu"] = {
            "wall_s": wall,
            "busy_cores": (busy1 - busy0) / wall,
            "ours_cores": ours / wall,
            "others_cores": max(0.0, (busy1 - busy0 - ours) / wall),
            "cpu_stall_share": (stall1 - stall0) / wall,
            **{f"{n}_cores": v / wall for n, v in procs_cpu.items()},
        }
        print(f"{tag} machine: {json.dumps({k: round(v, 2) for k, v in out['machine_cpu'].items()})}", flush=True)
        return out
    finally:
        if pipe is not None:
            t0 = time.monotonic()
            with contextlib.suppress(Exception):
                pipe.stop()
            out["pipeline_stop_s"] = time.monotonic() - t0
            pipe.__exit__(None, None, None)  # its data directories
        if am is not None:
            am.__exit__(None, None, None)
        if server is not None:
            _stop(server)
        shutil.rmtree(workdir, ignore_errors=True)
        out["wall_s"] = time.monotonic() - t_start
