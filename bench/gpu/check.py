"""Live capture on a CUDA GPU, checked against torch's own record of the same processes: one prepared run.

    python -m bench.gpu.check OUT                 # every workload, then the checks; the report in OUT
    python -m bench.gpu.check --compare OUT       # the checks again, from what a run left in OUT (e.g. at home, on CPU)
    python -m bench.gpu.check --compare --test-data tests/data/gpu-h200 OUT   # and tests/test_gpu.py's data from it
    python -m bench.gpu.check --deadline 360 OUT  # end the workloads by 360 s (a partial report, not none)
    python -m bench.gpu.check --only transformer_full,cudagraphs_full OUT

Each workload runs in a process of its own (``--worker``), in this order:

1. ``transformer_full``: a 2-layer transformer's training step under inductor, ``mode="max-autotune-no-cudagraphs"``
   (each GEMM's template autotuning limited to 4 Triton configs, ``GPU_CHECK_MAX_MM_CONFIGS``), 3 steps, the bridge at full capture and ``TORCH_TRACE`` set;
2. ``cudagraphs_full``: an inference MLP under ``mode="reduce-overhead"`` (cudagraph trees) called 5 times with a
   batch of 8, 5 times with 16 (a recompile), 5 times with 8 again (the dynamic graph records that size anew),
   plus a function that mutates an input and one with a CPU tensor (torch skips cudagraphs for both: torch's
   ``cudagraph_skip_reason`` names the second, decided as it compiles; the first is decided at its first call); full capture,
   ``TORCH_TRACE`` set;
3. ``transformer_default``: the transformer at default capture, no ``TORCH_TRACE``: the compile's cost and the
   steady-state step time with the bridge;
4. ``transformer_off``: the same without torch-otel imported: the step time and compile time without it;
5. ``transformer_pair``: the transformer under inductor's default mode, its steady step timed in one process in
   blocks with the bridge instrumented and uninstrumented in turn.

Each worker writes, beside its spans (OTLP-JSON lines) and the bridge's Prometheus samples, what torch says in the
same process: ``get_compilation_metrics()`` (runtime records too), ``compile_times()``'s data, torch's counters,
the cudagraph trees' own count of recorded graphs, the device. The checks then compare them, and compare the live
spans with a replay of the ``TORCH_TRACE`` log (this checkout's reader) and with tlparse's compile ids. Without
CUDA (a dry run) the same workloads run on the CPU (inductor's default mode), and the GPU-only checks say
``skipped``. Nothing here asserts a time; each check says ``agree``, ``disagree``, ``absent`` (the bridge does not
report it) or ``skipped``, with the numbers.

OUT receives ``report.json``, ``report.md`` and tarballs of the raw files (the logs, spans, torch's records), at
most 8 files (what a GPU machine of this workplace gives back).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import ROOT
from torch_otel._core.categories import PHASE_FIELDS

HERE = Path(__file__).resolve().parent
WORKLOADS = ("transformer_full", "cudagraphs_full", "transformer_default", "transformer_off", "transformer_pair")
# Per-workload time caps (s): a stuck or slow workload leaves time for the others and for the report
CAPS = {
    "transformer_full": 240.0,
    "cudagraphs_full": 90.0,
    "transformer_default": 120.0,
    "transformer_off": 120.0,
    "transformer_pair": 120.0,
}
# The bridge-on and bridge-off transformers compile cold unless the first one's compile took longer than this: then
# both start from a copy of its inductor cache (warm: FX graph and autotune cache hits), so the run fits its time
MAX_MM_CONFIGS = int(os.environ.get("GPU_CHECK_MAX_MM_CONFIGS", "4"))  # 0: inductor's own number
COLD_IF_UNDER_S = float(os.environ.get("GPU_CHECK_COLD_IF_UNDER_S", "75"))
STEPS_TO_COMPILE = 3
# dynamo_timed keys whose chromium event carries another name (phase_name): compile_times() lists the key
ALIASES = {
    "_compile.compile_inner": "entire_frame_compile",
    "OutputGraph.call_user_compiler": "backend_compile",
    "compile_fx_inner": "inductor_compile",
    "GraphLowering.compile_to_module": "code_gen",
    "backward._backward_impl": "entire_backward_compile",
}
# CompilationMetrics fields -> the phase label named like each (docs/metrics.md), and the unit of the field: the
# package's table
FIELD_LABELS = PHASE_FIELDS


# --------------------------------------------------------------------------------------------------------------
# The worker: one workload in this process
# --------------------------------------------------------------------------------------------------------------


class HookMeter:
    """Counts the bridge's calls on torch's path (and their CPU, outermost calls only), in windows."""

    ENTRY = (
        "_record_chromium_event",
        "_log_compilation_event",
        "_recompilation_reasons",
        "_log_collective_schedule",
        "_dump_collective_schedule",
        "_create_debug_dir",
        "_on_trace_record",
        "_on_graph_break",
        "_on_warning",
        "_on_compiled_autograd_miss",
        "queue_events",
        "_on_chromium",
        "_on_metrics",
        "_on_reasons",
    )

    def __init__(self) -> None:
        self.calls: dict[str, int] = defaultdict(int)
        self.cpu_s = 0.0
        self.missing: list[str] = []
        self._tls = threading.local()

    def install(self) -> None:
        try:
            from torch_otel._capture import live_capture as _live
        except ImportError as exc:  # the package moved its internals: counted as not measured
            self.missing.append(f"torch_otel._capture.live_capture ({exc})")
            return
        for name in self.ENTRY:
            fn = getattr(_live.LiveCapture, name, None)
            if fn is None:
                self.missing.append(name)
                continue
            setattr(_live.LiveCapture, name, self._wrap(name, fn))

    def _wrap(self, name: str, fn: Any) -> Any:
        meter = self

        def wrapper(*a: Any, **k: Any) -> Any:
            meter.calls[name] += 1
            depth = getattr(meter._tls, "depth", 0)
            meter._tls.depth = depth + 1
            t = time.thread_time() if depth == 0 else 0.0
            try:
                return fn(*a, **k)
            finally:
                meter._tls.depth = depth
                if depth == 0:
                    meter.cpu_s += time.thread_time() - t

        return wrapper

    def window(self) -> tuple[dict[str, int], float]:
        return dict(self.calls), self.cpu_s


def _thread_groups(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]) -> dict[str, float]:
    from bench.cost.zero_cost import _group

    groups: dict[str, float] = {}
    for tid, (name, ns) in after.items():
        spent = (ns - before.get(tid, (name, 0))[1]) / 1e9
        if spent > 0:
            g = _group(name, tid)
            groups[g] = round(groups.get(g, 0.0) + spent, 6)
    return groups


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _cudagraph_tree_counts(torch: Any) -> dict[str, Any]:
    """torch's own count of what its cudagraph trees recorded: every recorded graph is a node of a tree."""
    out: dict[str, Any] = {}
    try:
        from torch._inductor import cudagraph_trees as ct

        local = getattr(ct, "local", None)
        containers = []
        for name in ("tree_manager_containers",):
            containers = list((getattr(local, name, None) or {}).values())
        if not containers:
            containers = [ct.get_container(torch.cuda.current_device())] if torch.cuda.is_available() else []
        nodes = functions = warmed = 0
        rerecords = 0
        for c in containers:
            mgr = getattr(c, "tree_manager", None)
            if mgr is None:
                continue
            functions += len(getattr(mgr, "ids_to_funcs", {}) or {})
            warmed += len(getattr(mgr, "warmed_up_functions", ()) or ())
            for per_node in (getattr(mgr, "num_rerecord", {}) or {}).values():
                rerecords += sum(per_node.values())
            stack = [n for roots in (mgr.roots or {}).values() for n in roots]
            while stack:
                n = stack.pop()
                nodes += 1
                stack.extend(ch for chs in n.children.values() for ch in chs)
        out = {"recorded_graphs": nodes, "functions": functions, "warmed_up_functions": warmed, "unexpected_rerecords": rerecords}
    except Exception as exc:  # noqa: BLE001 - a report of what could not be read, never a crash
        out = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def torch_record() -> dict[str, Any]:
    """torch's own record in this process: every CompilationMetrics (runtime ones too) and compile_times()'s data."""
    from torch._dynamo.utils import compilation_time_metrics, compile_times, counters, get_compilation_metrics

    records = []
    for m in get_compilation_metrics():
        d = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
        for big in ("dynamo_config", "inductor_config", "compiler_config", "functorch_config", "stack_trace"):
            d.pop(big, None)
        records.append(d)
    return {
        "compilation_metrics": records,
        "compilation_time_metrics": {k: list(v) for k, v in compilation_time_metrics.items()},
        "compile_times": compile_times(repr="str"),
        "counters": {k: dict(v) for k, v in counters.items()},
    }


