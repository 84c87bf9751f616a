"""Fast tier: one record, one meaning: the metrics, the spans and the run summary say the same number.

- a phase's time is its stretches' durations summed: parallel builds (``compile_file``) each count, as torch's
  ``compile_times()`` sums them; a stretch inside another of its label counts once;
- a frame's or lazy backward's time is torch's ``CompilationMetrics.duration_us``; its root span stays torch's
  outer event;
- a graph break torch could not handle is the compile's failure, not a graph break;
- a compile's CPU counts the processes working for it.

The same, against torch's own record of real runs: tests/test_agreement.py and tests/test_inductor.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from tests.fast.fastkit import B, E, cid, flatten, frame, metrics
from torch_otel._assemble.assembler import Assembler
from torch_otel._core.graph_breaks import graph_break_code, graph_break_type, parse_graph_break
from torch_otel._core.settings import Settings
from torch_otel._model.events import GraphBreakEvent, Origin
from torch_otel._model.record import PhaseNode
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend, TorchCounters
from torch_otel._sinks.spans import SpanMapper
from torch_otel._sinks.summary import RunSummary

MS = 1_000_000


class Run:
    """An assembler with the three readers of a record: the span mapper, the metrics, the run summary."""

    def __init__(self, *events: object) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.registry = CollectorRegistry()
        self.summary = RunSummary("replay")
        metrics_sink = CompileMetrics([PrometheusBackend(self.registry)], run_id="")
        asm = Assembler(
            sinks=[metrics_sink, self.summary], tracing=SpanMapper(provider.get_tracer("fast"), Settings(), live=False)
        )
        for ev in flatten(events):
            asm.feed(ev)  # type: ignore[arg-type]
        asm.flush()

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"rank": "0", **labels})

    def spans(self, name: str) -> list[Any]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def span_s(self, name: str) -> float:
        """The durations of every span of that name, summed."""
        return sum(s.end_time - s.start_time for s in self.spans(name)) / 1e9

    def phase(self, name: str) -> dict[str, Any]:
        return next(p for p in self.summary.to_dict()["phases"] if p["name"] == name)


def _builds(thread: bool) -> list[object]:
    """Three C++ builds on compile workers, overlapping: 40 + 80 + 40 ms of builds in 110 ms of wall time."""
    t = {"thread": 1} if thread else {}
    t2 = {"thread": 2} if thread else {}
    t3 = {"thread": 3} if thread else {}
    return [
        B("0/0", "dynamo", 0),
        B("0/0", "entire_frame_compile", 1 * MS),
        B("0/0", "code_gen", 10 * MS),
        B(None, "compile_file", 20 * MS, **t),
        B(None, "compile_file", 30 * MS, **t2),
        E(None, "compile_file", 60 * MS, **t),
        B("0/0", "async_compile.wait", 70 * MS),
        B(None, "compile_file", 80 * MS, **t3),
        E(None, "compile_file", 110 * MS, **t2),
        E(None, "compile_file", 120 * MS, **t3),
        E("0/0", "async_compile.wait", 125 * MS),
        E("0/0", "code_gen", 130 * MS),
        E("0/0", "entire_frame_compile", 140 * MS),
        metrics("0/0", duration_us=139_000, co_name="f", co_filename="/w/f.py"),
        E("0/0", "dynamo", 150 * MS, final=True),
    ]


@pytest.mark.parametrize("live", [True, False], ids=["live-threads", "replay-no-thread"])
def test_parallel_builds_each_count_in_cpp_compile_as_in_the_spans_the_summary_and_torchs_compile_times(live):
    run = Run(_builds(live))
    each = (60 - 20 + 110 - 30 + 120 - 80) / 1e3  # 0.160 s of builds: what torch's compile_times() sums
    assert run.span_s("compile_file") == pytest.approx(each, abs=1e-9)
    assert run.sample("torch_compile_phase_duration_seconds_sum", phase="cpp_compile") == pytest.approx(each, abs=1e-9)
    assert run.phase("compile_file")["total_s"] == pytest.approx(each) and run.phase("compile_file")["count"] == 3
    # more self time than the 0.139 s of compile time: the line says why
    lines = run.summary.format_text().splitlines()
    (line,) = [ln for ln in lines if ln.startswith("  compile_file")]
    assert "compile_file (ran in parallel)" in line and line.endswith(f"{100 * run.phase('compile_file')['self_s'] / 0.139:.1f}%")
    assert [ln for ln in lines if "(ran in parallel)" in ln] == [line]
    # not the 0.100 s of wall time they covered (20 to 120 ms); the compile waited for them 55 ms
    assert run.sample("torch_compile_phase_duration_seconds_sum", phase="kernel_compile_wait") == pytest.approx(0.055)
    assert run.sample("torch_compile_phase_duration_seconds_count", phase="cpp_compile") == 1  # one per compile


def test_a_stretch_inside_another_of_its_label_counts_once_and_each_stretch_after_another_counts():
    from torch_otel._sinks.metrics import phase_times

    root = PhaseNode(
        "dynamo",
        0,
        100,
        children=[
            PhaseNode("bytecode_tracing", 0, 10),
            PhaseNode("bytecode_tracing", 20, 35),  # a restart traces again: both count
            PhaseNode(
                "backend_compile",
                40,
                90,
                children=[PhaseNode("inductor_compile", 45, 85, children=[PhaseNode("compile_fx_inner", 50, 80)])],
            ),
        ],
    )
    assert phase_times(root) == {"dynamo_tracing": 25, "backend_compile": 50, "inductor": 40}


def _phase_times_by_sets(root: PhaseNode) -> dict[str, int]:
    """The rule as first written (each node's labels against the set of its ancestors' labels): the oracle."""
    from torch_otel._core.categories import PHASES_ALSO, phase_label

    out: dict[str, int] = {}
    stack: list[tuple[PhaseNode, frozenset[str]]] = [(root, frozenset())]
    while stack:
        node, inside = stack.pop()
        labels: tuple[str, ...] = ()
        if node.end_ns is not None:
            phase = phase_label(node.name)
            if phase is not None:
                labels = (phase, *PHASES_ALSO.get(node.name, ()))
        fresh = [label for label in labels if label not in inside]
        for label in fresh:
            out[label] = out.get(label, 0) + max(0, (node.end_ns or node.start_ns) - node.start_ns)
        stack.extend((child, inside.union(fresh) if fresh else inside) for child in node.children)
    return out


_NAMES = [
    "bytecode_tracing",
    "backend_compile",
    "inductor_compile",
    "compile_fx_inner",
    "gc",
    "build_guards",
    "mm_template_autotuning",
    "compile_file",
    "OutputGraph.call_user_compiler",
    "async_compile.wait",
    "unknown",
]


def _trees(depth: int = 3) -> Any:
    node = st.builds(
        lambda name, start, length, ended: PhaseNode(name, start, start + length if ended else None),
        st.sampled_from(_NAMES),
        st.integers(0, 1000),
        st.integers(-5, 500),
        st.booleans(),
    )
    if depth == 0:
        return node
    return st.builds(lambda n, kids: (setattr(n, "children", kids), n)[1], node, st.lists(_trees(depth - 1), max_size=3))


@settings(max_examples=300, deadline=None)
@given(_trees())
def test_phase_times_on_any_tree_are_the_rules_as_first_written(root):
    from torch_otel._sinks.metrics import phase_times

    assert phase_times(root) == _phase_times_by_sets(root)
    assert list(phase_times(root)) == list(_phase_times_by_sets(root))  # in the same order


def test_a_frames_time_is_torchs_duration_us_on_the_metric_the_root_attribute_and_the_summary():
    """torch's outer ``dynamo`` event (the root span) also covers torch recording the compile's metrics: 10 ms here.
    torch's ``duration_us`` is ``entire_frame_compile``'s; that is the compile's time everywhere it is counted."""
    run = Run(
        frame("0/0", 0, 50 * MS, ("entire_frame_compile", 2 * MS, 42 * MS, ("bytecode_tracing", 3 * MS, 40 * MS))),
        metrics("0/0", duration_us=40_000, co_name="f", co_filename="/w/f.py"),
        frame("!0/-/-", 60 * MS, 70 * MS, root="compiled_autograd"),  # no CompilationMetrics: its span's time
    )
    (root,) = run.spans("torch.compile")
    assert (root.start_time, root.end_time) == (0, 50 * MS)  # torch's outer event, as it was
    assert root.attributes["torch.compile.duration_s"] == 0.04
    assert run.spans("torch.compiled_autograd")[0].attributes["torch.compile.duration_s"] == 0.01
    assert run.sample("torch_compile_seconds_total", kind="frame", status="ok") == pytest.approx(0.04)
    assert run.sample("torch_compile_frame_duration_seconds_sum", kind="frame", status="ok") == pytest.approx(0.04)
    assert run.sample("torch_compile_seconds_total", kind="compiled_autograd", status="ok") == pytest.approx(0.01)
    facts = run.summary.to_dict()
    assert facts["wall_s"] == pytest.approx(0.05)  # 0.04 + 0.01
    assert run.phase("torch.compile")["total_s"] == pytest.approx(0.04)
    assert run.phase("torch.compile")["self_s"] == 0.0  # entire_frame_compile (40 ms) is all of it
    assert facts["slowest"][0]["duration_s"] == pytest.approx(0.04)
    assert facts["tree"]["total_s"] == pytest.approx(0.05)


