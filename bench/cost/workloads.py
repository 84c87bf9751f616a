"""Benchmark workloads, run one per process by bench/cost/run.py.

``python -m bench.cost.workloads WORKLOAD CONFIG`` prints one JSON line with what it measured.

WORKLOAD: ``mlp`` (compile-heavy: an MLP with aot_eager, forward and backward, 24 shape
recompiles, automatic dynamic shapes off), ``transformer`` (a small encoder with aot_eager,
trained a few steps at two sequence lengths), ``inductor`` (an MLP with inductor on the warm
TORCHINDUCTOR_CACHE_DIR), ``alternate`` (in one process, blocks of compiles with nothing, the bridge
at default and full capture, and torch's own TORCH_TRACE handler, rotated), ``steady`` (time per training step after compilation, bridge on and off),
``long`` (RSS and live objects over many frame compiles).

CONFIG: ``none``, ``default``, ``full`` (torch-otel capture levels, spans exported as OTLP-JSON to
a temporary file and metrics on the Prometheus registry), ``imports`` (the same imports and tracer
provider, never instrumented), or ``trace`` (TORCH_TRACE, set by the caller; no bridge). ``otlp`` (long runs): the bridge exporting to OTEL_EXPORTER_OTLP_ENDPOINT.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time

WORKLOAD, CONFIG = sys.argv[1], sys.argv[2]
T0_WALL, T0_CPU = time.perf_counter(), time.process_time()

import torch  # noqa: E402
import torch._dynamo.utils as du  # noqa: E402

du.set_compilation_metrics_limit(100_000)
torch.manual_seed(0)


def bridge_on(capture: str, instrument: bool = True) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import torch_otel
    from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter

    global _provider
    if "_provider" not in globals():
        out = os.path.join(tempfile.mkdtemp(prefix="torch-otel-bench-"), "spans.jsonl")
        _provider = TracerProvider()
        _provider.add_span_processor(BatchSpanProcessor(_TimedExport(OTLPJsonFileSpanExporter(out))))
    if instrument:
        torch_otel.instrument(_provider, capture=capture)


STATES = ("off", "default", "full", "trace")
NOW = {"state": "off"}  # the state the bridge's (or torch's trace handler's) CPU is added to
# Per state, what it adds to torch: the bridge's hooks on torch's path (or torch's trace file handler), the
# batches of its worker thread, the spans it exports; collections of torch's heap apart (see ``_timed``).
SPENT = {st: {"hooks": 0.0, "batches": 0.0, "export": 0.0, "gc": 0.0} for st in STATES}
GC_CPU: dict[int, float] = {}  # per thread: CPU in garbage collections so far
_gc_start: dict[int, float] = {}


def _on_gc(phase: str, info: dict[str, int]) -> None:
    tid = threading.get_ident()
    if phase == "start":
        _gc_start[tid] = time.thread_time()
    else:
        GC_CPU[tid] = GC_CPU.get(tid, 0.0) + time.thread_time() - _gc_start.pop(tid, time.thread_time())


gc.callbacks.append(_on_gc)


def _timed(fn, add):  # type: ignore[no-untyped-def]
    """``fn``, with its CPU on its own thread passed to ``add(cpu, gc)``: a garbage collection of torch's heap
    that happens to start inside it is counted apart (it would have run a little later anyway)."""

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        tid = threading.get_ident()
        t, g = time.thread_time(), GC_CPU.get(tid, 0.0)
        try:
            return fn(*a, **k)
        finally:
            collected = GC_CPU.get(tid, 0.0) - g
            add(time.thread_time() - t - collected, collected)

    return timed


def _adder(key: str):  # type: ignore[no-untyped-def]
    """Adds a ``_timed`` measure to ``SPENT`` under the current state."""

    def add(cpu: float, collected: float) -> None:
        SPENT[NOW["state"]][key] += cpu
        SPENT[NOW["state"]]["gc"] += collected

    return add


class _TimedExport:
    """The span exporter, with the CPU its ``export`` takes on the exporting thread added up."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner = inner

    def export(self, spans):  # type: ignore[no-untyped-def]
        return _timed(self.inner.export, _adder("export"))(spans)

    def shutdown(self):  # type: ignore[no-untyped-def]
        return self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):  # type: ignore[no-untyped-def]
        return self.inner.force_flush(timeout_millis)