def worker(name: str, out: Path, device_arg: str) -> int:
    """One workload; its files in ``out``."""
    t_start = time.perf_counter()
    capture = {
        "transformer_full": "full",
        "cudagraphs_full": "full",
        "transformer_default": "default",
        "transformer_pair": "default",
    }.get(name, "off")
    meter = HookMeter()
    bridge: dict[str, Any] = {}
    if capture != "off":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from prometheus_client import CollectorRegistry

        import torch_otel
        from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
        from torch_otel._sinks.summary import RunSummary

        meter.install()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(out / "spans.jsonl"))))
        registry = CollectorRegistry()
        summary = RunSummary("live")
        torch_otel.instrument(provider, registry=registry, capture=capture, summary=summary)
        bridge = {"provider": provider, "registry": registry, "summary": summary, "module": torch_otel}
    t_import = time.perf_counter()
    import torch

    from bench.cost.zero_cost import thread_cpu

    torch._dynamo.utils.set_compilation_metrics_limit(100_000)  # torch keeps the last 64 by default
    cuda = device_arg == "cuda"
    dev = torch.device("cuda" if cuda else "cpu")
    info: dict[str, Any] = {
        "workload": name,
        "capture": capture,
        "device": str(dev),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "import_s": round(time.perf_counter() - t_import, 3),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "name": torch.cuda.get_device_name(0),
            "capability": list(torch.cuda.get_device_capability(0)),
            "multiprocessors": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
        }
        torch.backends.cuda.matmul.allow_tf32 = True
    if bridge:
        import torch_otel

        info["torch_otel"] = getattr(torch_otel, "__version__", "?")
        info["torch_otel_file"] = torch_otel.__file__
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result: dict[str, Any] = {"info": info}

    def write() -> None:
        (out / "worker.json").write_text(json.dumps(_jsonable(result), indent=1))

    write()  # something on disk from the start
    if name.startswith("transformer"):
        torch.manual_seed(0)
        d = 256 if cuda else 64
        layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        mode = "max-autotune-no-cudagraphs" if cuda and name != "transformer_pair" else None
        info["mode"] = mode
        if cuda and hasattr(torch._inductor.config, "test_configs") and MAX_MM_CONFIGS:
            # Each GEMM's template autotuning benchmarks this many Triton configs (and aten) instead of about 20: the
            # lazy backward's twelve GEMMs took 106 s on an H200 otherwise (11 s each, building every config)
            torch._inductor.config.test_configs.max_mm_configs = MAX_MM_CONFIGS
            info["max_mm_configs"] = MAX_MM_CONFIGS
        cm = torch.compile(model, mode=mode)
        x = torch.randn(8, 64, d, device=dev)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = cm(x).float().pow(2).mean()
            loss.backward()
            opt.step()

        before, h0, w0 = thread_cpu(), meter.window(), time.perf_counter()
        step_walls = []
        for _ in range(STEPS_TO_COMPILE):
            s0 = time.perf_counter()
            step()
            sync()
            step_walls.append(round(time.perf_counter() - s0, 4))
        compile_wall = time.perf_counter() - w0
        if bridge:
            bridge["module"].force_flush(60_000)  # every compile's spans built: the bridge's work inside the window
        after, h1 = thread_cpu(), meter.window()
        result["compile_window"] = {
            "wall_s": round(compile_wall, 4),
            "step_walls_s": step_walls,
            "hook_calls": {k: v - h0[0].get(k, 0) for k, v in h1[0].items()},
            "hook_cpu_s": round(h1[1] - h0[1], 6),
            "threads_cpu_s": _thread_groups(before, after),
        }
        result["torch"] = torch_record()  # every compile: on disk even if the steady state is cut short
        write()
        # steady state: the compiled step, timed in blocks
        for _ in range(5):
            step()
        sync()
        blocks, per_block = (10, 50) if cuda else (3, 5)
        before, h0 = thread_cpu(), meter.window()
        times_ms = []
        for _ in range(blocks):
            s0 = time.perf_counter()
            for _ in range(per_block):
                step()
            sync()
            times_ms.append((time.perf_counter() - s0) * 1000 / per_block)
        after, h1 = thread_cpu(), meter.window()
        result["steady"] = {
            "steps": blocks * per_block,
            "ms_per_step_blocks": [round(t, 4) for t in times_ms],
            "ms_per_step_median": round(statistics.median(times_ms), 4),
            "hook_calls": {k: v - h0[0].get(k, 0) for k, v in h1[0].items() if v - h0[0].get(k, 0)},
            "hook_cpu_s": round(h1[1] - h0[1], 6),
            "threads_cpu_s": _thread_groups(before, after),
        }
        if name == "transformer_pair" and bridge:
            # The same compiled step, in this one process, in blocks with the bridge instrumented and uninstrumented,
            # in turn (ABBA: on off off on ...), so drift and the process's own layout cancel out
            import torch_otel

            pairs: dict[str, list[float]] = {"on": [], "off": []}
            order = ["on", "off", "off", "on"] * (5 if cuda else 1)
            state = "on"
            for want in order:
                if want != state:
                    if want == "off":
                        torch_otel.uninstrument()
                    else:
                        torch_otel.instrument(bridge["provider"], registry=None, capture="default")
                    state = want
                sync()
                s0 = time.perf_counter()
                for _ in range(per_block):
                    step()
                sync()
                pairs[want].append(round((time.perf_counter() - s0) * 1000 / per_block, 4))
            if state == "off":
                torch_otel.instrument(bridge["provider"], registry=None, capture="default")
            result["paired"] = {
                "order": order,
                "ms_per_step": pairs,
                "median_on": round(statistics.median(pairs["on"]), 4),
                "median_off": round(statistics.median(pairs["off"]), 4),
            }
    else:  # cudagraphs
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev).eval()
        cm = torch.compile(mlp, mode="reduce-overhead")
        calls = []
        with torch.no_grad():
            for batch in (8, 16, 8):
                xb = torch.randn(batch, 256, device=dev)
                for _ in range(5):
                    s0 = time.perf_counter()
                    cm(xb)
                    sync()
                    calls.append({"batch": batch, "wall_s": round(time.perf_counter() - s0, 5)})

        def mutates(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
            buf.add_(1)  # a mutated input that is not a parameter: torch skips cudagraphs for this graph
            return x * 2

        cmut = torch.compile(mutates, mode="reduce-overhead")
        buf = torch.zeros(4, device=dev)
        for _ in range(3):
            cmut(torch.randn(4, device=dev), buf)

        def mixed(x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, c + 1  # a CPU tensor in the graph: torch skips cudagraphs for it as it compiles

        cmix = torch.compile(mixed, mode="reduce-overhead")
        for _ in range(3):
            cmix(torch.randn(4, device=dev), torch.randn(4))
        sync()
        result["calls"] = calls
        result["cudagraph_trees"] = _cudagraph_tree_counts(torch) if cuda else {"skipped": "no CUDA"}

    result["torch"] = torch_record()
    if bridge:
        bridge["module"].force_flush(60_000)
        samples = [
            {"name": s.name, "labels": s.labels, "value": s.value}
            for fam in bridge["registry"].collect()
            for s in fam.samples
            if s.name.startswith(("torch_compile_", "torch_otel_"))
        ]
        result["bridge"] = {"samples": samples, "summary": bridge["summary"].to_dict()}
        bridge["module"].uninstrument()
        bridge["provider"].shutdown()
    result["info"]["worker_wall_s"] = round(time.perf_counter() - t_start, 3)
    result["hooks_missing"] = meter.missing
    write()
    return 0


# --------------------------------------------------------------------------------------------------------------
# Reading what the workers left
# --------------------------------------------------------------------------------------------------------------


def read_spans(path: Path) -> list[dict[str, Any]]:
    """OTLP-JSON lines -> plain spans: name, ids, times, attrs (values unwrapped), event names."""

    def unwrap(v: dict[str, Any]) -> Any:
        if not v:
            return None
        (kind, val), *_ = v.items()
        if kind == "arrayValue":
            return [unwrap(x) for x in val.get("values", [])]
        if kind == "intValue":
            return int(val)
        return val

    spans: list[dict[str, Any]] = []
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    spans.append(
                        {
                            "name": sp["name"],
                            "span_id": sp["spanId"],
                            "parent": sp.get("parentSpanId") or None,
                            "trace_id": sp["traceId"],
                            "start_ns": int(sp["startTimeUnixNano"]),
                            "end_ns": int(sp["endTimeUnixNano"]),
                            "attrs": {kv["key"]: unwrap(kv["value"]) for kv in sp.get("attributes", [])},
                            "events": [e["name"] for e in sp.get("events", [])],
                        }
                    )
    return spans


def roots_of(spans: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [s for s in spans if not s["parent"] and s["attrs"].get("torch.compile.kind") in kinds]


def trace_records(log: Path) -> list[dict[str, Any]]:
    """torch's CompilationMetrics records in a TORCH_TRACE log, each with ``_kind`` (the record's name)."""
    out = []
    opener: Any = gzip.open if log.suffix == ".gz" else open
    with opener(log, "rt") as f:
        for line in f:
            m = re.match(r"^[VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] (\{.*\})$", line.rstrip("\n"))
            if not m:
                continue
            md = json.loads(m.group(1))
            for key in (
                "compilation_metrics",
                "bwd_compilation_metrics",
                "compilation_metrics_runtime",
                "bwd_compilation_metrics_runtime",
            ):
                if key in md and isinstance(md[key], dict):
                    out.append({**md[key], "_kind": key})
    return out


def record_kind(r: dict[str, Any]) -> str:
    if r.get("is_runtime"):
        return "runtime"
    return "backward" if r.get("is_forward") is False else "frame"


def phase_sums(samples: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for s in samples:
        if s["name"] == "torch_compile_phase_duration_seconds_sum":
            out[s["labels"]["phase"]] += s["value"]
    return dict(out)


def field_sums(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each label's torch record: the fields named like it, summed over every record (runtime ones too), in s."""
    out: dict[str, float] = defaultdict(float)
    for r in records:
        for field, (label, scale) in FIELD_LABELS.items():
            v = r.get(field)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[label] += v * scale
    return dict(out)


def replay_log(log: Path, work: Path) -> dict[str, Any]:
    """This checkout's replay of a TORCH_TRACE log, at full capture: its spans, metrics samples and summary."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from prometheus_client import CollectorRegistry

    from torch_otel._core.settings import Settings
    from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
    from torch_otel._parse.trace_log import ReplayStats
    from torch_otel._pipeline.replay import replay_file
    from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
    from torch_otel._sinks.spans import SpanMapper
    from torch_otel._sinks.summary import RunSummary

    path = work / "replay-spans.jsonl"
    path.unlink(missing_ok=True)
    provider, registry, summary, stats = TracerProvider(), CollectorRegistry(), RunSummary("replay"), ReplayStats()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(path))))
    tracing = SpanMapper(provider.get_tracer("t"), Settings(capture="full"), live=False)
    replay_file(log, [CompileMetrics([PrometheusBackend(registry)]), summary], stats, artifacts=True, tracing=tracing)
    provider.shutdown()
    samples = [
        {"name": s.name, "labels": s.labels, "value": s.value}
        for fam in registry.collect()
        for s in fam.samples
        if s.name.startswith(("torch_compile_", "torch_otel_"))
    ]
    return {"spans": read_spans(path), "samples": samples, "summary": summary.to_dict(), "problems": list(stats.problems)}


def tlparse_ids(log: Path, work: Path) -> set[str] | str:
    exe = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    for extra in sys.path:  # pip install --target DIR puts the program in DIR/bin
        if not Path(exe).exists() and (Path(extra) / "bin" / "tlparse").exists():
            exe = str(Path(extra) / "bin" / "tlparse")
    if not Path(exe).exists():
        return "tlparse not installed"
    out = work / "tlparse"
    res = subprocess.run(
        [exe, str(log), "-o", str(out), "--no-browser", "--overwrite"], capture_output=True, text=True, timeout=300
    )
    if res.returncode != 0:
        return f"tlparse failed: {res.stderr[-500:]}"
    directory = json.loads((out / "compile_directory.json").read_text())
    return {k.strip("[]") for k in directory} - {"-/-"}


def span_compile_ids(roots: list[dict[str, Any]]) -> set[str]:
    """Root spans' ids in tlparse's form: each restart attempt N adds ``<id>_N``; a lazy backward is its forward's."""
    ids: set[str] = set()
    for r in roots:
        if r["attrs"]["torch.compile.kind"] in ("backward", "runtime"):
            continue
        cid, attempt = r["attrs"]["torch.compile.id"], int(r["attrs"].get("torch.compile.attempt", 0))
        ids.add(cid)
        ids.update(f"{cid}_{a}" for a in range(1, attempt + 1))
    return ids


# --------------------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Check:
    workload: str
    name: str
    status: str  # agree, disagree, absent, skipped
    detail: str
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)


def _close(a: float, b: float, abs_tol: float) -> bool:
    return abs(a - b) <= abs_tol


def _first_line(reason: str) -> str:
    return reason.strip().split("\n", 1)[0].split(". Found from", 1)[0].strip()


def gpu_fields(
    name: str,
    how: str,
    records: list[dict[str, Any]],
    roots: list[dict[str, Any]],
    counters: dict[str, Any],
    add: Any,
    cuda: bool,
) -> None:
    """``triton_kernel_compile_times_us`` and ``cudagraph_skip_reason``, compile by compile, against the roots' attributes."""
    by_id = {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]): r["attrs"] for r in roots}
    listed, off, kernels, total = 0, [], 0, 0.0
    for r in records:
        v = r.get("triton_kernel_compile_times_us")
        if record_kind(r) == "runtime" or not isinstance(v, str) or not v:
            continue
        times = [t[1] for t in json.loads(v) if isinstance(t, list) and len(t) == 2]
        listed += 1
        kernels += len(times)
        total += sum(times) / 1e6
        a = by_id.get((record_kind(r), str(r["compile_id"])), {})
        if (
            a.get("torch.compile.triton.kernels_listed") != len(times)
            or abs(float(a.get("torch.compile.triton.kernel_build_s", -1)) - sum(times) / 1e6) > 1e-6
        ):
            off.append(
                (
                    str(r["compile_id"]),
                    len(times),
                    sum(times),
                    a.get("torch.compile.triton.kernels_listed"),
                    a.get("torch.compile.triton.kernel_build_s"),
                )
            )
    if listed:
        add(
            f"triton_kernel_compile_times_us ({how})",
            "agree" if not off else ("absent" if all(o[3] is None for o in off) else "disagree"),
            f"{listed} compiles list {kernels} kernel builds, {total:.3f} s (torch keeps each compile's slowest 25, timed in the compile workers); "
            + (
                "each root's torch.compile.triton.kernels_listed and .kernel_build_s equal them"
                if not off
                else f"roots differ (id, torch n, torch us, span n, span s): {off[:6]}"
            ),
        )
    elif cuda:
        add(
            f"triton_kernel_compile_times_us ({how})",
            "skipped",
            "no record lists a Triton kernel build (kernels came from a cache)",
        )
    skips = [r for r in records if r.get("cudagraph_skip_reason")]
    torch_count = int((counters.get("inductor") or {}).get("cudagraph_skips", 0))
    bad = []
    for r in skips:
        a = by_id.get((record_kind(r), str(r["compile_id"])), {})
        if a.get("torch.compile.cudagraph_skip_reason") != _first_line(r["cudagraph_skip_reason"]):
            bad.append(
                (str(r["compile_id"]), _first_line(r["cudagraph_skip_reason"]), a.get("torch.compile.cudagraph_skip_reason"))
            )
    carried = sum(1 for a in by_id.values() if a.get("torch.compile.cudagraph_skip_reason"))
    if skips or torch_count or name.startswith("cudagraphs"):
        if not cuda:
            add(f"cudagraph_skip_reason ({how})", "skipped", "no CUDA: cudagraphs never considered")
            return
        add(
            f"cudagraph_skip_reason ({how})",
            "agree" if not bad and carried == len(skips) else "disagree",
            f"torch counted {torch_count} cudagraph skips (counters['inductor']['cudagraph_skips']); its records name {len(skips)} "
            f"({[_first_line(r['cudagraph_skip_reason']) for r in skips]}); roots carrying torch.compile.cudagraph_skip_reason: {carried}"
            + (f"; differ: {bad}" if bad else "")
            + (
                "; a skip decided at a graph's first call (after its compile) is in no CompilationMetrics record"
                if torch_count > len(skips)
                else ""
            ),
        )


def check_workload(name: str, wdir: Path, checks: list[Check], cuda: bool) -> None:  # noqa: C901 - one list of checks
    def add(check: str, status: str, detail: str, **numbers: Any) -> None:
        checks.append(Check(name, check, status, detail, numbers))

    wj = wdir / "worker.json"
    if not wj.exists():
        add("ran", "skipped", "the workload left no worker.json (did not start, or was cut before its first write)")
        return
    w = json.loads(wj.read_text())
    if "torch" not in w:
        add("ran", "disagree", "the workload did not finish (see its stderr in the raw files)")
        return
    records = w["torch"]["compilation_metrics"]
    ctm = w["torch"]["compilation_time_metrics"]
    spans = read_spans(wdir / "spans.jsonl")
    bridge = w.get("bridge")
    if bridge is None:
        return  # the bridge-off run: its numbers feed the step-time and compile-cost checks
    live_roots = roots_of(spans, "frame", "backward")
    runtime_roots = roots_of(spans, "runtime")

    # 1. compiles: one root per torch record, with torch's duration
    torch_ids = {(record_kind(r), str(r["compile_id"])): r for r in records if record_kind(r) != "runtime"}
    span_ids = {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]): r for r in live_roots}
    same = set(torch_ids) == set(span_ids)
    add(
        "compiles: live roots = get_compilation_metrics()",
        "agree" if same else "disagree",
        f"{len(span_ids)} roots, {len(torch_ids)} torch records"
        + ("" if same else f"; differ: {sorted(set(torch_ids) ^ set(span_ids))}"),
        roots=len(span_ids),
        records=len(torch_ids),
    )
    off = []
    for key in set(torch_ids) & set(span_ids):
        want = torch_ids[key].get("duration_us")
        got = span_ids[key]["attrs"].get("torch.compile.duration_s")
        if isinstance(want, int) and (got is None or abs(float(got) * 1e6 - want) > 1.5):
            off.append((key, want, got))
    add(
        "compiles: root torch.compile.duration_s = duration_us",
        "agree" if not off else "disagree",
        f"{len(set(torch_ids) & set(span_ids)) - len(off)} of {len(set(torch_ids) & set(span_ids))} equal"
        + (f"; off: {off[:5]}" if off else ""),
    )

    # 2. compile_times(): each timed name's total = the live spans of that name (keys with a phase_name: that name)
    by_name: dict[str, list[float]] = defaultdict(list)
    for s in spans:
        kind = s["attrs"].get("torch.compile.kind") if not s["parent"] else None
        if kind == "runtime":
            continue  # the bridge's own grouping of a graph's runtime phases, not a torch event
        # a compile's root span is torch's outer event of that compile
        name_ = {"frame": "dynamo", "backward": "entire_backward_compile"}.get(kind or "", s["name"])
        by_name[name_].append((s["end_ns"] - s["start_ns"]) / 1e9)
        for attr, v in s["attrs"].items():  # bytecode tracing's own timers, which torch adds to that event's args
            if s["name"] == "bytecode_tracing" and attr.endswith("_time_s") and isinstance(v, (int, float)):
                by_name["arg:" + attr.removeprefix("torch.compile.").removesuffix("_time_s")].append(float(v))
    rows, worst = [], []
    for key, vals in sorted(ctm.items()):
        sname = ALIASES.get(key, key)
        got = by_name.get(sname) or by_name.get("arg:" + key, [])
        row = {
            "key": key,
            "span": sname,
            "torch_n": len(vals),
            "torch_s": round(sum(vals), 6),
            "spans_n": len(got),
            "spans_s": round(sum(got), 6),
        }
        rows.append(row)
        if len(vals) != len(got) or not _close(sum(vals), sum(got), 2e-5 * max(1, len(vals)) + 1e-4):
            worst.append(row)
    add(
        "compile_times(): each timed name's count and total = its live spans",
        "agree" if not worst else "disagree",
        f"{len(rows) - len(worst)} of {len(rows)} names equal"
        + (
            "; differ: "
            + "; ".join(
                f"{r['key']} torch {r['torch_n']}x {r['torch_s']:.4f}s, spans {r['spans_n']}x {r['spans_s']:.4f}s"
                for r in worst[:12]
            )
            if worst
            else ""
        ),
        rows=rows,
    )

    # 3. phase labels named like a CompilationMetrics field: the live metric's sum = the field summed over the records
    live_phases = phase_sums(bridge["samples"])
    fields = field_sums(records)
    bad, rows2 = [], []
    for label in sorted({lab for lab, _ in FIELD_LABELS.values()}):
        fields_of = [f for f, (lab, _) in FIELD_LABELS.items() if lab == label]
        want = fields.get(label, 0.0)
        got = live_phases.get(label, 0.0)
        ok = _close(want, got, 1e-3 + 1e-3 * want)
        rows2.append({"label": label, "fields": fields_of, "torch_s": round(want, 6), "live_s": round(got, 6), "equal": ok})
        if not ok:
            bad.append(rows2[-1])
    add(
        "phase labels = the CompilationMetrics fields named like them (live)",
        "agree" if not bad else "disagree",
        "; ".join(
            f"{r['label']}: torch {r['torch_s']:.4f}s ("
            + "+".join(r["fields"])
            + f"), live {r['live_s']:.4f}s"
            + ("" if r["equal"] else " DIFFER")
            for r in rows2
        ),
        rows=rows2,
    )

    gpu_fields(name, "live", records, live_roots, w["torch"]["counters"], add, cuda)

    # 4. runtime roots = torch's runtime records
    rt_records = [r for r in records if record_kind(r) == "runtime"]
    if rt_records or runtime_roots:
        want = defaultdict(int)
        for r in rt_records:
            want[str(r.get("compile_id"))] += int(r.get("duration_us") or 0)
        got = defaultdict(int)
        for r in runtime_roots:
            got[r["attrs"]["torch.compile.id"]] += r["end_ns"] - r["start_ns"]
        same_ids = set(want) == set(got)
        off = {
            cid: (want[cid], round(got[cid] / 1000))
            for cid in want
            if cid in got and abs(want[cid] - got[cid] / 1000) > 10 + 1e-3 * want[cid]
        }
        add(
            "runtime roots = torch's runtime records",
            "agree" if same_ids and not off else "disagree",
            f"{len(runtime_roots)} torch.compile.runtime roots over {len(got)} graphs; {len(rt_records)} runtime records over {len(want)} graphs"
            + (f"; ids differ: {sorted(set(want) ^ set(got))}" if not same_ids else "")
            + (f"; time differs (us torch, us spans): {off}" if off else "; time per graph equal"),
            roots=len(runtime_roots),
            records=len(rt_records),
            phases=sorted({p for r in runtime_roots for p in (r["attrs"].get("torch.compile.runtime.phases") or [])}),
        )
    # 5. cudagraph recordings: the trees' own count against the recordings the spans show
    if name.startswith("cudagraphs"):
        trees = w.get("cudagraph_trees", {})
        recs = [s for s in spans if s["name"] == "CUDAGraphNode.record"]
        timed = len(ctm.get("CUDAGraphNode.record", []))
        if "recorded_graphs" in trees:
            n = trees["recorded_graphs"]
            ok = n == len(recs) == timed
            add(
                "cudagraph recordings = torch's own count",
                "agree" if ok else "disagree",
                f"cudagraph trees hold {n} recorded graphs ({trees.get('functions')} functions, {trees.get('unexpected_rerecords')} "
                f"unexpected re-records); compile_times() has {timed} CUDAGraphNode.record; the spans {len(recs)}",
                trees=trees,
                spans=len(recs),
                timed=timed,
            )
        else:
            add("cudagraph recordings = torch's own count", "skipped", f"no cudagraph trees here ({trees})")

    # 6. the device on the spans
    gpu = w["info"].get("gpu")
    dev_attrs = sorted({k for r in live_roots + runtime_roots for k in r["attrs"] if re.search(r"device|gpu|capability|cuda", k)})
    if gpu is None:
        add("device attributes on spans", "skipped", f"no GPU (spans carry {dev_attrs or 'none'})")
    else:
        values = {k: v for r in live_roots[:1] for k, v in r["attrs"].items() if k in dev_attrs}
        named = any(gpu["name"] in str(v) for v in values.values())
        add(
            "device attributes on spans",
            "agree" if named else "absent",
            f"torch: {gpu['name']}, capability {gpu['capability']}; spans: {values or 'no device attribute'}",
            gpu=gpu,
            span_attrs=values,
        )

    # 7. live = replay of the same process's TORCH_TRACE; compile ids = tlparse's
    logs = sorted((wdir / "trace").glob("*.log")) if (wdir / "trace").exists() else []
    if not logs:
        return
    log = logs[0]
    in_log = trace_records(log)
    add(
        "the log's CompilationMetrics records = get_compilation_metrics()",
        "agree" if len(in_log) == len(records) else "disagree",
        f"log {len(in_log)}, in process {len(records)} (runtime records: log {sum(1 for r in in_log if r['_kind'].endswith('_runtime'))}, in process {len(rt_records)})",
    )
    try:
        rep = replay_log(log, wdir)
    except Exception as exc:  # noqa: BLE001 - reported, and the other checks go on
        add("live = replay", "skipped", f"replay failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        return
    rep_roots = roots_of(rep["spans"], "frame", "backward")
    rep_runtime = roots_of(rep["spans"], "runtime")
    rkeys = {(r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]): r for r in rep_roots}
    diffs = []
    if set(rkeys) != set(span_ids):
        diffs.append(f"roots differ: {sorted(set(rkeys) ^ set(span_ids))}")
    for key in set(rkeys) & set(span_ids):
        a, b = span_ids[key]["attrs"], rkeys[key]["attrs"]
        if a.get("torch.compile.duration_s") != b.get("torch.compile.duration_s"):
            diffs.append(f"{key} duration {a.get('torch.compile.duration_s')} vs {b.get('torch.compile.duration_s')}")

    def names_by_trace(all_spans: list[dict[str, Any]], roots: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, int]]:
        by_trace = {r["trace_id"]: (r["attrs"]["torch.compile.kind"], r["attrs"]["torch.compile.id"]) for r in roots}
        out: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for s in all_spans:
            if s["trace_id"] in by_trace:
                out[by_trace[s["trace_id"]]][s["name"]] += 1
        return out

    ln, rn = names_by_trace(spans, live_roots + runtime_roots), names_by_trace(rep["spans"], rep_roots + rep_runtime)
    for key in sorted(set(ln) | set(rn)):
        if dict(ln.get(key, {})) != dict(rn.get(key, {})):
            la, ra = dict(ln.get(key, {})), dict(rn.get(key, {}))
            delta = {n: (la.get(n, 0), ra.get(n, 0)) for n in set(la) | set(ra) if la.get(n, 0) != ra.get(n, 0)}
            diffs.append(f"{key} spans (live, replay): {delta}")
    rp = phase_sums(rep["samples"])
    for label in sorted(set(rp) | set(live_phases)):
        if not _close(rp.get(label, 0.0), live_phases.get(label, 0.0), 1e-4 + 1e-4 * live_phases.get(label, 0.0)):
            diffs.append(f"phase {label}: live {live_phases.get(label, 0.0):.6f}s, replay {rp.get(label, 0.0):.6f}s")
    if len(rep_runtime) != len(runtime_roots):
        diffs.append(f"runtime roots: live {len(runtime_roots)}, replay {len(rep_runtime)}")
    add(
        "live = replay of the same run's TORCH_TRACE",
        "agree" if not diffs else "disagree",
        f"{len(span_ids)} compile roots and {len(runtime_roots)} runtime roots live; replay {len(rkeys)} and {len(rep_runtime)}"
        + ("" if not diffs else "; " + "; ".join(diffs[:15])),
        diffs=diffs,
        replay_problems=rep["problems"][:10],
        replay_phases={k: round(v, 6) for k, v in rp.items()},
        live_phases={k: round(v, 6) for k, v in live_phases.items()},
    )
    gpu_fields(name, "replay", records, rep_roots, w["torch"]["counters"], add, cuda)
    # the labels against torch's fields, on replay
    bad = [
        f"{lab}: torch {fields.get(lab, 0.0):.4f}s, replay {rp.get(lab, 0.0):.4f}s"
        for lab in sorted({lab for lab, _ in FIELD_LABELS.values()})
        if not _close(fields.get(lab, 0.0), rp.get(lab, 0.0), 1e-3 + 1e-3 * fields.get(lab, 0.0))
    ]
    add(
        "phase labels = the CompilationMetrics fields named like them (replay)",
        "agree" if not bad else "disagree",
        "; ".join(bad) or "every label equal",
    )
    tl = tlparse_ids(log, wdir)
    if isinstance(tl, str):
        add("compile ids = tlparse's", "skipped", tl)
    else:
        ours, theirs = span_compile_ids(live_roots), tl
        rep_ids = span_compile_ids(rep_roots)
        add(
            "compile ids = tlparse's",
            "agree" if ours == theirs == rep_ids else "disagree",
            f"tlparse {sorted(theirs)}; live {sorted(ours)}; replay {sorted(rep_ids)}",
        )


