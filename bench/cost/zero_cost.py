"""Zero cost until torch compiles, and what it costs when it does: start-up rows and a compile loop exporting to rotel.

    python -m bench.cost.run --only zero-cost [--reps N]     # these rows alone (they are also part of a whole run)
    python -m bench.cost.zero_cost loop CONFIG               # one compile-loop process (run by the above)

1. Start-up, paired and alternating, each pair against plain Python (an A/A row beside):
   - a Python process that never imports torch, under ``torch-otel run`` (wall and peak RSS);
   - a process that imports torch and never compiles, under ``torch-otel run`` and with ``import torch_otel.auto``.
2. A compile-heavy loop (24 ``aot_eager`` recompiles of an MLP, forward and backward), one fresh process per
   configuration, in rotated order: none, the bridge at default and at full capture turned on by
   ``import torch_otel.auto`` and exporting spans and metrics over OTLP/gRPC to a real rotel on loopback, and
   ``TORCH_TRACE``. CPU is counted over every thread of the process (``/proc/self/task/*/schedstat``, which
   also sees gRPC's native threads), from after the warm-up compile to after ``torch_otel.force_flush()`` has
   exported every span. Each thread's share is reported by name: that is the direct measure the ratio is
   reconciled with.

Public tools only. Nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import ROOT

HERE = Path(__file__).resolve().parent
PY = sys.executable
BIN = Path(PY).parent


def thread_cpu() -> dict[int, tuple[str, int]]:
    """Every thread of this process: ``{tid: (name, CPU ns so far)}``, native threads included.

    A Python thread's name is its ``threading`` name (the kernel's is just ``python``).
    """
    import threading

    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                ns = int(fh.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as fh:
                name = fh.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (names.get(int(tid), name), ns)
    return out


def _group(name: str, tid: int) -> str:
    """Threads by what runs on them (Linux truncates names to 15 characters)."""
    if tid == os.getpid():
        return "main thread (torch, and the bridge's hooks)"
    if name.startswith("torch-otel-live"):
        return "the bridge's worker thread"
    if name.startswith("OtelBatchSpan"):
        return "the SDK's span batch thread (OTLP export)"
    if name.startswith("OtelPeriodicExp"):
        return "the SDK's metric reader thread"
    if name in ("event_engine", "lifeguard") or name.startswith(("grpc", "default-executo", "resolver-execu", "timer_manager")):
        return "gRPC's native threads"
    return "torch's native threads (autograd, intra-op pool)" if name == "python" else f"other ({name})"


HOOKS = {"cpu": 0.0, "gc": 0.0}  # CPU the bridge's hooks took on torch's path (the main thread), over the window
_IN_GC = {"cpu": 0.0, "since": 0.0}  # this thread's CPU in garbage collections so far, and when the current one began


def _time_the_hooks() -> None:
    """Add each hook's ``thread_time`` to ``HOOKS``: the bridge's share of the main thread.

    A garbage collection that an allocation inside a hook happens to start (a full one walks torch's whole heap: 0.2 s
    in this loop) is not the hook's work: it is counted apart, in ``HOOKS["gc"]``, and left out of the hooks' figure.
    """
    import gc
    import importlib
    import threading

    try:
        _live = importlib.import_module("torch_otel._capture.live_capture")
        graph_calls: Any = importlib.import_module("torch_otel._features.graph_calls.state").GraphCallsState
    except ImportError:  # a tree from before issue 50 (bench/cost/versions.py times one): its live capture held them all
        _live = importlib.import_module("torch_otel._capture.live")
        graph_calls = _live.LiveCapture

    main = threading.main_thread().ident

    def in_gc(phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() == main:
            if phase == "start":
                _IN_GC["since"] = time.thread_time()
            else:
                _IN_GC["cpu"] += time.thread_time() - _IN_GC["since"]

    gc.callbacks.append(in_gc)

    def timed(fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t, g = time.thread_time(), _IN_GC["cpu"]
            try:
                return fn(*a, **k)
            finally:
                collected = _IN_GC["cpu"] - g if threading.get_ident() == main else 0.0
                HOOKS["cpu"] += time.thread_time() - t - collected
                HOOKS["gc"] += collected

        return wrapper

    for name in ("_on_chromium", "_on_metrics", "_on_graph_break", "_on_reasons"):
        setattr(_live.LiveCapture, name, timed(getattr(_live.LiveCapture, name)))
    for name in ("_graph_installed", "_backward_compiler_made"):  # graph calls' own hooks (off at default capture)
        setattr(graph_calls, name, timed(getattr(graph_calls, name)))
    _live._TraceHandler.handle = timed(_live._TraceHandler.handle)  # type: ignore[method-assign]


def compiled_mlp() -> Any:
    """The loop's model: an MLP under ``torch.compile(backend="aot_eager")``, each new batch size a recompile."""
    import torch

    torch.manual_seed(0)
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 10_000
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    return torch.compile(mlp, backend="aot_eager")


