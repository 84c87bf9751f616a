"""torch-otel benchmarks: one command, paired and alternating comparisons, a Markdown table at the end.

    python -m bench.cost.run [--reps N] [--quick] [--out bench/results/results.md]

1. Compile overhead, whole process: each workload (mlp, transformer, inductor) runs in a fresh
   process per configuration (none, none again for the A/A baseline, the bridge's imports and
   provider without instrumenting, torch-otel default, full, TORCH_TRACE), in a rotated order each
   repetition. Ratios are paired per repetition against
   `none`, and reported as median [min, max], for CPU seconds (the child's user+sys) and wall.
   Also: torch's own compile seconds and its `structured_logging_overhead_s`, per configuration.
2. In one process: blocks of compiles with nothing, the bridge at default and at full capture, and
   torch's own TORCH_TRACE handler, in a rotated order each round (median CPU per compile). What
   each adds is also measured directly, with `thread_time` on the thread it runs on: the hooks (or
   torch's trace file handler), the bridge's worker thread, and span export.
3. Steady state: time per training step after compilation, bridge on and off, in one process.
4. Replay throughput: `torch-otel replay -o FILE` against `tlparse --no-browser` on the same logs
   (a real one and a large synthetic one), MB/s and peak RSS, alternating.
5. Long runs: RSS and live objects over 2,000 frame compiles: no bridge, the bridge exporting to a
   collector (rotel) that receives, and to one that is down.
6. Export cost: spans per second through the replay pipeline (read, parse, assemble, build spans) with a no-op
   exporter, and with OTLP to rotel on loopback.
7. Zero cost until torch compiles (bench/cost/zero_cost.py): start-up with and without the bridge, paired; and a
   compile-heavy loop exporting to rotel over OTLP/gRPC, every thread's CPU counted, with each thread's share.

``--only zero-cost`` runs section 7 alone (about 10 minutes).

Public tools only: Python, torch, tlparse and rotel from PyPI. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import RESULTS

HERE = Path(__file__).resolve().parent
PY = sys.executable

from bench.cost.measure import child, spread  # noqa: E402

STATE_NAMES = {"off": "none", "default": "default", "full": "full", "trace": "TORCH_TRACE"}


def in_process_table(alt: dict[str, Any]) -> list[str]:
    """The four states of one process: per-compile CPU, and what each adds, measured on the threads it runs on."""
    states = alt["states"]
    c, t, added = alt["cpu_per_compile_s"], alt["torch_per_compile_s"], alt["added_s_per_compile"]
    base = c["off"] * 1e3

    def row(label: str, key: str | None = None, bold: bool = False) -> str:
        cells = []
        for st in states:
            parts = added[st]
            ms = (parts["hooks"] + parts["batches"] + parts["export"] if key is None else parts[key]) * 1e3
            text = f"{ms:.2f} ms ({ms / base:.1%})" if ms else "0"
            cells.append(f"**{text}**" if bold and ms else text)
        return f"| {label} | " + " | ".join(cells) + " |"

    def ratio(a: str, b: str) -> str:
        return spread([x / y for x, y in zip(alt["cpu_blocks"][a], alt["cpu_blocks"][b], strict=True)])

    return [
        "### In one process: blocks of MLP fwd+bwd compiles (aot_eager) in four states, rotated each round",
        "",
        "Medians per compile. The parts are measured with `thread_time` on the thread each runs on; "
        "percentages are of the compile with nothing on.",
        "",
        "| measure | " + " | ".join(STATE_NAMES[st] for st in states) + " |",
        "|---|" + "---|" * len(states),
        "| CPU per compile | " + " | ".join(f"{c[st] * 1e3:.1f} ms" for st in states) + " |",
        "| torch's own frame compile time | " + " | ".join(f"{t[st] * 1e3:.1f} ms" for st in states) + " |",
        row("on torch's path: the bridge's hooks, or torch's trace file handler", "hooks"),
        row("the bridge's worker thread: assembly, spans, metrics", "batches"),
        row("exporting spans (the SDK's batch thread)", "export"),
        row("**added CPU in all**", bold=True),
        row("collections of torch's heap that began inside that code (not in the sum)", "gc"),
        "",
        "| blocks of one round (CPU per compile) | median [min, max] |",
        "|---|---|",
        f"| default / none | {ratio('default', 'off')} |",
        f"| full / TORCH_TRACE | {ratio('full', 'trace')} |",
        f"| TORCH_TRACE / none | {ratio('trace', 'off')} |",
    ]


def _added(run: dict[str, Any]) -> float:
    parts = run.get("added_s") or {}
    return float(parts.get("hooks", 0.0) + parts.get("batches", 0.0) + parts.get("export", 0.0))


def compile_overhead(reps: int, workloads: list[str]) -> list[dict[str, Any]]:
    configs = ["none", "none (A/A)", "imports", "default", "full", "trace"]
    rows = []
    for wl in workloads:
        if wl == "inductor":
            child([PY, str(HERE / "workloads.py"), wl, "none"])  # warm the inductor cache first
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for rep in range(reps):
            order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
            for cfg in order:
                env = {}
                with tempfile.TemporaryDirectory() as trace_dir:
                    if cfg == "trace":
                        env["TORCH_TRACE"] = trace_dir
                    mode = "none" if cfg.startswith("none") else cfg
                    wall, cpu, _, out = child([PY, str(HERE / "workloads.py"), wl, mode], env)
                r = json.loads(out.strip().splitlines()[-1])
                runs[cfg].append({"wall": wall, "cpu": cpu, **r})
        for cfg in configs:
            cpu_ratio = [a["cpu"] / b["cpu"] for a, b in zip(runs[cfg], runs["none"], strict=True)]
            wall_ratio = [a["wall"] / b["wall"] for a, b in zip(runs[cfg], runs["none"], strict=True)]
            rows.append(
                {
                    "workload": wl,
                    "config": cfg,
                    "compiles": runs[cfg][0]["compiles"],
                    "cpu_s": statistics.median(r["cpu"] for r in runs[cfg]),
                    "cpu_ratio": cpu_ratio,
                    "wall_ratio": wall_ratio,
                    "torch_compile_s": statistics.median(r["torch_compile_s"] for r in runs[cfg]),
                    "structured_logging_overhead_s": statistics.median(r["structured_logging_overhead_s"] for r in runs[cfg]),
                    # measured directly: hooks (or torch's trace handler) + worker thread + export, collections apart
                    "added_s": statistics.median(_added(r) for r in runs[cfg]),
                }
            )
        print(f"compile overhead: {wl} done", file=sys.stderr, flush=True)
    return rows


def in_process() -> dict[str, Any]:
    _, _, _, out = child([PY, str(HERE / "workloads.py"), "alternate", "none"])
    alt = json.loads(out.strip().splitlines()[-1])
    _, _, _, out = child([PY, str(HERE / "workloads.py"), "steady", "none"])
    steady = json.loads(out.strip().splitlines()[-1])
    print("in-process alternation and steady state done", file=sys.stderr, flush=True)
    return {"alternate": alt, "steady": steady}


def real_log(tmp: Path) -> Path:
    """A real TORCH_TRACE log of a few MB: the transformer and MLP workloads with TORCH_TRACE on."""
    d = tmp / "trace"
    for wl in ("transformer", "mlp", "transformer"):
        child([PY, str(HERE / "workloads.py"), wl, "none"], {"TORCH_TRACE": str(d)})
    logs = sorted(d.glob("*.log"))
    out = tmp / "real.log"
    with out.open("wb") as fh:
        for log in logs:
            fh.write(log.read_bytes())  # several runs, one after another, as a long job writes them
    return out


def replay(tmp: Path, reps: int, big_mb: int) -> list[dict[str, Any]]:
    from tests.synthetic import make_log

    tlparse = shutil.which("tlparse") or str(Path(PY).parent / "tlparse")
    real = real_log(tmp)
    big = tmp / f"synthetic-{big_mb}mb.log"
    make_log(real, big, big_mb * 1_000_000)
    rows = []
    for log in (real, big):
        mb = log.stat().st_size / 1e6
        res: dict[str, list[tuple[float, float]]] = {"torch-otel replay": [], "tlparse": []}
        for rep in range(reps):
            tools = ["torch-otel replay", "tlparse"] if rep % 2 == 0 else ["tlparse", "torch-otel replay"]
            for tool in tools:
                if tool == "tlparse":
                    argv = [tlparse, str(log), "-o", str(tmp / "tlparse-out"), "--no-browser", "--overwrite"]
                else:
                    argv = [PY, "-m", "torch_otel", "replay", str(log), "-o", str(tmp / "replayed.jsonl")]
                wall, _, rss, _ = child(argv, cwd=tmp)
                res[tool].append((mb / wall, rss))
        for tool, vals in res.items():
            rows.append(
                {
                    "log": f"{'real' if log == real else 'synthetic'} ({mb:.0f} MB)",
                    "tool": tool,
                    "mb_s": [v[0] for v in vals],
                    "rss_mb": max(v[1] for v in vals),
                }
            )
        print(f"replay {log.name} done", file=sys.stderr, flush=True)
    return rows


def long_runs(n: int) -> list[dict[str, Any]]:
    from tests.servers import Rotel, free_port

    rows = []
    with Rotel(debug=False) as rotel:
        rotel_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_METRICS_EXPORTER": "otlp"}
        dead_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}", "OTEL_METRICS_EXPORTER": "otlp"}
        for name, cfg, env in (
            ("no bridge", "none", {}),
            ("bridge, collector receiving", "otlp", rotel_env),
            ("bridge, collector down", "otlp", dead_env),
        ):
            _, _, _, out = child([PY, str(HERE / "workloads.py"), "long", cfg], {**env, "BENCH_LONG_COMPILES": str(n)})
            s = json.loads(out.strip().splitlines()[-1])["samples"]
            first, last = s["200"], s[str(n)]
            rows.append(
                {
                    "run": name,
                    "rss_200": first["rss_mb"],
                    "rss_end": last["rss_mb"],
                    "objects_growth": last["objects"] - first["objects"],
                }
            )
            print(f"long run ({name}) done", file=sys.stderr, flush=True)
    return rows


def export_cost(tmp: Path) -> list[dict[str, Any]]:
    """Spans/s: the replay of a real log with spans to a no-op exporter, then to rotel over OTLP gRPC."""
    from tests.servers import Rotel

    log = tmp / "real.log"
    script = r"""
import sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from torch_otel._core.settings import Settings
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.spans import SpanMapper
from pathlib import Path

class Null(SpanExporter):
    n = 0
    def export(self, spans):
        Null.n += len(spans)
        return SpanExportResult.SUCCESS

provider = TracerProvider()
if sys.argv[2] == "null":
    provider.add_span_processor(SimpleSpanProcessor(Null()))
else:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    class Counting(OTLPSpanExporter):
        def export(self, spans):
            Null.n += len(spans)
            return super().export(spans)
    provider.add_span_processor(BatchSpanProcessor(Counting(endpoint=sys.argv[2], insecure=True), max_queue_size=1_000_000))
mapper = SpanMapper(provider.get_tracer("bench"), Settings(), live=False)
t = time.perf_counter()
replay_file(Path(sys.argv[1]), [], ReplayStats(), tracing=mapper)
provider.force_flush(600_000)
print(Null.n / (time.perf_counter() - t))
"""
    rows = []
    with Rotel(debug=False) as rotel:
        for name, target in (
            ("read, parse, assemble, build spans; no-op exporter", "null"),
            ("the same, then OTLP gRPC to rotel on loopback", f"127.0.0.1:{rotel.grpc_port}"),
        ):
            _, _, _, out = child([PY, "-c", script, str(log), target], cwd=tmp)
            rows.append({"path": name, "spans_s": float(out.strip().splitlines()[-1])})
    print("export cost done", file=sys.stderr, flush=True)
    return rows


def _added_text(row: dict[str, Any], none: dict[str, Any]) -> str:
    added = row.get("added_s")
    if not added:
        return "-"
    return f"{added:.3f} s ({added / none['cpu_s']:.1%} of none)"


def table(results: dict[str, Any]) -> str:
    lines = ["### Compile overhead (whole process; paired ratios, median [min, max])", ""]
    lines.append(
        "| workload | config | compiles | CPU s | CPU vs none | CPU vs imports only | CPU vs TORCH_TRACE | wall vs none "
        "| torch compile s | structured_logging_overhead_s | added CPU, measured directly |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    by = {(r["workload"], r["config"]): r for r in results["compile"]}
    for r in results["compile"]:
        trace = by[(r["workload"], "trace")]["cpu_ratio"]
        imports = by[(r["workload"], "imports")]["cpu_ratio"]
        vs_trace = [a / b for a, b in zip(r["cpu_ratio"], trace, strict=True)]
        vs_imports = [a / b for a, b in zip(r["cpu_ratio"], imports, strict=True)]
        lines.append(
            f"| {r['workload']} | {r['config']} | {r['compiles']} | {r['cpu_s']:.2f} | {spread(r['cpu_ratio'])} | "
            f"{spread(vs_imports)} | {spread(vs_trace)} | {spread(r['wall_ratio'])} | {r['torch_compile_s']:.2f} "
            f"| {r['structured_logging_overhead_s']:.3f} | {_added_text(r, by[(r['workload'], 'none')])} |"
        )
    alt, steady = results["in_process"]["alternate"], results["in_process"]["steady"]
    lines += ["", *in_process_table(alt), ""]
    s = steady["step_s"]
    lines += [
        "### Steady state (ABBA blocks of compiled training steps, bridge on and off; median [min, max])",
        "",
        "| measure | off | on | on/off |",
        "|---|---|---|---|",
        f"| training step (compiled) | {s['off'] * 1e6:.0f} us | {s['on'] * 1e6:.0f} us | {spread(steady['step_ratio'])} |",
        "",
        "### Replay throughput (alternating runs; MB/s median [min, max], peak RSS)",
        "",
        "| log | tool | MB/s | peak RSS |",
        "|---|---|---|---|",
    ]
    for r in results["replay"]:
        lines.append(f"| {r['log']} | {r['tool']} | {spread(r['mb_s'])} | {r['rss_mb']:.0f} MB |")
    n = results["long_compiles"]
    lines += ["", f"### Long runs ({n} frame compiles)", "", "| run | RSS at 200 | RSS at end | growth | live objects growth |"]
    lines.append("|---|---|---|---|---|")
    for r in results["long"]:
        lines.append(
            f"| {r['run']} | {r['rss_200']:.0f} MB | {r['rss_end']:.0f} MB | {r['rss_end'] - r['rss_200']:+.1f} MB | {r['objects_growth']:+d} |"
        )
    lines += ["", "### Export cost", "", "| path | spans/s |", "|---|---|"]
    for r in results["export"]:
        lines.append(f"| {r['path']} | {r['spans_s']:,.0f} |")
    lines += ["", "Export cost: the whole replay pipeline of the real log (read, parse, assemble, build spans), then export."]
    if "zero_cost" in results:
        from bench.cost.zero_cost import table as zero_cost_table

        lines += ["", zero_cost_table(results["zero_cost"])]
    return "\n".join(lines) + "\n"


def zero_cost_section(reps: int) -> dict[str, Any]:
    from bench.cost.zero_cost import compile_loop, floor, startup

    return {"startup": startup(max(reps, 10)), "loop": compile_loop(max(reps, 5)), "floor": floor()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each paired comparison")
    ap.add_argument("--quick", action="store_true", help="3 repetitions, a 100 MB synthetic log, 500 long-run compiles")
    ap.add_argument("--out", default=str(RESULTS / "results.md"), help="where to write the Markdown table")
    ap.add_argument("--table-from", metavar="JSON", help="only print the tables of an earlier run's results.json")
    ap.add_argument("--only", choices=("zero-cost",), help="run one section alone, and print its table")
    args = ap.parse_args()
    if args.table_from:
        print(table(json.loads(Path(args.table_from).read_text())))
        return 0
    if args.only == "zero-cost":
        from bench.cost.zero_cost import table as zero_cost_table

        section = zero_cost_section(args.reps)
        (RESULTS / "zero_cost_results.json").write_text(json.dumps(section, indent=1))
        print(f"Measured with `python -m bench.cost.run --only zero-cost --reps {args.reps}`, torch {_torch()}.\n")
        print(zero_cost_table(section))
        return 0
    reps = min(args.reps, 3) if args.quick else args.reps
    big_mb = 100 if args.quick else 300
    long_n = 500 if args.quick else 2000
    results: dict[str, Any] = {"long_compiles": long_n}
    with tempfile.TemporaryDirectory(prefix="torch-otel-bench-") as d:
        tmp = Path(d)
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / "torch-otel-bench-inductor"))
        results["compile"] = compile_overhead(reps, ["mlp", "transformer", "inductor"])
        results["in_process"] = in_process()
        results["replay"] = replay(tmp, reps, big_mb)
        results["export"] = export_cost(tmp)
        results["long"] = long_runs(long_n)
        results["zero_cost"] = zero_cost_section(reps)
    text = table(results)
    header = (
        f"Measured with `python -m bench.cost.run{' --quick' if args.quick else ''}` ({reps} repetitions), torch {_torch()}.\n\n"
    )
    Path(args.out).write_text(header + text)
    (Path(args.out).with_suffix(".json")).write_text(json.dumps(results, indent=1))
    print(header + text)
    return 0


def _torch() -> str:
    from importlib.metadata import version

    return version("torch")


if __name__ == "__main__":
    sys.exit(main())