def check_costs(work: Path, checks: list[Check]) -> None:
    """Step time with and without the bridge, the bridge's calls per step, and the compile's cost at default capture."""
    runs = {}
    for n in ("transformer_default", "transformer_off", "transformer_full"):
        p = work / n / "worker.json"
        if p.exists():
            w = json.loads(p.read_text())
            if "steady" in w:
                runs[n] = w
    on, off = runs.get("transformer_default"), runs.get("transformer_off")
    if on is not None:
        calls = on["steady"]["hook_calls"]
        threads = on["steady"]["threads_cpu_s"]
        worker_cpu = threads.get("the bridge's worker thread", 0.0)
        checks.append(
            Check(
                "transformer_default",
                "the bridge does no work per compiled step",
                "agree" if not calls else "disagree",
                f"{on['steady']['steps']} steady steps: {sum(calls.values())} calls of the bridge's hooks ({calls or 'none'}), "
                f"its worker thread {worker_cpu * 1e3:.2f} ms CPU",
                {"hook_calls": calls, "worker_thread_cpu_s": worker_cpu, "threads": threads},
            )
        )
    if on is not None and off is not None:
        a, b = on["steady"]["ms_per_step_median"], off["steady"]["ms_per_step_median"]
        checks.append(
            Check(
                "transformer_default",
                "steady-state step time, bridge on vs off",
                "measured",
                f"median {a:.4f} ms/step with the bridge (default capture), {b:.4f} ms/step without ({(a / b - 1) * 100:+.2f}%); "
                f"blocks on {on['steady']['ms_per_step_blocks']}, off {off['steady']['ms_per_step_blocks']}",
                {
                    "on_ms": a,
                    "off_ms": b,
                    "on_blocks": on["steady"]["ms_per_step_blocks"],
                    "off_blocks": off["steady"]["ms_per_step_blocks"],
                },
            )
        )
        con, coff = on["compile_window"], off["compile_window"]
        recs = on["torch"]["compilation_metrics"]
        torch_s = sum(int(r.get("duration_us") or 0) for r in recs if record_kind(r) != "runtime") / 1e6
        bridge_cpu = con["hook_cpu_s"] + con["threads_cpu_s"].get("the bridge's worker thread", 0.0)
        checks.append(
            Check(
                "transformer_default",
                "compile-time cost at default capture",
                "measured",
                f"first {STEPS_TO_COMPILE} steps (compiles, autotuning, runs): {con['wall_s']:.2f} s with the bridge, {coff['wall_s']:.2f} s without "
                f"(one cold run each, not paired); the bridge's own CPU inside: hooks {con['hook_cpu_s'] * 1e3:.1f} ms + worker thread "
                f"{con['threads_cpu_s'].get('the bridge' + chr(39) + 's worker thread', 0.0) * 1e3:.1f} ms = {bridge_cpu * 1e3:.1f} ms, "
                f"{bridge_cpu / max(torch_s, 1e-9) * 100:.2f}% of torch's compile time ({torch_s:.2f} s, duration_us summed)",
                {
                    "wall_on_s": con["wall_s"],
                    "wall_off_s": coff["wall_s"],
                    "hook_cpu_s": con["hook_cpu_s"],
                    "hook_calls": con["hook_calls"],
                    "bridge_cpu_s": bridge_cpu,
                    "torch_compile_s": torch_s,
                    "threads_on": con["threads_cpu_s"],
                    "threads_off": coff["threads_cpu_s"],
                },
            )
        )


