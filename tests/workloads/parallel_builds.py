"""A small transformer's first inductor compile, forward and backward, on a cold kernel cache.

Inductor builds the C++ kernels on its compile worker threads, in parallel, while the compile waits in
``async_compile.wait``. Run by tests/test_inductor.py under ``TORCH_TRACE``. Writes what the bridge made of it
(spans, the phase metric's sums, its unmatched phase events) to the JSON file named by ``argv[1]``.
"""

import json
import sys

import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import torch_otel
from torch_otel._categories import PHASE_LABELS

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
registry = CollectorRegistry()
torch_otel.instrument(provider, registry=registry)

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
torch.compile(model, backend="inductor")(torch.randn(2, 8, 32)).sum().backward()

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
with open(sys.argv[1], "w") as f:
    json.dump({"spans": spans, "phases": phases, "unmatched": unmatched}, f)
