"""``torch-otel demo``: a small compile workload, its traces printed and written locally, its metrics served.

Needs no collector: spans go to an OTLP-JSON file and to the terminal, metrics
to a local ``/metrics`` endpoint that the demo scrapes itself.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from collections import defaultdict
from typing import Any, TextIO

from ._version import __version__


def workload(backend: str = "aot_eager") -> None:
    """A graph break, shape recompiles, a dtype recompile, a backward, and a recompile-limit hit."""
    import torch

    torch._dynamo.config.automatic_dynamic_shapes = False

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = torch.nn.Linear(16, 32)
            self.l2 = torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.l1(x))
            torch._dynamo.graph_break()  # a graph break, on purpose
            out: torch.Tensor = self.l2(h)
            return out

    model = torch.compile(MLP(), backend=backend)
    for batch in (8, 16):  # the second batch size recompiles
        model(torch.randn(batch, 16)).sum().backward()

    @torch.compile(backend=backend)
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    scale(torch.randn(4))
    scale(torch.randn(4, dtype=torch.float64))  # dtype recompile

    old = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 2
    try:

        @torch.compile(backend=backend)
        def shift(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        for n in range(1, 5):  # the third shape exceeds the limit: eager from then on
            shift(torch.randn(n))
    finally:
        torch._dynamo.config.recompile_limit = old


def _print_traces(spans: list[Any], out: TextIO) -> None:
    children: dict[int, list[Any]] = defaultdict(list)
    roots = []
    for s in spans:
        if s.parent is None:
            roots.append(s)
        else:
            children[s.parent.span_id].append(s)
    roots.sort(key=lambda s: s.start_time)

    def line(s: Any, lead: str, branch: str) -> None:
        """The whole tree, every level, as the README shows it."""
        ms = (s.end_time - s.start_time) / 1e6
        label = f"{lead}{branch}{s.name}"
        out.write(f"{label:<46} {ms:9.1f} ms\n")
        kids = sorted(children.get(s.context.span_id, []), key=lambda c: c.start_time)
        deeper = lead + ("   " if branch == "└─ " else "│  " if branch else "")
        for i, c in enumerate(kids):
            line(c, deeper, "└─ " if i == len(kids) - 1 else "├─ ")

    for r in roots:
        a = dict(r.attributes or {})
        out.write(
            f"\ntrace {r.context.trace_id:032x}  compile {a.get('torch.compile.id')}  "
            f"{a.get('code.function.name', '?')}  ({os.path.basename(str(a.get('code.file.path', '?')))}:{a.get('code.line.number', '?')})\n"
        )
        if "torch.compile.recompile_reason" in a:
            out.write(f"  recompile: {a['torch.compile.recompile_reason']}\n")
        for e in r.events:
            ea = dict(e.attributes or {})
            if e.name == "torch.compile.graph_break":
                out.write(
                    f"  graph break [{ea.get('torch.compile.graph_break.code')}] {ea.get('torch.compile.graph_break.type')}"
                    f" at {os.path.basename(str(ea.get('code.file.path')))}:{ea.get('code.line.number')}\n"
                )
        if r.status.status_code.name == "ERROR":
            out.write(f"  ERROR: {r.status.description}\n")
        line(r, "  ", "")


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_demo(traces_file: str, port: int, serve: float, backend: str, out: TextIO = sys.stdout) -> int:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from . import _bridge
    from ._exposition import start_prometheus_server
    from ._file_exporter import OTLPJsonFileSpanExporter
    from ._ids import UrandomIdGenerator
    from ._setup import job_resource

    if os.path.exists(traces_file):
        os.remove(traces_file)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=job_resource(), id_generator=UrandomIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonFileSpanExporter(traces_file)))
    registry = CollectorRegistry()
    if port and not _port_free(port):
        out.write(f"port {port} is busy: serving metrics on a free port instead (pass --metrics-port PORT to choose)\n")
        port = 0
    started = start_prometheus_server({"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)}, registry)
    ignored = sorted(k for k in os.environ if k.startswith(("OTEL_", "TORCH_OTEL_")))
    if ignored:
        out.write(
            f"the demo runs on embedded defaults and ignores {', '.join(ignored[:4])}{' ...' if len(ignored) > 4 else ''}; "
            "to use your settings, run your own script with torch-otel run or import torch_otel.auto\n"
        )
    _bridge.instrument(provider, registry=registry)
    out.write(f"torch-otel {__version__} demo: compiling a small workload with backend={backend!r}...\n")
    out.write("(it hits torch's recompile limit on purpose: torch's warning about that below is expected)\n")
    out.flush()
    t0 = time.perf_counter()
    workload(backend)
    elapsed = time.perf_counter() - t0
    _bridge.uninstrument()
    provider.force_flush()
    spans = list(memory.get_finished_spans())
    roots = [s for s in spans if s.parent is None]
    _print_traces(spans, out)
    out.write(f"\n{len(roots)} compile traces, {len(spans)} spans in {elapsed:.1f} s; OTLP-JSON written to {traces_file}\n")
    if started is not None:
        url = f"http://127.0.0.1:{started[1]}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        shown = [
            ln
            for ln in body.splitlines()
            if ln.startswith("torch_compile_") and "_bucket" not in ln and "_created" not in ln and not ln.endswith(" 0.0")
        ]
        out.write(f"\nmetrics served at {url} ({len(body.splitlines())} lines), e.g.:\n")
        for ln in shown:
            out.write(f"  {ln}\n")
        if serve <= 0:
            out.write("(the demo stops serving as it exits; torch-otel demo --serve 60 keeps /metrics up for a minute)\n")
        else:
            out.write(f"\nserving {url} for {serve:.0f} s (Ctrl-C to stop)\n")
            try:
                time.sleep(serve)
            except KeyboardInterrupt:
                pass
        started[0].shutdown()
    provider.shutdown()
    return 0