def check_pair(work: Path, checks: list[Check]) -> None:
    p = work / "transformer_pair" / "worker.json"
    if not p.exists():
        return
    w = json.loads(p.read_text())
    pr = w.get("paired")
    if not pr:
        return
    on, off = pr["ms_per_step"]["on"], pr["ms_per_step"]["off"]
    diffs = [a - b for a, b in zip(on, off, strict=True)]
    checks.append(
        Check(
            "transformer_pair",
            "step time, bridge instrumented and uninstrumented in turn (one process)",
            "measured",
            f"median {pr['median_on']:.4f} ms/step instrumented, {pr['median_off']:.4f} ms/step uninstrumented "
            f"({(pr['median_on'] / pr['median_off'] - 1) * 100:+.2f}%); block pairs' differences (ms) {[round(d, 4) for d in diffs]}; "
            f"inductor's default mode, {w['steady']['steps'] // len(w['steady']['ms_per_step_blocks'])} steps a block",
            {"on": on, "off": off, "order": pr["order"]},
        )
    )


def compare(work: Path, cuda: bool) -> list[Check]:
    checks: list[Check] = []
    for name in WORKLOADS:
        try:
            check_workload(name, work / name, checks, cuda)
        except Exception as exc:  # noqa: BLE001 - one workload's broken check must not lose the report
            checks.append(
                Check(
                    name,
                    "checks",
                    "disagree",
                    f"the checks crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}",
                )
            )
    try:
        check_pair(work, checks)
        check_costs(work, checks)
    except Exception as exc:  # noqa: BLE001
        checks.append(Check("costs", "checks", "disagree", f"the cost checks crashed: {type(exc).__name__}: {exc}"))
    return checks