if CONFIG in ("default", "full"):
    bridge_on(CONFIG)
elif CONFIG == "imports":
    bridge_on("default", instrument=False)  # the same imports and provider, no instrumentation: a fixed cost
elif CONFIG == "otlp":
    import torch_otel.auto  # noqa: F401


def mlp(width: int = 64) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(width, 128), torch.nn.ReLU(), torch.nn.Linear(128, width))


def run_mlp() -> None:
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 10_000
    cm = torch.compile(mlp(), backend="aot_eager")
    for n in range(1, 25):
        cm(torch.randn(n, 64)).sum().backward()


def run_transformer() -> None:
    torch._dynamo.config.automatic_dynamic_shapes = False
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cm = torch.compile(model, backend="aot_eager")
    for seq in (16, 32):
        for _ in range(3):
            opt.zero_grad()
            cm(torch.randn(4, seq, 64)).pow(2).mean().backward()
            opt.step()


def run_inductor() -> None:
    cm = torch.compile(mlp(), backend="inductor")
    for n in (8, 16):
        cm(torch.randn(n, 64)).sum().backward()


def compile_once(i: int) -> float:
    """One fresh frame compile (forward and backward); its CPU seconds."""
    torch._dynamo.reset()
    m = mlp()
    t = time.process_time()
    torch.compile(m, backend="aot_eager")(torch.randn(8, 64)).sum().backward()
    return time.process_time() - t


def _abba(n_pairs: int) -> list[str]:
    """off/on in ABBA order: a slow drift of the machine weighs on both states alike."""
    order: list[str] = []
    for i in range(n_pairs):
        order += ["off", "on"] if i % 2 == 0 else ["on", "off"]
    return order


def _paired_ratios(blocks: list[tuple[str, float]]) -> list[float]:
    pairs = [blocks[i : i + 2] for i in range(0, len(blocks) - 1, 2)]
    return [dict(p)["on"] / dict(p)["off"] for p in pairs]


def _time_the_bridge() -> None:
    """Wraps the bridge's hooks and its worker thread's batches (and ``_TorchTrace``) with ``_timed``."""
    from torch_otel._capture import live_capture as _live

    # Our side only, not torch's own logging. A trace handler is timed from ``handle`` (its lock included),
    # ours and torch's alike.
    for name in ("_on_chromium", "_on_metrics", "_on_graph_break"):
        setattr(_live.LiveCapture, name, _timed(getattr(_live.LiveCapture, name), _adder("hooks")))
    _live._TraceHandler.handle = _timed(_live._TraceHandler.handle, _adder("hooks"))
    _live.LiveCapture.drain = _timed(_live.LiveCapture.drain, _adder("batches"))
    _TorchTrace.handle = _timed(_TorchTrace.handle, _adder("hooks"))


class _TorchTrace:
    """What TORCH_TRACE installs, switched on and off in-process: torch's own trace handler and formatter."""

    def __init__(self) -> None:
        from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter

        self.handler = LazyTraceHandler(tempfile.mkdtemp(prefix="torch-otel-bench-trace-"))
        self.handler.setFormatter(TorchLogsFormatter(trace=True))

    def handle(self, record):  # type: ignore[no-untyped-def]
        return type(self.handler).handle(self.handler, record)

    def on(self) -> None:
        import logging

        self.handler.handle = self.handle  # timed (see _self_timer)
        logging.getLogger("torch.__trace").addHandler(self.handler)

    def off(self) -> None:
        import logging

        logging.getLogger("torch.__trace").removeHandler(self.handler)