def test_a_lazy_backwards_time_is_its_duration_us_and_an_exports_its_root():
    run = Run(
        frame("0/0", 0, 10 * MS, root="entire_backward_compile"),
        metrics("0/0", forward=False, duration_us=9_000),
        frame(None, 20 * MS, 30 * MS, root="export"),
        metrics(None, duration_us=1_000),  # torch's record of the capture inside it: not the export's time
    )
    assert run.sample("torch_compile_seconds_total", kind="backward", status="ok") == pytest.approx(0.009)
    assert run.sample("torch_compile_seconds_total", kind="export", status="ok") == pytest.approx(0.01)


UNHANDLED = """Graph break in user code at /w/f.py:13
Graph Break Reason: Failed to handle graph break gracefully. Skipping the function and falling back to eager. \
Graph break encountered:

Call to `torch._dynamo.graph_break()`
  Explanation: User-inserted graph break. Message: None
  Hint: Remove the `torch._dynamo.graph_break()` call.

*** While handling this graph break, another graph break occurred: ***

Graph break under GenericContextWrappingVariable
  Explanation: Attempted to graph break in an active context manager(s) that doesn't support graph breaking.

User code traceback:
  File "/w/f.py", line 13, in f
"""

HANDLED = """Graph break in user code at /w/f.py:3
Graph Break Reason: Call to `torch._dynamo.graph_break()`
  Explanation: User-inserted graph break. Message: None

User code traceback:
  File "/w/f.py", line 3, in g
"""