# --------------------------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "host_cpus": os.cpu_count()}
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        out["nvidia_smi"] = res.stdout.strip() or res.stderr.strip()[-300:]
    except (OSError, subprocess.SubprocessError) as exc:
        out["nvidia_smi"] = f"not available ({type(exc).__name__})"
    return out


def _compile_wall(wdir: Path) -> float | None:
    try:
        return float(json.loads((wdir / "worker.json").read_text())["compile_window"]["wall_s"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _has_cuda() -> bool:
    res = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True, timeout=120
    )
    return res.stdout.strip().endswith("True")


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# torch-otel on a GPU: live capture against torch's own record",
        "",
        f"- machine: {m.get('nvidia_smi')}; torch {m.get('torch')} (CUDA {m.get('torch_cuda')}), triton {m.get('triton')}, "
        f"Python {m.get('python')}; torch-otel {m.get('torch_otel')}",
        f"- command: `python -m bench.gpu.check OUT` ({report['mode']}); wall {report.get('wall_s', '?')} s; "
        f"caches of the step-time runs: {report.get('cache_for_step_runs', '-')}",
        "",
        "| workload | rc | wall s | note |",
        "|---|---|---|---|",
    ]
    for name, r in report["workloads"].items():
        lines.append(f"| {name} | {r.get('rc')} | {r.get('wall_s')} | {r.get('note', '')} |")
    lines += ["", "| workload | check | status | detail |", "|---|---|---|---|"]
    for c in report["checks"]:
        detail = c["detail"].replace("|", "/").replace("\n", " ")
        lines.append(f"| {c['workload']} | {c['name']} | **{c['status']}** | {detail} |")
    counts: dict[str, int] = defaultdict(int)
    for c in report["checks"]:
        counts[c["status"]] += 1
    lines += ["", "Checks: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), ""]
    return "\n".join(lines)


def _pack(work: Path, out: Path) -> None:
    """At most 8 files back: the raw files in one tarball, each workload's TORCH_TRACE log in one of its own."""
    with tarfile.open(out / "raw.tar.gz", "w:gz") as tar:
        for d in sorted(p for p in work.iterdir() if p.is_dir()):
            name = d.name
            for p in sorted(d.iterdir()):
                if p.is_file() and p.suffix in (".json", ".jsonl", ".txt") and not p.name.startswith("replay-"):
                    tar.add(p, arcname=f"{name}/{p.name}")
    for name in WORKLOADS:
        trace = work / name / "trace"
        if trace.exists() and any(trace.iterdir()):
            with tarfile.open(out / f"trace-{name}.tar.gz", "w:gz") as tar:
                tar.add(trace, arcname=f"{name}/trace")


def run_all(out: Path, deadline_s: float, keep_work: Path | None, only: tuple[str, ...] = WORKLOADS) -> int:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    work = keep_work or Path(tempfile.mkdtemp(prefix="gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    cuda = _has_cuda()
    print(f"[gpu_check] CUDA: {cuda}; work dir {work}; deadline {deadline_s:.0f} s", flush=True)
    report: dict[str, Any] = {
        "mode": "cuda" if cuda else "cpu dry run (GPU-only checks skipped)",
        "machine": _machine(),
        "workloads": {},
        "checks": [],
    }

    def write_report() -> None:
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        (out / "report.json").write_text(json.dumps(_jsonable(report), indent=1))
        (out / "report.md").write_text(render(report))

    write_report()
    seen: dict[str, int] = {}
    for entry in only:  # in the order given (the default: WORKLOADS)
        seen[entry] = seen.get(entry, 0) + 1
        name = entry if seen[entry] == 1 else f"{entry}.{seen[entry]}"  # a workload named again: its own directory
        left = deadline_s - (time.perf_counter() - t0)
        if left < 40:
            report["workloads"][name] = {"rc": None, "note": f"not started: {left:.0f} s left before the deadline"}
            print(f"[gpu_check] {name}: skipped, {left:.0f} s left", flush=True)
            continue
        wdir = work / name
        wdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TORCH_OTEL_", "TORCH_TRACE", "TORCH_LOGS"))}
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "TORCHINDUCTOR_CACHE_DIR": str(wdir / "inductor-cache"),
            }
        )
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        if entry.endswith("_full"):
            env["TORCH_TRACE"] = str(wdir / "trace")
        if entry in ("transformer_default", "transformer_off"):
            first = _compile_wall(work / "transformer_full")
            warm = first is None or first > COLD_IF_UNDER_S
            src = work / "transformer_full" / "inductor-cache"
            if warm and src.exists():
                shutil.copytree(src, wdir / "inductor-cache", dirs_exist_ok=True)
            report["cache_for_step_runs"] = (
                f"warm (a copy of transformer_full's inductor cache; its compile took {first} s)"
                if warm and src.exists()
                else f"cold (transformer_full compiled in {first} s)"
            )
        timeout = min(CAPS[entry], left - 30)
        print(f"[gpu_check] {name}: starting (limit {timeout:.0f} s)", flush=True)
        s0 = time.perf_counter()
        with (wdir / "stderr.txt").open("w") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    entry,
                    str(wdir),
                    "--device",
                    "cuda" if cuda else "cpu",
                ],
                env=env,
                stdout=err,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            try:
                rc: int | None = proc.wait(timeout=timeout)
                note = ""
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc, note = None, f"cut at its limit ({timeout:.0f} s): partial files"
        wall = round(time.perf_counter() - s0, 1)
        if rc not in (0, None):
            note = "failed: " + (wdir / "stderr.txt").read_text()[-300:].replace("\n", " ")
        report["workloads"][name] = {"rc": rc, "wall_s": wall, "note": note}
        print(f"[gpu_check] {name}: rc={rc} in {wall} s {note}", flush=True)
        wj = wdir / "worker.json"
        if wj.exists() and "info" not in report["machine"]:
            info = json.loads(wj.read_text()).get("info", {})
            report["machine"].update({k: info.get(k) for k in ("torch", "torch_cuda", "triton", "gpu")})
            report["machine"]["info"] = True
        write_report()
    for name in WORKLOADS:  # the bridge's version, from a run that had it
        wj = work / name / "worker.json"
        if wj.exists():
            info = json.loads(wj.read_text()).get("info", {})
            if info.get("torch_otel"):
                report["machine"]["torch_otel"] = info["torch_otel"]
                break
    _pack(work, out)  # the raw files first: a run cut during the checks still brings them back
    print("[gpu_check] comparing", flush=True)
    report["checks"] = [dataclasses.asdict(c) for c in compare(work, cuda)]
    write_report()
    _pack(work, out)
    print(render(report), flush=True)
    print(f"[gpu_check] done in {time.perf_counter() - t0:.0f} s; work dir {work}", flush=True)
    return 0


