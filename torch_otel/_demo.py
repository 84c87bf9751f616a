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

from ._sinks.summary import RunSummary
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
    hit_recompile_limit(backend)


def hit_recompile_limit(backend: str = "aot_eager") -> None:
    # no docstring: it would move shift from line 53, where the README's demo output shows it
    def shift(x: Any) -> Any:
        return x + 1

    # A recompile-limit hit: the demo's last compiles, and tests/test_collector_config_tail_sampling.py's.
    # Shapes static, the limit 2: a compile, a recompile, the limit hit (the third shape), then eager.
    import torch

    config = torch._dynamo.config
    saved = (config.automatic_dynamic_shapes, config.recompile_limit)
    config.automatic_dynamic_shapes = False
    config.recompile_limit = 2
    try:
        compiled = torch.compile(shift, backend=backend)
        for n in range(1, 5):  # N/0, a recompile N/1, the limit hit N/2, then eager: no compile
            compiled(torch.randn(n))
    finally:  # the settings as they were
        config.automatic_dynamic_shapes, config.recompile_limit = saved


# the series the demo prints (the endpoint serves them all)
SHOWN_SERIES = (
    "torch_compile_compiles_total",
    "torch_compile_seconds_total",
    "torch_compile_recompiles_total",
    "torch_compile_graph_breaks_total",
    "torch_compile_failures_total",
    "torch_compile_recompile_limit_hits_total",
)
NOISE_NS = 1_000_000  # phases shorter than this are folded into one line per parent, unless asked for
LABEL_WIDTH = 56


def _print_traces(spans: list[Any], out: TextIO, all_phases: bool = False) -> None:
    children: dict[int, list[Any]] = defaultdict(list)
    roots = []
    ends = {s.context.span_id: s.end_time for s in spans if s.parent is None}
    for s in spans:
        if s.parent is None:
            roots.append(s)
        elif s.parent.span_id not in ends or s.start_time < ends[s.parent.span_id]:
            children[s.parent.span_id].append(s)
        # else: a root's child from the compile's end on is no phase of it (how often its graph ran, written at exit):
        # the run summary's graph calls say that
    roots.sort(key=lambda s: s.start_time)

    def row(label: str, ns: int, self_ns: int | None) -> None:
        if len(label) > LABEL_WIDTH:
            label = label[: LABEL_WIDTH - 1] + "…"
        own = f"{self_ns / 1e6:9.1f}" if self_ns is not None else ""
        out.write(f"{label:<{LABEL_WIDTH}} {ns / 1e6:9.1f} {own:>9}\n".rstrip() + "\n")

    def line(s: Any, lead: str, branch: str) -> None:
        """The tree, every level; phases under 1 ms folded into one line per parent unless ``all_phases``."""
        kids = sorted(children.get(s.context.span_id, []), key=lambda c: c.start_time)
        took = s.end_time - s.start_time
        row(f"{lead}{branch}{s.name}", took, max(0, took - sum(c.end_time - c.start_time for c in kids)))
        small = (
            []
            if all_phases
            else [c for c in kids if c.end_time - c.start_time < NOISE_NS and not children.get(c.context.span_id)]
        )
        shown = [c for c in kids if c not in small]
        deeper = lead + ("   " if branch == "└─ " else "│  " if branch else "")
        for i, c in enumerate(shown):
            line(c, deeper, "└─ " if i == len(shown) - 1 and not small else "├─ ")
        if small:
            total = sum(c.end_time - c.start_time for c in small)
            row(f"{deeper}└─ ({len(small)} phase{'s' if len(small) > 1 else ''} under 1 ms)", total, None)

    out.write(f"\n{'each compile: its trace, phases in torch order':<{LABEL_WIDTH}} {'total ms':>9} {'self ms':>9}\n")
    compiles = [r for r in roots if "torch.compile.kind" in (r.attributes or {})]
    others = [r for r in roots if "torch.compile.kind" not in (r.attributes or {})]
    for r in compiles:
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
    from ._sinks.span_model import own_root_readers

    readers = own_root_readers()
    for r in others:  # the process's start-up: a trace of its own; its phases as its root says them (no overlap)
        reader = readers.get(r.name)
        part = reader[1](dict(r.attributes or {}), dict(r.resource.attributes), r.start_time, r.end_time) if reader else None
        if part is None:
            continue
        n = len(children.get(r.context.span_id, []))
        out.write(f"\ntrace {r.context.trace_id:032x}  the process's start-up ({n} spans), ended at {part['end']}\n")
        row(f"  {r.name}", r.end_time - r.start_time, None)
        phases = {p: sec for p, sec in part["phases"].items() if sec > 0}
        phases["unattributed"] = part["unattributed_s"]
        shown = sorted(phases.items(), key=lambda kv: -kv[1])
        for i, (phase, sec) in enumerate(shown):
            row(f"  {'└─ ' if i == len(shown) - 1 else '├─ '}{phase}", int(sec * 1e9), None)