def run_loop(config: str) -> dict[str, Any]:
    """One process: warm-up compile, then the measured loop; CPU per thread group over the window."""
    if config in ("default", "full"):
        import torch_otel.auto  # noqa: F401  - armed when torch.compile imports torch._dynamo

        _time_the_hooks()
    import torch

    cm = compiled_mlp()
    cm(torch.randn(1, 64)).sum().backward()  # the warm-up compile
    before, t0, w0 = thread_cpu(), time.process_time(), time.perf_counter()
    HOOKS["cpu"] = HOOKS["gc"] = 0.0
    for n in range(2, 26):  # 24 recompiles, forward and backward
        cm(torch.randn(n, 64)).sum().backward()
    if config in ("default", "full"):
        import torch_otel

        torch_otel.force_flush(60_000)  # every compile's spans built and exported: inside the window
    after, t1, w1 = thread_cpu(), time.process_time(), time.perf_counter()
    groups: dict[str, float] = {}
    for tid, (name, ns) in after.items():
        spent = (ns - before.get(tid, (name, 0))[1]) / 1e9
        if spent > 0:
            groups[_group(name, tid)] = groups.get(_group(name, tid), 0.0) + spent
    if HOOKS["cpu"]:
        groups["the bridge's hooks (inside the main thread's figure)"] = HOOKS["cpu"]
    if HOOKS["gc"]:
        groups["garbage collections begun inside the hooks (torch's heap; in the main thread's figure)"] = HOOKS["gc"]
    return {"cpu_s": t1 - t0, "wall_s": w1 - w0, "threads": groups}