def compare_only(out: Path) -> int:
    """The checks again, from a run's OUT (its tarballs unpacked into OUT/work)."""
    work = out / "work"
    work.mkdir(exist_ok=True)
    for tar in sorted(out.glob("*.tar.gz")):
        with tarfile.open(tar) as t:
            t.extractall(work, filter="data")
    old = json.loads((out / "report.json").read_text())
    cuda = old.get("mode") == "cuda"
    report = {**old, "checks": [dataclasses.asdict(c) for c in compare(work, cuda)]}
    report["mode"] = f"{old.get('mode')}; checks recomputed from the recorded files"
    (out / "report-recomputed.json").write_text(json.dumps(_jsonable(report), indent=1))
    (out / "report-recomputed.md").write_text(render(report))
    print(render(report))
    return 0


# ---------------------------------------------------------------------------------------------------------------
# Test data from a GPU run (tests/test_gpu.py reads it on CPU)
# ---------------------------------------------------------------------------------------------------------------

_TRIM_KEEP = {
    "chromium_event",
    "compilation_metrics",
    "bwd_compilation_metrics",
    "compilation_metrics_runtime",
    "bwd_compilation_metrics_runtime",
    "dynamo_start",
    "str",
}
_TRIM_DROP = ("inductor_config", "compiler_config", "functorch_config", "components")  # large, read by no test
_HEAD = re.compile(r"^([VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] )(\{.*\})$")