def _backend_problem(backend: str) -> str | None:
    """Why ``--backend`` names no backend torch.compile knows (torch would raise at the first compile); None if it does."""
    try:
        import torch._dynamo

        known = sorted(torch._dynamo.list_backends(exclude_tags=()))
    except Exception:  # noqa: BLE001 - torch will say it at the compile, as it would without the check
        return None
    if backend in known:
        return None
    common = [b for b in ("aot_eager", "eager", "inductor") if b in known]
    return f"--backend {backend!r} is not a torch.compile backend this torch has; use one of {', '.join(common)} (torch._dynamo.list_backends() lists them all)"


def run_demo(
    traces_file: str,
    port: int,
    serve: float,
    backend: str,
    out: TextIO = sys.stdout,
    all_phases: bool = False,
    html: str | None = None,
    json_path: str | None = None,
) -> int:
    from ._features.registry import start_process

    start_process({})  # the demo's own start-up, from here, on embedded defaults: its imports, its compiles, its first forward
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from ._core.paths import check_writable, write_error
    from ._core.ports import port_is_free
    from ._otel.exposition import start_prometheus_server
    from ._otel.ids import UrandomIdGenerator
    from ._otel.otlp_json import OTLPJsonFileSpanExporter
    from ._otel.providers import job_resource
    from ._pipeline import bridge as _bridge

    # Every output path is checked before the workload runs: one line each, exit 2 (missing directories are created).
    outputs = [(traces_file, "--traces-file"), (html, "--html"), (json_path, "--json")]
    problems = [line for path, option in outputs if path is not None and (line := check_writable(path, option))]
    backend_problem = _backend_problem(backend)
    if backend_problem:
        problems.append(backend_problem)
    for line in problems:
        print(f"torch-otel demo: {line}", file=sys.stderr)
    if problems:
        return 2
    if os.path.dirname(traces_file):
        os.makedirs(os.path.dirname(traces_file), exist_ok=True)
    if os.path.isfile(traces_file):
        os.remove(traces_file)
    memory = InMemorySpanExporter()
    spans_file = OTLPJsonFileSpanExporter(traces_file, setting="--traces-file")
    provider = TracerProvider(resource=job_resource(), id_generator=UrandomIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(spans_file))
    registry = CollectorRegistry()
    if port and not port_is_free(port):
        out.write(f"port {port} is busy: serving metrics on a free port instead (pass --metrics-port PORT to choose)\n")
        port = 0
    served = start_prometheus_server({"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)}, registry)
    started = None if isinstance(served, str) else served
    ignored = sorted(k for k in os.environ if k.startswith(("OTEL_", "TORCH_OTEL_")))
    if ignored:
        out.write(
            f"the demo runs on embedded defaults and ignores {', '.join(ignored[:4])}{' ...' if len(ignored) > 4 else ''}; "
            "to use your settings, run your own script with torch-otel run or import torch_otel.auto\n"
        )
    summary = RunSummary("live")
    _bridge.instrument(provider, registry=registry, summary=summary)
    out.write(f"torch-otel {__version__} demo: compiling a small workload with backend={backend!r}...\n")
    out.write("(it hits torch's recompile limit on purpose: torch's warning about that below is expected)\n")
    out.flush()
    t0 = time.perf_counter()
    workload(backend)
    elapsed = time.perf_counter() - t0
    _bridge.uninstrument()
    provider.force_flush()
    spans = list(memory.get_finished_spans())
    roots = [s for s in spans if s.parent is None and "torch.compile.kind" in (s.attributes or {})]
    _print_traces(spans, out, all_phases)
    written = f"OTLP-JSON written to {traces_file}" if not spans_file.failed else f"not written to {traces_file} (see above)"
    startup = " and the start-up's" if any(s.parent is None and s.name == "torch.startup" for s in spans) else ""
    out.write(f"\n{len(roots)} compile traces{startup}, {len(spans)} spans in {elapsed:.1f} s; {written}\n")
    if not all_phases:
        out.write("(phases under 1 ms are folded; torch-otel demo --all-phases shows each)\n")
    out.write("\n" + summary.format_text())
    code = 1 if spans_file.failed else 0
    for path, option in outputs[1:]:
        if path:
            try:
                summary.write(path)
            except OSError as exc:  # checked above; a full disk, or a path changed since
                print(f"torch-otel demo: {write_error(path, option, exc)}", file=sys.stderr)
                code = 1
                continue
            out.write(f"summary written to {path}\n")
    if started is not None:
        url = f"http://127.0.0.1:{started[1]}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        shown = [
            ln
            for ln in body.splitlines()
            if ln.startswith(SHOWN_SERIES) and "_bucket" not in ln and "_created" not in ln and not ln.endswith(" 0.0")
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
    return code
