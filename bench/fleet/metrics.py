"""A job of thousands of ranks, simulated, against real metrics pipelines running the shipped rules unchanged.

    .venv/bin/python -m bench.fleet.metrics [--pipelines prometheus,vm] [--sizes 1024,4096] [--detail-ranks all,rank0]
                                    [--rules FILE] [--out bench/results/fleet_results.json]

About 13 minutes for both sizes and both policies on one Prometheus, on 2 cores; 25 minutes for
``--pipelines prometheus,vm --sizes 1024,4096,16384 --detail-ranks rank0``. The pipelines:

- ``prometheus`` (the default): one Prometheus scrapes every rank, stores, and evaluates the rules.
- ``vm``: two ``vmagent`` members share the scrape (``-promscrape.cluster.membersCount=2``), one
  VictoriaMetrics stores, ``vmalert`` evaluates the rules (``bench/fleet/victoria_metrics.py``).

Either sends its alerts to a real Alertmanager (Debian's ``prometheus-alertmanager``). For each pipeline, size and
detail-ranks policy:

1. A server process (``bench/fleet/server.py``) holds every simulated rank's exposition as bytes, built
   once by :func:`fleet_ranks.rank_exposition`: the series a real rank produced (a real rank's ``TORCH_TRACE``
   log replayed through the bridge's own metrics path), relabelled per rank. One asyncio server on
   one 127.0.0.1 port serves all ranks, one path each (``/rank/N``); only the fingerprint lines are
   rebuilt when they change.
2. The pipeline scrapes every rank as its own target (``__metrics_path__`` and ``instance`` set per
   target, ``job`` from the scrape config) and evaluates ``grafana/alerts/torch-compile-rules.yml``
   as shipped (or ``--rules``). Only scrape and evaluation intervals are set here (15 s each by default).
3. Compiles arrive: every rank steps its fingerprints through the same values (all ranks at once;
   the scrapes, spread over the interval, see them over up to one interval). Then one odd
   rank compiles something the others do not (a recompile, which misses the cache and adds a graph).
   The ruler's /api/v1/alerts and the Alertmanager's /api/v2/alerts are polled every second: the time
   from the odd rank's change to TorchCompileRankDivergence pending, firing, and at the Alertmanager,
   the ranks it names, and any alert before the odd rank's change (a false alarm).
4. Measured: series stored and samples taken in, the RSS and CPU of every process (store, scrapers,
   ruler, Alertmanager, the fleet server), scrape durations, each rule's and each group's evaluation
   time (the ruler's /api/v1/rules, every evaluation seen), and every dashboard panel's PromQL timed
   through the store's /api/v1/query (3 runs each, median) with $job, $rank=.* and $__rate_interval=1m
   substituted as Grafana would.

Writes ``bench/results/fleet_results.json`` and prints a markdown table. Nothing here asserts a number.
Every process it starts is stopped on exit, Ctrl-C and errors included.

This file is the command; the work is in the modules beside it: ``fleet_ranks.py`` (what a simulated
rank serves), ``fleet_server.py`` (the server process), ``fleet_prometheus.py`` (Prometheus, and what
is measured through it), ``fleet_vm.py`` (the VictoriaMetrics pipeline), ``fleet_run.py`` (one run's
timeline) and ``fleet_report.py`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT  # noqa: E402

# torch_otel from this checkout; tests/ last: the test suite's real-server helpers (tests/servers.py's Prometheus)
from bench.fleet.prometheus import RULES  # noqa: E402
from bench.fleet.ranks import POLICIES, TRACE  # noqa: E402
from bench.fleet.report import components_table, dashboards_table, rules_table, slowest_table, table  # noqa: E402
from bench.fleet.runs import ODD_AT, PIPELINES, SHARED_STEPS_AT, run_one, stop_all  # noqa: E402
from bench.fleet.server import serve  # noqa: E402


def _for_durations(rules: Path) -> dict[str, str]:
    import yaml

    groups = yaml.safe_load(rules.read_text())["groups"]
    return {r["alert"]: r.get("for", "0s") for g in groups for r in g["rules"] if "alert" in r}


def _version(program: str, flag: str = "--version") -> str:
    path = shutil.which(program)
    if path is None:
        return "not installed"
    r = subprocess.run([path, flag], capture_output=True, text=True, check=False)
    text = (r.stdout + r.stderr).strip()
    if not text and shutil.which("dpkg-query"):  # Debian's VictoriaMetrics binaries print an empty version
        pkg = {"vmagent": "victoria-metrics", "vmalert": "victoria-metrics"}.get(program, program)
        q = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, check=False)
        text = f"{program} (Debian {pkg} {q.stdout.strip()})"
    return text.splitlines()[0] if text else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--pipelines", default="prometheus", help=f"comma-separated: {', '.join(PIPELINES)}")
    p.add_argument("--sizes", default="1024,4096", help="comma-separated numbers of ranks")
    p.add_argument("--detail-ranks", default="all,rank0", help=f"comma-separated policies: {', '.join(POLICIES)}")
    p.add_argument("--scrape-interval", default="15s")
    p.add_argument("--eval-interval", default="15s")
    p.add_argument("--trace", type=Path, default=TRACE, help="the real rank's TORCH_TRACE log every simulated rank serves")
    p.add_argument("--rules", type=Path, default=RULES, help="the rule file both rulers evaluate (default: the shipped one)")
    p.add_argument("--out", type=Path, default=RESULTS / "fleet_results.json")
    p.add_argument("--serve", type=int, metavar="WORLD", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.detail_ranks, args.trace)
        return 0

    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even where a shell started us with it ignored
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.detail_ranks.split(",")
    for pol in policies:
        if pol not in POLICIES:
            p.error(f"--detail-ranks: {pol!r} is not one of {', '.join(POLICIES)}")
    pipelines = args.pipelines.split(",")
    for pl in pipelines:
        if pl not in PIPELINES:
            p.error(f"--pipelines: {pl!r} is not one of {', '.join(PIPELINES)}")
    args.rules = args.rules.resolve()
    partial = args.out.with_suffix(".partial.json")
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    try:
        for world in sizes:
            for pol in policies:
                for pl in pipelines:
                    try:
                        runs.append(run_one(world, pol, args, pl))
                    except Exception as exc:  # noqa: BLE001 - the other runs go on; this one is reported as failed
                        traceback.print_exc()
                        failed.append({"pipeline": pl, "ranks": world, "detail_ranks": pol, "error": repr(exc)})
                    partial.write_text(json.dumps({"partial": True, "runs": runs, "failed_runs": failed}, indent=1) + "\n")
    finally:
        stop_all()
    result = {
        "command": "python -m bench.fleet.metrics " + " ".join(argv if argv is not None else sys.argv[1:]),
        "wall_s": time.monotonic() - t0,
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "prometheus": _version("prometheus"),
            "victoria-metrics": _version("victoria-metrics", "-version"),
            "vmagent": _version("vmagent", "-version"),
            "vmalert": _version("vmalert", "-version"),
            "alertmanager": _version("prometheus-alertmanager"),
        },
        "config": {
            "scrape_interval": args.scrape_interval,
            "evaluation_interval": args.eval_interval,
            "rules_file": str(args.rules.relative_to(ROOT)) if args.rules.is_relative_to(ROOT) else str(args.rules),
            "for": _for_durations(args.rules),
            "shared_compiles_at_s": SHARED_STEPS_AT,
            "odd_rank_compiles_at_s": ODD_AT,
            "trace": str(args.trace.relative_to(ROOT)) if args.trace.is_relative_to(ROOT) else str(args.trace),
        },
        "runs": runs,
        "failed_runs": failed,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    partial.unlink(missing_ok=True)
    if runs:
        for tab in (table, components_table, rules_table, dashboards_table, slowest_table):
            print()
            print(tab(runs))
    for f in failed:
        print(f"FAILED: {f}")
    print(f"\n{len(runs)} runs in {result['wall_s']:.0f} s; {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
