"""Small compiles whose numbers tests/test_agreement.py compares with torch's own record of the same run.

- resume compiles: each graph break ends a graph, and the rest of the frame compiles as a resume frame; two sizes
  recompile them all, and their backwards compile lazily;
- a data-dependent branch (``if y.sum() > 0:``), a graph break torch resumes after, in the branch that runs;
- a graph break torch cannot handle (inside a user's context manager): torch skips the frame, which runs in eager;
- compiled autograd over a compiled model, two batch sizes (two compiled-autograd graphs).

Run under ``TORCH_TRACE``. Writes its spans to ``argv[2]`` (OTLP JSON lines), and the Prometheus samples, the run
summary and torch's own counters to the JSON file named by ``argv[1]``.
"""

import json
import sys

import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry
from torch._dynamo.utils import counters

import torch_otel
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._sinks.summary import RunSummary

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(sys.argv[2])))
registry = CollectorRegistry()
summary = RunSummary("live")
torch_otel.instrument(provider, registry=registry, summary=summary)
torch._dynamo.config.automatic_dynamic_shapes = False


def resumes(x):
    x = x.sin()
    torch._dynamo.graph_break()
    x = x.cos() * 2
    torch._dynamo.graph_break()
    return (x + 1).sum()


compiled = torch.compile(resumes, backend="aot_eager")
for n in (2, 3):
    compiled(torch.randn(n, requires_grad=True)).backward()


def branch(x):
    y = x * 2
    if y.sum() > 0:  # data-dependent: dynamo compiles the graph up to here and resumes in the branch that runs
        return y.relu()
    return y.tanh()


branch_before = (sum(counters["unimplemented"].values()), sum(counters["graph_break"].values()))
compiled_branch = torch.compile(branch, backend="eager")
for x in (torch.ones(3), -torch.ones(3), torch.ones(5)):  # each branch's resume frame; a new size recompiles
    compiled_branch(x)
branch_after = (sum(counters["unimplemented"].values()), sum(counters["graph_break"].values()))


class Ctx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def in_context(x):
    with Ctx():  # dynamo cannot resume after a graph break inside a user's context manager
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()


in_context_before = (sum(counters["unimplemented"].values()), sum(counters["graph_break"].values()))
torch.compile(in_context, backend="eager")(torch.randn(4))
in_context_after = (sum(counters["unimplemented"].values()), sum(counters["graph_break"].values()))

captures_before = counters["compiled_autograd"]["captures"]
model = torch.nn.Linear(4, 4)
cm = torch.compile(model, backend="eager")
with torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager")):
    for n in (2, 3):
        cm(torch.randn(n, 4)).sum().backward()

torch_otel.force_flush()


samples = [
    {"name": s.name, "labels": s.labels, "value": s.value}
    for fam in registry.collect()
    for s in fam.samples
    if s.name.startswith("torch_compile_")
]
out = {
    "samples": samples,
    "summary": summary.to_dict(),
    "counters": {
        "unimplemented": sum(counters["unimplemented"].values()),
        "graph_break": sum(counters["graph_break"].values()),
        "in_context": [in_context_before, in_context_after],
        "branch": [branch_before, branch_after],
        "compiled_autograd_captures": counters["compiled_autograd"]["captures"] - captures_before,
    },
}
provider.shutdown()
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