def sdk_floor() -> dict[str, Any]:
    """What the OpenTelemetry SDK alone costs per compile root of the loop: its spans and histogram records.

    One process: the loop runs once under the bridge (default capture) with a counting span processor and
    a count of histogram observations, then the same SDK calls are timed alone (``thread_time``): starting
    and ending a child span through an SDK tracer with a batch processor and a no-op exporter, and one
    histogram record with an exemplar context, as the bridge makes them.
    """
    os.environ["OTEL_TRACES_EXPORTER"] = os.environ["OTEL_METRICS_EXPORTER"] = "none"
    from opentelemetry import trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import torch_otel.auto  # noqa: F401
    from torch_otel._sinks import otel_metrics as _metrics
    from torch_otel._sinks import store as _store

    class Count(SpanProcessor):
        spans = roots = 0

        def on_end(self, span: Any) -> None:
            Count.spans += 1
            Count.roots += span.parent is None

    provider = TracerProvider()
    provider.add_span_processor(Count())
    trace.set_tracer_provider(provider)
    histograms = {"n": 0}
    apply_all = _store.SeriesStore.apply_all

    def counted(self: Any, observations: Any) -> None:
        histograms["n"] += sum(self.series[ob[0]].instrument == "histogram" for ob in observations)
        apply_all(self, observations)

    _store.SeriesStore.apply_all = counted  # type: ignore[method-assign]
    import torch

    import torch_otel

    cm = compiled_mlp()
    for n in range(1, 26):
        cm(torch.randn(n, 64)).sum().backward()
    torch_otel.force_flush(60_000)
    roots = max(Count.roots, 1)

    class Nothing(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    timed = TracerProvider()
    timed.add_span_processor(BatchSpanProcessor(Nothing()))
    tracer = timed.get_tracer("floor")
    root = tracer.start_span("root")
    ctx = trace.set_span_in_context(root)
    attrs = {"torch.compile.cache_state": "miss", "torch.compile.key": "k" * 52}
    n = 5000
    t = time.thread_time()
    for _ in range(n):
        tracer.start_span("phase", context=ctx, attributes=attrs, start_time=1).end(end_time=2)
    span_us = (time.thread_time() - t) / n * 1e6
    hist = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("floor").create_histogram("h")
    ex = _metrics._span_context((root.get_span_context().trace_id, root.get_span_context().span_id))
    labels = {"rank": "0", "phase": "backend_compile"}
    t = time.thread_time()
    for _ in range(n):
        hist.record(0.5, labels, context=ex)
    hist_us = (time.thread_time() - t) / n * 1e6
    return {
        "roots": roots,
        "spans_per_root": Count.spans / roots,
        "histograms_per_root": histograms["n"] / roots,
        "span_us": span_us,
        "histogram_us": hist_us,
    }


def _pairs(a: list[str], b: list[str], reps: int, a_env: dict[str, str]) -> dict[str, list[float]]:
    """A and B in turn (ABBA), each a fresh process; A alone gets ``a_env``."""
    from bench.cost.measure import child

    out: dict[str, list[float]] = {"wall_a": [], "wall_b": [], "rss_a": [], "rss_b": []}
    child(a, a_env)  # warm the page cache, and write the bytecode caches
    child(b)
    for i in range(reps):
        for which in "ab" if i % 2 == 0 else "ba":
            wall, _, rss, _ = child(a if which == "a" else b, a_env if which == "a" else None)
            out[f"wall_{which}"].append(wall)
            out[f"rss_{which}"].append(rss)
    return out


def startup(reps: int) -> list[dict[str, Any]]:
    run = [str(BIN / "torch-otel"), "run", "--"]
    plain, torch_only = [PY, "-c", "pass"], [PY, "-c", "import torch"]
    # What `torch-otel run` gives every Python process it starts: its sitecustomize first on PYTHONPATH.
    under = {"PYTHONPATH": str(ROOT / "torch_otel" / "_autostart")}
    auto_first = [PY, "-c", "import torch_otel.auto, torch"]
    cases: list[tuple[str, list[str], list[str], dict[str, str]]] = [
        ("never imports torch: `python -c pass`, A/A", plain, plain, {}),
        ("never imports torch: each Python process under `torch-otel run`", plain, plain, under),
        ("never imports torch: the whole `torch-otel run -- python -c pass` (its launcher once)", run + plain, plain, {}),
        ("imports torch, never compiles: `import torch`, A/A", torch_only, torch_only, {}),
        ("imports torch, never compiles: each process under `torch-otel run`", torch_only, torch_only, under),
        ("imports torch, never compiles: `import torch_otel.auto` first", auto_first, torch_only, {}),
    ]
    rows = []
    for label, a, b, a_env in cases:
        p = _pairs(a, b, reps, a_env)
        rows.append(
            {
                "case": label,
                "wall_added_ms": [(x - y) * 1e3 for x, y in zip(p["wall_a"], p["wall_b"], strict=True)],
                "wall_base_ms": statistics.median(p["wall_b"]) * 1e3,
                "rss_added_mb": [x - y for x, y in zip(p["rss_a"], p["rss_b"], strict=True)],
                "rss_base_mb": statistics.median(p["rss_b"]),
            }
        )
        print(f"start-up: {label} done", file=sys.stderr, flush=True)
    return rows


LOOP_CONFIGS = ("none", "none (A/A)", "default", "full", "trace")


def compile_loop(reps: int) -> dict[str, list[dict[str, Any]]]:
    import tempfile

    from bench.cost.measure import child
    from tests.servers import Rotel

    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in LOOP_CONFIGS}
    with Rotel(debug=False) as rotel:
        otlp = {"OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint, "OTEL_SERVICE_NAME": "bench"}
        for rep in range(reps):
            k = rep % len(LOOP_CONFIGS)
            for cfg in LOOP_CONFIGS[k:] + LOOP_CONFIGS[:k]:
                with tempfile.TemporaryDirectory() as trace_dir:
                    env = dict(otlp)
                    if cfg == "trace":
                        env["TORCH_TRACE"] = trace_dir
                    if cfg in ("default", "full"):
                        env["TORCH_OTEL_CAPTURE"] = cfg
                    mode = "none" if cfg.startswith("none") else cfg
                    _, _, _, out = child([PY, "-m", "bench.cost.zero_cost", "loop", mode], env)
                runs[cfg].append(json.loads(out.strip().splitlines()[-1]))
            print(f"compile loop: repetition {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    return runs


def table(results: dict[str, Any]) -> str:
    from bench.cost.measure import spread

    lines = [
        "### Zero cost until torch compiles: start-up (paired, alternating; added over plain Python, median [min, max])",
        "",
        "| case | plain Python | added wall | added peak RSS |",
        "|---|---|---|---|",
    ]
    for r in results["startup"]:
        lines.append(
            f"| {r['case']} | {r['wall_base_ms']:.0f} ms, {r['rss_base_mb']:.1f} MB | "
            f"{spread(r['wall_added_ms'], '{:+.1f}')} ms | {spread(r['rss_added_mb'], '{:+.1f}')} MB |"
        )
    runs = results["loop"]
    none = runs["none"]
    lines += [
        "",
        "### A compile-heavy loop exporting to rotel over OTLP/gRPC (CPU of every thread from after the warm-up compile)",
        "",
        "24 `aot_eager` recompiles of an MLP, forward and backward; the bridge turned on by `import torch_otel.auto`; "
        "the window ends after `torch_otel.force_flush()` has exported every span. Ratios are paired per repetition.",
        "",
        "| config | CPU s | vs none | vs TORCH_TRACE |",
        "|---|---|---|---|",
    ]
    for cfg in LOOP_CONFIGS:
        cpu = [r["cpu_s"] for r in runs[cfg]]
        vs_none = [a / b["cpu_s"] for a, b in zip(cpu, none, strict=True)]
        vs_trace = [a / b["cpu_s"] for a, b in zip(cpu, runs["trace"], strict=True)]
        lines.append(f"| {cfg} | {statistics.median(cpu):.2f} | {spread(vs_none)} | {spread(vs_trace)} |")
    groups = sorted({g for cfg in LOOP_CONFIGS for r in runs[cfg] for g in r["threads"]})
    lines += ["", "CPU by thread over the same window (median seconds):", ""]
    lines += ["| thread | " + " | ".join(LOOP_CONFIGS) + " |", "|---|" + "---|" * len(LOOP_CONFIGS)]
    for g in groups:
        cells = [f"{statistics.median(r['threads'].get(g, 0.0) for r in runs[cfg]):.3f}" for cfg in LOOP_CONFIGS]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    base = statistics.median(r["cpu_s"] for r in none)
    lines += ["", "The bridge's share, measured directly (its threads and its hooks; median of each repetition's sum):", ""]
    lines += ["| config | bridge CPU s | of none's CPU |", "|---|---|---|"]
    for cfg in ("default", "full"):
        share = statistics.median(sum(v for g, v in r["threads"].items() if g in BRIDGE_GROUPS) for r in runs[cfg])
        lines.append(f"| {cfg} | {share:.3f} | {share / base:.1%} |")
    f = results.get("floor")
    if f:
        per_root = f["spans_per_root"] * f["span_us"] + f["histograms_per_root"] * f["histogram_us"]
        roots = f["roots"] - 2  # the loop's window leaves out the warm-up compile (forward and backward)
        lines += [
            "",
            f"The OpenTelemetry SDK's floor, timed alone: {f['span_us']:.0f} µs per span (started and ended, batch "
            f"processor), {f['histogram_us']:.0f} µs per histogram record with an exemplar. The loop makes "
            f"{f['spans_per_root']:.1f} spans and {f['histograms_per_root']:.1f} histogram records per compile root "
            f"({f['roots']} roots), so the SDK alone takes {per_root / 1000:.2f} ms per root: "
            f"{per_root * roots / 1e6:.3f} s over the window, {per_root * roots / 1e6 / base:.1%} of none's CPU.",
        ]
    return "\n".join(lines) + "\n"


# What the bridge adds, by thread: its worker, its hooks on torch's thread, and the SDK and gRPC threads it started.
BRIDGE_GROUPS = (
    "the bridge's worker thread",
    "the bridge's hooks (inside the main thread's figure)",
    "the SDK's span batch thread (OTLP export)",
    "the SDK's metric reader thread",
    "gRPC's native threads",
)


def main() -> int:
    if sys.argv[1:] == ["floor"]:
        print(json.dumps(sdk_floor()), flush=True)
        return 0
    if sys.argv[1:2] != ["loop"] or len(sys.argv) != 3:
        sys.exit(
            "usage: python -m bench.cost.zero_cost loop none|default|full|trace | floor"
            " (python -m bench.cost.run --only zero-cost runs them all)"
        )
    print(json.dumps(run_loop(sys.argv[2])), flush=True)
    return 0


def floor() -> dict[str, Any]:
    from bench.cost.measure import child

    _, _, _, out = child([PY, "-m", "bench.cost.zero_cost", "floor"])
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