def run_alternate(rounds: int = 12, per_block: int = 6) -> dict[str, object]:
    """Blocks of compiles in four states, rotated each round (a drift of the machine weighs on all alike)."""
    import torch_otel

    _time_the_bridge()
    trace = _TorchTrace()
    cpu: dict[str, list[float]] = {st: [] for st in STATES}
    frame: dict[str, list[float]] = {st: [] for st in STATES}
    compile_once(-1)  # warm up
    for r in range(rounds):
        order = list(STATES[r % 4 :] + STATES[: r % 4])
        for state in order[::-1] if r % 8 >= 4 else order:
            NOW["state"] = state
            if state in ("default", "full"):
                bridge_on(state)
            elif state == "trace":
                trace.on()
            seen = len(du.get_compilation_metrics())
            cpu[state].append(statistics.median(compile_once(i) for i in range(per_block)))
            frame[state].append(
                statistics.median(m.entire_frame_compile_time_s or 0 for m in du.get_compilation_metrics()[seen:])
            )
            if state in ("default", "full"):
                torch_otel.force_flush()  # this block's compiles are processed and exported (and timed) now
                torch_otel.uninstrument()
            trace.off()
    n = rounds * per_block
    return {
        "states": list(STATES),
        "cpu_per_compile_s": {st: statistics.median(v) for st, v in cpu.items()},
        "cpu_blocks": cpu,
        "torch_per_compile_s": {st: statistics.median(v) for st, v in frame.items()},
        "torch_blocks": frame,
        "added_s_per_compile": {st: {k: v / n for k, v in parts.items()} for st, parts in SPENT.items()},
        "compiles": len(STATES) * n,
    }


def run_steady(pairs: int = 16, steps: int = 300) -> dict[str, object]:
    import torch_otel

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cm = torch.compile(model, backend="aot_eager")
    x = torch.randn(32, 64)

    def step() -> None:
        opt.zero_grad()
        cm(x).sum().backward()
        opt.step()

    for _ in range(50):
        step()  # compiled, warm
    blocks: list[tuple[str, float]] = []
    for state in _abba(pairs):
        if state == "on":
            bridge_on("default")
        t = time.perf_counter()
        for _ in range(steps):
            step()
        blocks.append((state, (time.perf_counter() - t) / steps))
        torch_otel.uninstrument()
    return {
        "step_s": {st: statistics.median(v for s, v in blocks if s == st) for st in ("off", "on")},
        "step_ratio": _paired_ratios(blocks),
    }


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def run_long(n: int = 2000) -> dict[str, object]:
    samples = {}
    f = torch.compile(lambda x: x.sin() + 1, backend="eager")
    for i in range(1, n + 1):
        torch._dynamo.reset()
        f = torch.compile(lambda x: x.sin() + 1, backend="eager")
        f(torch.randn(4))
        if i in (200, n // 2, n):
            gc.collect()
            samples[i] = {"rss_mb": rss_mb(), "objects": len(gc.get_objects())}
    return {"samples": samples}


result: dict[str, object] = {}
direct = False
if WORKLOAD in ("mlp", "transformer", "inductor") and CONFIG in ("default", "full", "trace"):
    # What this configuration adds, measured directly as in ``alternate``: the whole-process ratios are noisier.
    NOW["state"] = CONFIG
    direct = True
    if CONFIG != "trace":
        _time_the_bridge()
    else:  # torch's handler only: importing the bridge here would add its start-up to this row
        from torch._logging import _internal as torch_logging

        handler = torch_logging.LOG_TRACE_HANDLER  # what TORCH_TRACE installed at import
        if handler is not None:
            handler.handle = _timed(handler.handle, _adder("hooks"))  # type: ignore[method-assign]
if WORKLOAD == "mlp":
    run_mlp()
elif WORKLOAD == "transformer":
    run_transformer()
elif WORKLOAD == "inductor":
    run_inductor()
elif WORKLOAD == "alternate":
    result = run_alternate()
elif WORKLOAD == "steady":
    result = run_steady()
elif WORKLOAD == "long":
    result = run_long(int(os.environ.get("BENCH_LONG_COMPILES", "2000")))
else:
    sys.exit(f"unknown workload {WORKLOAD!r}")

metrics = du.get_compilation_metrics()
result.update(
    {
        "compiles": result.get("compiles", len(metrics)),
        "torch_compile_s": sum(m.entire_frame_compile_time_s or 0 for m in metrics),
        "structured_logging_overhead_s": sum(m.structured_logging_overhead_s or 0 for m in metrics),
        "wall_s": time.perf_counter() - T0_WALL,
        "cpu_s": time.process_time() - T0_CPU,
    }
)
if CONFIG in ("default", "full", "otlp"):
    import torch_otel

    torch_otel.shutdown()
if direct:
    result["added_s"] = SPENT[CONFIG]
print(json.dumps(result), flush=True)
