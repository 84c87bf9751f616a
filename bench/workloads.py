"""Benchmark workloads, run one per process by bench/run.py.

``python bench/workloads.py WORKLOAD CONFIG`` prints one JSON line with what it measured.

WORKLOAD: ``mlp`` (compile-heavy: an MLP with aot_eager, forward and backward, 24 shape
recompiles, automatic dynamic shapes off), ``transformer`` (a small encoder with aot_eager,
trained a few steps at two sequence lengths), ``inductor`` (an MLP with inductor on the warm
TORCHINDUCTOR_CACHE_DIR), ``alternate`` (the bridge switched on and off in one process around
blocks of compiles), ``steady`` (time per training step after compilation, bridge on and off),
``long`` (RSS and live objects over many frame compiles).

CONFIG: ``none``, ``default``, ``full`` (torch-otel capture levels, spans exported as OTLP-JSON to
a temporary file and metrics on the Prometheus registry), or ``trace`` (TORCH_TRACE, set by the
caller; no bridge). ``otlp`` (long runs): the bridge exporting to OTEL_EXPORTER_OTLP_ENDPOINT.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import tempfile
import time

WORKLOAD, CONFIG = sys.argv[1], sys.argv[2]
T0_WALL, T0_CPU = time.perf_counter(), time.process_time()

import torch  # noqa: E402
import torch._dynamo.utils as du  # noqa: E402

du.set_compilation_metrics_limit(100_000)
torch.manual_seed(0)


def bridge_on(capture: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import torch_otel
    from torch_otel._file_exporter import OTLPJsonFileSpanExporter

    global _provider
    if "_provider" not in globals():
        out = os.path.join(tempfile.mkdtemp(prefix="torch-otel-bench-"), "spans.jsonl")
        _provider = TracerProvider()
        _provider.add_span_processor(BatchSpanProcessor(_TimedExport(OTLPJsonFileSpanExporter(out))))
    torch_otel.instrument(_provider, capture=capture)


EXPORT_CPU = {"s": 0.0}  # CPU the batch processor's thread spends exporting (outside the hooks)


class _TimedExport:
    """The span exporter, with the CPU its ``export`` takes on the exporting thread added up."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner = inner

    def export(self, spans):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        try:
            return self.inner.export(spans)
        finally:
            EXPORT_CPU["s"] += time.thread_time() - t

    def shutdown(self):  # type: ignore[no-untyped-def]
        return self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):  # type: ignore[no-untyped-def]
        return self.inner.force_flush(timeout_millis)


if CONFIG in ("default", "full"):
    bridge_on(CONFIG)
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


def _self_timer() -> dict[str, float]:
    """Wraps the bridge's handlers (what each hook does besides calling torch's original) to add up their time."""
    from torch_otel import _live

    spent = {"s": 0.0}
    for name in ("_on_chromium", "_on_metrics", "_on_graph_break"):  # our side only, not torch's own logging
        orig = getattr(_live.LiveCapture, name)

        def timed(self, *a, _orig=orig, **k):  # type: ignore[no-untyped-def]
            t = time.thread_time()
            try:
                return _orig(self, *a, **k)
            finally:
                spent["s"] += time.thread_time() - t

        setattr(_live.LiveCapture, name, timed)
    return spent


def run_alternate(pairs: int = 12, per_block: int = 6) -> dict[str, object]:
    import torch_otel

    spent = _self_timer()
    cpu_blocks: list[tuple[str, float]] = []
    torch_blocks: list[tuple[str, float]] = []
    compile_once(-1)  # warm up
    on_compiles = 0
    for state in _abba(pairs):
        if state == "on":
            bridge_on("default")
        seen = len(du.get_compilation_metrics())
        cpu = statistics.median(compile_once(i) for i in range(per_block))
        frames = [m.entire_frame_compile_time_s or 0 for m in du.get_compilation_metrics()[seen:]]
        cpu_blocks.append((state, cpu))
        torch_blocks.append((state, statistics.median(frames)))
        on_compiles += per_block if state == "on" else 0
        if state == "on":
            _provider.force_flush()  # this block's spans are exported (and timed) now
        torch_otel.uninstrument()
    med = {st: statistics.median(v for s, v in cpu_blocks if s == st) for st in ("off", "on")}
    tmed = {st: statistics.median(v for s, v in torch_blocks if s == st) for st in ("off", "on")}
    return {
        "cpu_per_compile_s": med,
        "cpu_ratio": _paired_ratios(cpu_blocks),
        "torch_per_compile_s": tmed,
        "torch_ratio": _paired_ratios(torch_blocks),
        "bridge_self_s_per_compile": spent["s"] / max(on_compiles, 1),
        "bridge_export_s_per_compile": EXPORT_CPU["s"] / max(on_compiles, 1),
        "compiles": 2 * pairs * per_block,
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
print(json.dumps(result), flush=True)