def _gb(compile_id: str, text: str) -> GraphBreakEvent:
    gb = parse_graph_break(text)
    return GraphBreakEvent(cid(compile_id), gb.reason, gb.gb_type, gb.filename, gb.lineno, gb.skipped_frame)


def test_a_graph_break_torch_could_not_handle_is_the_compiles_failure_and_not_a_graph_break():
    """torch counts it once, in ``counters["unimplemented"]`` (the failure), never in ``counters["graph_break"]``."""
    assert parse_graph_break(UNHANDLED).skipped_frame and not parse_graph_break(HANDLED).skipped_frame
    run = Run(
        frame("0/0", 0, 10 * MS, ("bytecode_tracing", 1 * MS, 9 * MS))[:2],
        _gb("0/0", UNHANDLED),
        frame("0/0", 0, 10 * MS, ("bytecode_tracing", 1 * MS, 9 * MS))[2:],
        metrics("0/0", fail_type="Unsupported", fail_reason="Call to ...", has_guarded_code=False, duration_us=9_000),
        frame("1/0", 20 * MS, 30 * MS),
        _gb("1/0", HANDLED),
        metrics("1/0", duration_us=9_000),
    )
    assert run.sample("torch_compile_failures_total", fail_type="Unsupported") == 1
    assert run.sample("torch_compile_graph_breaks_total", reason="GB0025") == 1  # the handled one only
    failed = next(s for s in run.spans("torch.compile") if s.attributes["torch.compile.id"] == "0/0")
    assert failed.attributes["torch.compile.graph_break_count"] == 0 and failed.attributes["error.type"] == "Unsupported"
    (event,) = [e for e in failed.events if e.name == "torch.compile.unhandled_graph_break"]
    assert event.attributes["torch.compile.graph_break.code"] == "GB0025"
    assert event.attributes["torch.compile.eager_fallback"] is True and event.attributes["code.line.number"] == 13
    assert "torch.compile.graph_break" not in [e.name for e in failed.events]
    facts = run.summary.to_dict()
    assert facts["graph_breaks"]["total"] == 1 and facts["graph_breaks"]["unhandled"] == 1
    assert facts["failures"]["total"] == 1 and facts["eager_fallbacks"] == 1
    text = run.summary.format_text()
    assert "graph breaks: 1 (GB0025 1); 1 not handled (their frames run in eager)" in text
    assert text.splitlines()[1:3] == [
        "FRAMES LEFT IN EAGER: 1: torch runs their whole work uncompiled",
        "  (torch.compile): a graph break torch could not handle at f.py:13: torch skipped the whole frame",
    ]


CANNOT_RESUME = """Graph break in user code at /w/modeling_utils.py:4778
Graph Break Reason: Encountered graph break that we cannot resume from. Compiling up to the previous resumable state, then skipping the rest of the function. Graph break encountered:

logging.Logger method not supported for non-export cases
  Explanation: logging.Logger methods are not supported for non-export cases.

User code traceback:
  File "/w/modeling_utils.py", line 4778, in loss_function
"""


def _ends(compile_id: str, text: str) -> GraphBreakEvent:
    gb = parse_graph_break(text)
    return GraphBreakEvent(
        cid(compile_id), gb.reason, gb.gb_type, gb.filename, gb.lineno, gb.skipped_frame, ends_frame=gb.ends_frame
    )


