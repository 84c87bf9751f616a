"""The divergence rules' cost, two rule files side by side: the same store, the same data, queries alternating.

    .venv/bin/python -m bench.fleet.rules --before OLD.yml [--after grafana/alerts/torch-compile-rules.yml]
                                          [--sizes 16384] [--pipelines prometheus,vm] [--reps 3] [--out FILE]
    .venv/bin/python -m bench.fleet.rules --panels-only --dashboard-before OLD-torch-compile-ranks.json [...]

A rule's evaluation time in bench/fleet/metrics.py is measured by its ruler while everything else on the machine runs,
so two runs of two rule files differ by the machine's load as much as by the rules. Here one store holds one
simulated job (bench/fleet/metrics.py's server and pipeline, ``--detail-ranks rank0``), and its ruler evaluates the
``--before`` file, so that file's recorded series exist. Then the expression of every rule of the
``torch-compile-divergence`` group of both files is sent to the store as an instant query (Prometheus's
/api/v1/query, or VictoriaMetrics's with ``nocache=1``), ``--reps`` times each, the two files' rules
alternating, first while every rank agrees, then once one rank compiled something the others did not. A
group's cost is the sum of its rules' (its ruler runs them one after another).

With ``--dashboard-before``, the ranks dashboard's "Ranks that compiled differently" query of that file and of
``--dashboard-after`` (default: the shipped one) is compared the same way (``--panels-only``: it alone).

What an instant query costs is what the ruler pays to evaluate the rule, less writing its result. Writes
``--out`` (default bench/results/fleet_rules_results.json) and prints a Markdown table. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RESULTS, ROOT  # noqa: E402
from bench.fleet.prometheus import JOB, RULES  # noqa: E402
from bench.fleet.ranks import TRACE  # noqa: E402
from bench.fleet.runs import PIPELINES, start_server, stop_all  # noqa: E402
from tests.servers import Alertmanager, http_get  # noqa: E402

GROUP = "torch-compile-divergence"


def _rules(path: Path) -> list[tuple[str, str]]:
    import yaml

    groups = yaml.safe_load(path.read_text())["groups"]
    (group,) = [g for g in groups if g["name"] == GROUP]
    return [(r.get("record") or r["alert"], r["expr"]) for r in group["rules"]]


def _time(pipe: Any, expr: str) -> tuple[float | None, int | None, str]:
    t0 = time.perf_counter()
    try:
        n = len(pipe.store_api("query", query=expr)["result"])
    except (OSError, AssertionError, ValueError) as exc:
        return None, None, str(exc)[:200]
    return time.perf_counter() - t0, n, ""


PANEL = "Ranks that compiled differently"  # the ranks dashboard's panel that reads every rank's fingerprints


def _panel(path: Path) -> list[tuple[str, str]]:
    """The ranks dashboard's :data:`PANEL` query, with Grafana's variables as bench/fleet/metrics.py substitutes them."""
    doc = json.loads(path.read_text())
    (expr,) = [p["targets"][0]["expr"] for p in doc["panels"] if p.get("title") == PANEL]
    return [(f"panel: {PANEL}", expr.replace("$job", JOB).replace("$rank", ".*"))]


def measure(world: int, pipeline: str, args: argparse.Namespace) -> dict[str, Any]:
    files = {"before": [], "after": []} if args.panels_only else {"before": _rules(args.before), "after": _rules(args.after)}
    if args.dashboard_before is not None:
        files["before"] += _panel(args.dashboard_before)
        files["after"] += _panel(args.dashboard_after)
    out: dict[str, Any] = {"pipeline": pipeline, "ranks": world, "states": {}}
    tag = f"[{pipeline}, {world} ranks]"
    workdir = Path(tempfile.mkdtemp(prefix="torch-otel-fleet-rules-"))
    server = pipe = am = None
    try:
        server, sport = start_server(world, "rank0", TRACE, workdir)
        base = f"http://127.0.0.1:{sport}"
        served = json.loads(http_get(f"{base}/stats", timeout=30))["series_total"]
        am = Alertmanager().__enter__()
        pipe = PIPELINES[pipeline](world, sport, "15s", "15s", args.before, am.url).__enter__()
        t0 = time.time()
        while pipe.stats().get("series_stored", 0) < served + 5 * world and time.time() - t0 < 240:
            time.sleep(2)
        time.sleep(45)  # a few scrapes and evaluations: the --before file's recorded series exist
        print(f"{tag} series in after {time.time() - t0:.0f}s", flush=True)
        odd = world * 3 // 4 + 1
        for state, query in (("every rank agrees", "step=1&odd=-1"), ("one rank odd", f"step=1&odd={odd}")):
            http_get(f"{base}/control?{query}", timeout=30)
            time.sleep(40)  # every rank scraped at least twice with it, and the recorded series follow
            times: dict[str, dict[str, list[float]]] = {v: {name: [] for name, _ in rules} for v, rules in files.items()}
            sizes: dict[str, dict[str, int | None]] = {v: {} for v in files}
            errors: list[str] = []
            for rep in range(args.reps):
                order = ("before", "after") if rep % 2 == 0 else ("after", "before")
                for i in range(max(len(r) for r in files.values())):
                    for version in order:
                        if i >= len(files[version]):
                            continue
                        name, expr = files[version][i]
                        secs, n, err = _time(pipe, expr)
                        if secs is None:
                            errors.append(f"{version} {name}: {err}")
                        else:
                            times[version][name].append(secs)
                            sizes[version][name] = n
            rules_out = {
                v: {
                    name: {"median_s": statistics.median(t) if t else None, "result_len": sizes[v].get(name)}
                    for name, t in r.items()
                }
                for v, r in times.items()
            }
            # the rule group's cost: its rules' (a dashboard panel is not evaluated by the ruler)
            total = {
                v: sum(x["median_s"] or 0.0 for n, x in r.items() if not n.startswith("panel: ")) for v, r in rules_out.items()
            }
            out["states"][state] = {"rules": rules_out, "group_total_s": total, "errors": errors}
            print(f"{tag} {state}: group total before {total['before']:.2f}s, after {total['after']:.2f}s", flush=True)
        return out
    finally:
        if pipe is not None:
            pipe.stop()
            pipe.__exit__(None, None, None)
        if am is not None:
            am.__exit__(None, None, None)
        if server is not None:
            stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


def table(results: list[dict[str, Any]]) -> str:
    cols = [f"{r['pipeline']}, {r['ranks']:,} ranks, {s}" for r in results for s in r["states"]]
    rows = ["| rule (instant query, median), before / after | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    names: list[str] = []
    for r in results:
        for st in r["states"].values():
            for v in ("before", "after"):
                names += [n for n in st["rules"][v] if n not in names]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1000:,.0f}"

    for n in names:
        cells = []
        for r in results:
            for st in r["states"].values():
                b = st["rules"]["before"].get(n, {}).get("median_s")
                a = st["rules"]["after"].get(n, {}).get("median_s")
                cells.append(f"{ms(b)} / {ms(a)} ms")
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    cells = [
        f"{st['group_total_s']['before'] * 1000:,.0f} / {st['group_total_s']['after'] * 1000:,.0f} ms"
        for r in results
        for st in r["states"].values()
    ]
    if any(not n.startswith("panel: ") for n in names):
        rows.append("| **the group** | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--before", type=Path, default=RULES, help="the rule file whose recorded series the store holds")
    p.add_argument("--after", type=Path, default=RULES)
    p.add_argument("--dashboard-before", type=Path, help=f"a torch-compile-ranks.json: its '{PANEL}' query is compared too")
    p.add_argument("--dashboard-after", type=Path, default=ROOT / "grafana" / "dashboards" / "torch-compile-ranks.json")
    p.add_argument("--panels-only", action="store_true", help="compare the dashboards' panel queries alone")
    p.add_argument("--sizes", default="16384")
    p.add_argument("--pipelines", default="prometheus,vm")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS / "fleet_rules_results.json")
    args = p.parse_args(argv)

    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)  # every process it started is stopped, as bench/fleet/metrics.py's
    signal.signal(signal.SIGHUP, _terminate)
    args.before, args.after = args.before.resolve(), args.after.resolve()
    if args.panels_only and args.dashboard_before is None:
        p.error("--panels-only needs --dashboard-before")
    results = []
    t0 = time.monotonic()
    try:
        for world in (int(s) for s in args.sizes.split(",")):
            for pl in args.pipelines.split(","):
                results.append(measure(world, pl, args))
    finally:
        stop_all()
    doc = {
        "command": "python -m bench.fleet.rules " + " ".join(argv if argv is not None else sys.argv[1:]),
        "wall_s": time.monotonic() - t0,
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
