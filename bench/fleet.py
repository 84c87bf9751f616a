"""A job of thousands of ranks, simulated, against a real Prometheus running the shipped rules unchanged.

    .venv/bin/python bench/fleet.py [--sizes 1024,4096] [--detail-ranks all,rank0] [--out bench/fleet_results.json]

About 13 minutes for both sizes and both policies on 2 cores. For each size and detail-ranks policy:

1. A server process (``bench/fleet_server.py``) holds every simulated rank's exposition as bytes, built
   once by :func:`fleet_ranks.rank_exposition`: the series a real rank produced (a real rank's ``TORCH_TRACE``
   log replayed through the bridge's own metrics path), relabelled per rank. One asyncio server on
   one 127.0.0.1 port serves all ranks, one path each (``/rank/N``); only the fingerprint lines are
   rebuilt when they change.
2. Debian's ``prometheus`` scrapes every rank as its own target (``__metrics_path__`` and
   ``instance`` set per target, ``job`` from the scrape config) and evaluates
   ``grafana/alerts/torch-compile-rules.yml`` as shipped. Only scrape and evaluation intervals are
   set here (15 s each by default).
3. Compiles arrive: every rank steps its fingerprints through the same values (all ranks at once;
   Prometheus's scrapes, spread over the interval, see them over up to one interval). Then one odd
   rank compiles something the others do not (a recompile, which misses the cache and adds a graph).
   /api/v1/alerts is polled every second: the time from the odd rank's change to
   TorchCompileRankDivergence pending and firing, and the ranks it names.
4. Measured: series in the head, Prometheus's RSS and CPU, scrape durations, each rule's and each
   group's evaluation time (/api/v1/rules, every evaluation seen), and every dashboard panel's
   PromQL timed through /api/v1/query (3 runs each, median) with $job, $rank=.* and
   $__rate_interval=1m substituted as Grafana would.

Writes ``bench/fleet_results.json`` and prints a markdown table. Nothing here asserts a number.
Every process it starts is stopped on exit, Ctrl-C and errors included.

This file is the command; the work is in the modules beside it: ``fleet_ranks.py`` (what a simulated
rank serves), ``fleet_server.py`` (the server process), ``fleet_prometheus.py`` (Prometheus, and what
is measured through it), ``fleet_run.py`` (one run's timeline) and ``fleet_report.py`` (the tables).
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# torch_otel from this checkout; tests/ last: the test suite's real-server helpers (tests/servers.py's Prometheus)
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))

from fleet_prometheus import RULES  # noqa: E402
from fleet_ranks import POLICIES, TRACE  # noqa: E402
from fleet_report import dashboards_table, rules_table, slowest_table, table  # noqa: E402
from fleet_run import ODD_AT, SHARED_STEPS_AT, run_one, stop_all  # noqa: E402
from fleet_server import serve  # noqa: E402


def _for_durations() -> dict[str, str]:
    import yaml

    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r.get("for", "0s") for g in groups for r in g["rules"] if "alert" in r}


def _prometheus_version() -> str:
    r = subprocess.run([shutil.which("prometheus") or "prometheus", "--version"], capture_output=True, text=True, check=False)
    return (r.stdout + r.stderr).splitlines()[0] if (r.stdout + r.stderr) else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--sizes", default="1024,4096", help="comma-separated numbers of ranks")
    p.add_argument("--detail-ranks", default="all,rank0", help=f"comma-separated policies: {', '.join(POLICIES)}")
    p.add_argument("--scrape-interval", default="15s")
    p.add_argument("--eval-interval", default="15s")
    p.add_argument("--trace", type=Path, default=TRACE, help="the real rank's TORCH_TRACE log every simulated rank serves")
    p.add_argument("--out", type=Path, default=HERE / "fleet_results.json")
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
    t0 = time.monotonic()
    runs = []
    try:
        for world in sizes:
            for pol in policies:
                runs.append(run_one(world, pol, args))
    finally:
        stop_all()
    result = {
        "command": "python bench/fleet.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "wall_s": time.monotonic() - t0,
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "prometheus": _prometheus_version(),
        },
        "config": {
            "scrape_interval": args.scrape_interval,
            "evaluation_interval": args.eval_interval,
            "rules_file": str(RULES.relative_to(ROOT)),
            "for": _for_durations(),
            "shared_compiles_at_s": SHARED_STEPS_AT,
            "odd_rank_compiles_at_s": ODD_AT,
            "trace": str(args.trace.relative_to(ROOT)) if args.trace.is_relative_to(ROOT) else str(args.trace),
        },
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print()
    print(table(runs))
    print()
    print(rules_table(runs))
    print()
    print(dashboards_table(runs))
    print()
    print(slowest_table(runs))
    print(f"\n{len(runs)} runs in {result['wall_s']:.0f} s; {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