def test_a_graph_break_torch_cannot_resume_from_ends_its_frame_and_is_not_in_torchs_graph_break_count():
    """torch counts it in ``counters["unimplemented"]``, not ``counters["graph_break"]``: so do the metric and the
    summary's total; it is its own kind on the span and in the summary, which says the rest ran in eager."""
    assert parse_graph_break(CANNOT_RESUME).ends_frame and not parse_graph_break(CANNOT_RESUME).skipped_frame
    assert not parse_graph_break(HANDLED).ends_frame and not parse_graph_break(UNHANDLED).ends_frame
    run = Run(
        frame("0/0", 0, 10 * MS, ("bytecode_tracing", 1 * MS, 9 * MS))[:2],
        _ends("0/0", CANNOT_RESUME),
        _gb("0/0", HANDLED),
        frame("0/0", 0, 10 * MS, ("bytecode_tracing", 1 * MS, 9 * MS))[2:],
        metrics("0/0", duration_us=9_000),
    )
    assert run.sample("torch_compile_graph_breaks_total", reason="GB0025") == 1
    assert run.sample("torch_compile_graph_breaks_total", reason="GB0291") in (None, 0)
    root = next(s for s in run.spans("torch.compile"))
    assert root.attributes["torch.compile.graph_break_count"] == 1 and "error.type" not in root.attributes
    events = [e for e in root.events if e.name == "torch.compile.graph_break"]
    assert [e.attributes.get("torch.compile.graph_break.ends_frame") for e in events] == [True, None]
    facts = run.summary.to_dict()
    gb = facts["graph_breaks"]
    assert (gb["total"], gb["ends_frame"], gb["unhandled"], facts["eager_fallbacks"]) == (1, 1, 0, 0)
    (row,) = gb["ends_frame_by_location"]
    assert (row["code"], row["line"], row["count"]) == ("GB0291", 4778, 1)
    text = run.summary.format_text()
    assert "graph breaks: 1 (GB0025 1); 1 more ended their frame (the rest of the function ran in eager)" in text
    assert "GB0291 at modeling_utils.py:4778 ended (torch.compile): the rest of it ran in eager" in text


def test_a_compiles_cpu_is_its_process_and_the_processes_working_for_it():
    begin = B("0/0", "dynamo", 0, origin=Origin(cpu_ns=5 * MS, child_cpu_ns=2 * MS))
    end = E("0/0", "dynamo", 100 * MS, final=True, cpu_ns=305 * MS, child_cpu_ns=202 * MS)
    run = Run(begin, end)
    facts = run.summary.to_dict()
    assert facts["cpu_s"] == pytest.approx(0.3) and facts["cpu_child_processes_s"] == pytest.approx(0.2)


def test_torchs_compiled_autograd_compiles_counter_is_not_served():
    """torch adds to it only in a helper of its own tests: the compiled-autograd graphs are the records of that
    kind, counted in ``torch_compile_compiles_total{kind="compiled_autograd"}``."""
    assert [s.name for s in TorchCounters.FAMILIES] == ["torch_compile_compiled_autograd_captures"]
    run = Run(frame("!0/-/-", 0, 10 * MS, root="compiled_autograd"), frame("!1/-/-", 20 * MS, 30 * MS, root="compiled_autograd"))
    assert run.sample("torch_compile_compiles_total", kind="compiled_autograd", status="ok") == 2


# torch 2.13's record of a graph break inside ``torch.utils.checkpoint`` (tlparse's dynamo_graph_break_reason): a line
# of context between its type and its explanation
IN_A_HOP = """Graph break in user code at /tmp/c1c.py:8
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Call to `torch._dynamo.graph_break()`
  Higher Order Operator: torch.utils.checkpoint.checkpoint
  Explanation: User-inserted graph break. Message: None
  Hint: Remove the `torch._dynamo.graph_break()` call.

  Developer debug context: Called `torch._dynamo.graph_break()` with args `[]`, kwargs `{}`

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0025.html
"""


def test_a_graph_break_inside_a_higher_order_op_keeps_its_type_not_the_ops_name():
    """torch's counters key it by "Call to `torch._dynamo.graph_break()`", as tlparse shows; the op's line is context."""
    assert graph_break_type(IN_A_HOP) == "Call to `torch._dynamo.graph_break()`"
    assert graph_break_code(graph_break_type(IN_A_HOP), IN_A_HOP) == "GB0025"
    assert graph_break_type(IN_A_HOP.replace("Call to `torch._dynamo.graph_break()`", "A type no release has")) == (
        "A type no release has"  # unknown to the registry: still the line above the context, not the op's name
    )