def _scrub(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _scrub(v) for k, v in obj.items() if k not in _TRIM_DROP}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    return obj


def trim_log(src: Path, dst: Path) -> None:
    """A TORCH_TRACE log as test data: every record line stays; payloads stay only for the records replay reads
    (its artifacts table included), without torch's config dumps and cache-key components; gzipped."""
    from torch_otel._parse.records import ARTIFACTS

    lines = src.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        payload = []
        while i < len(lines) and lines[i].startswith("\t"):
            payload.append(lines[i][1:])
            i += 1
        m = _HEAD.match(line)
        if not m:
            out.append(line)
            continue
        md = json.loads(m.group(2))
        kind = next(iter(md))
        keep = kind in _TRIM_KEEP or (kind == "artifact" and md[kind].get("name") in ARTIFACTS)
        md = _scrub(md)
        if not keep:
            md.pop("has_payload", None)
            out.append(m.group(1) + json.dumps(md))
            continue
        out.append(m.group(1) + json.dumps(md))
        if payload:
            try:
                body = json.dumps(_scrub(json.loads("\n".join(payload))))
            except ValueError:
                body = "\n".join(payload)
            out.extend("\t" + p for p in body.split("\n"))
    with gzip.open(dst, "wt") as f:
        f.write("\n".join(out) + "\n")


