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
        _provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileSpanExporter(out)))
    torch_otel.instrument(_provider, capture=capture)


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


def run_alternate(blocks: int = 12, per_block: int = 8) -> dict[str, object]:
    import torch_otel

    times: dict[str, list[float]] = {"off": [], "on": []}
    torch_times: dict[str, list[float]] = {"off": [], "on": []}
    compile_once(-1)  # warm up
    for b in range(blocks):
        state = "on" if b % 2 else "off"
        if state == "on":
            bridge_on("default")
        for i in range(per_block):
            seen = len(du.get_compilation_metrics())
            times[state].append(compile_once(i))
            torch_times[state].extend(m.entire_frame_compile_time_s or 0 for m in du.get_compilation_metrics()[seen:])
        torch_otel.uninstrument()
    med = {s: statistics.median(v) for s, v in times.items()}
    tmed = {s: statistics.median(v) for s, v in torch_times.items()}
    return {"cpu_per_compile_s": med, "torch_per_compile_s": tmed, "compiles": sum(len(v) for v in times.values())}


def run_steady(blocks: int = 10, steps: int = 300) -> dict[str, object]:
    import torch_otel

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cm = torch.compile(model, backend="aot_eager")
    x = torch.randn(32, 64)

    def step() -> None:
        opt.zero_grad()
        cm(x).sum().backward()
        opt.step()

    for _ in range(20):
        step()  # compiled, warm
    per_step: dict[str, list[float]] = {"off": [], "on": []}
    for b in range(blocks):
        state = "on" if b % 2 else "off"
        if state == "on":
            bridge_on("default")
        t = time.perf_counter()
        for _ in range(steps):
            step()
        per_step[state].append((time.perf_counter() - t) / steps)
        torch_otel.uninstrument()
    return {"step_s": {s: statistics.median(v) for s, v in per_step.items()}}


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
