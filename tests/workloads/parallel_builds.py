"""A small transformer's first inductor compile, forward and backward, on a cold kernel cache, after a frame torch
leaves in eager (a graph break inside a loop: its compile fails, and the frame runs uncompiled).

Inductor builds the C++ kernels on its compile worker threads, in parallel, while the compile waits in
``async_compile.wait``; each build runs a compiler process. Run by tests/test_inductor.py under ``TORCH_TRACE``.
Writes what the bridge made of it (spans, the phase metric's sums, its unmatched phase events, the compile seconds,
the run summary) and what torch and the OS say (torch's ``compile_times()`` of ``compile_file``; the CPU of the child
processes this process waited for over the run) to the JSON file named by ``argv[1]``.
"""

import json
import os
import sys

import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import torch_otel
from torch_otel._core.categories import PHASE_LABELS
from torch_otel._sinks.summary import RunSummary

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
registry = CollectorRegistry()
summary = RunSummary("live")
torch_otel.instrument(provider, registry=registry, summary=summary)


def left_in_eager(x: torch.Tensor) -> torch.Tensor:
    for i in range(2):
        torch._dynamo.graph_break()  # a break inside a loop: torch skips the whole frame (GB7000)
        x = x + i
    return x


torch.compile(left_in_eager, backend="inductor")(torch.randn(4))
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
before = os.times()
torch.compile(model, backend="inductor")(torch.randn(2, 8, 32)).sum().backward()
after = os.times()

torch_otel.force_flush()
spans = [
    {
        "name": s.name,
        "span_id": s.context.span_id,
        "parent": s.parent.span_id if s.parent else None,
        "trace_id": s.context.trace_id,
        "start_ns": s.start_time,
        "end_ns": s.end_time,
        "attrs": {k: v for k, v in (s.attributes or {}).items() if isinstance(v, (str, int, float, bool))},
    }
    for s in exporter.get_finished_spans()
]
phases = {
    p: registry.get_sample_value("torch_compile_phase_duration_seconds_sum", {"rank": "0", "phase": p}) for p in PHASE_LABELS
}
unmatched = {e: registry.get_sample_value("torch_otel_unmatched_phase_events_total", {"event": e}) for e in ("begin", "end")}
seconds = {
    k: sum(
        registry.get_sample_value("torch_compile_seconds_total", {"rank": "0", "kind": k, "status": st}) or 0.0
        for st in ("ok", "failed")  # the frame left in eager failed its compile
    )
    for k in ("frame", "backward")
}
torch_says = {
    # torch's own timing of each build, summed (what torch._dynamo.utils.compile_times() lists for compile_file)
    "compile_file_s": sum(torch._dynamo.utils.compilation_time_metrics.get("compile_file", [])),
    # the compilers the builds ran: child processes waited for (the run's only ones)
    "children_cpu_s": (after.children_user + after.children_system) - (before.children_user + before.children_system),
}
with open(sys.argv[1], "w") as f:
    json.dump(
        {
            "spans": spans,
            "phases": phases,
            "unmatched": unmatched,
            "seconds": seconds,
            "summary": summary.to_dict(),
            "torch": torch_says,
        },
        f,
    )