def export_test_data(work: Path, dest: Path) -> None:
    """Each full-capture workload's trimmed log, torch's in-process record and a digest of its live spans."""
    dest.mkdir(parents=True, exist_ok=True)
    keep_fields = {f for f in FIELD_LABELS} | {
        "compile_id",
        "is_forward",
        "is_runtime",
        "duration_us",
        "triton_kernel_compile_times_us",
        "cudagraph_skip_reason",
        "co_name",
    }
    for name in ("transformer_full", "cudagraphs_full"):
        wdir = work / name
        logs = sorted((wdir / "trace").glob("*.log"))
        if not logs or not (wdir / "worker.json").exists():
            continue
        trim_log(logs[0], dest / f"{name}.log.gz")
        w = json.loads((wdir / "worker.json").read_text())
        spans = read_spans(wdir / "spans.jsonl")
        roots = roots_of(spans, "frame", "backward", "runtime")
        by_trace = {r["trace_id"]: f"{r['attrs']['torch.compile.kind']} {r['attrs']['torch.compile.id']}" for r in roots}
        names: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for sp in spans:
            if sp["trace_id"] in by_trace:
                names[by_trace[sp["trace_id"]]][sp["name"]] += 1
        doc = {
            "workload": name,
            "info": w["info"],
            "torch": {
                "records": [{k: v for k, v in r.items() if k in keep_fields} for r in w["torch"]["compilation_metrics"]],
                "compilation_time_metrics": w["torch"]["compilation_time_metrics"],
                "counters": {"inductor": w["torch"]["counters"].get("inductor", {})},
                "cudagraph_trees": w.get("cudagraph_trees"),
            },
            "live": {
                "roots": [
                    {
                        "kind": r["attrs"]["torch.compile.kind"],
                        "id": r["attrs"]["torch.compile.id"],
                        "duration_s": r["attrs"].get("torch.compile.duration_s"),
                        "span_ns": r["end_ns"] - r["start_ns"],
                        "attrs": {
                            k: v
                            for k, v in r["attrs"].items()
                            if k.startswith(("torch.cuda.", "torch.compile.triton.", "torch.compile.cudagraph"))
                        },
                    }
                    for r in roots
                ],
                "span_names": {k: dict(v) for k, v in names.items()},
                "phase_sums": phase_sums(w["bridge"]["samples"]),
            },
        }
        (dest / f"{name}.json").write_text(json.dumps(_jsonable(doc), indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--compare", action="store_true", help="recompute the checks from what a run left in OUT")
    ap.add_argument("--deadline", type=float, default=360.0, help="end the workloads by this many seconds (default 360)")
    ap.add_argument(
        "--test-data", type=Path, metavar="DEST", help="with --compare: write tests/test_gpu.py's data from OUT's run to DEST"
    )
    ap.add_argument("--only", help="these workloads, comma-separated (default: all)")
    ap.add_argument("--work", type=Path, help="keep the workloads' files here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.out, args.device)
    if args.compare:
        code = compare_only(args.out)
        if args.test_data:
            export_test_data(args.out / "work", args.test_data)
        return code
    only = tuple(args.only.split(",")) if args.only else WORKLOADS
    unknown = set(only) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}: choose from {', '.join(WORKLOADS)}")
    return run_all(args.out, args.deadline, args.work, only)


if __name__ == "__main__":
    sys.exit(main())
