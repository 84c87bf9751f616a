"""What the bridge reports agrees with torch's own record: phase sums, event times, events kept, categories, privacy.

Each test compiles for real (live, through the ``cap`` fixture) and, where a log is the input, replays a real
``TORCH_TRACE`` log of the same workload.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from tests.helpers import run_cli, run_python
from torch_otel._core.categories import phase_label
from torch_otel._core.settings import Settings
from torch_otel._otel.otlp_json import OTLPJsonFileSpanExporter
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.build import Pipeline
from torch_otel._pipeline.replay import replay_paths
from torch_otel._sinks.metrics import CompileMetrics, PrometheusBackend
from torch_otel._sinks.spans import SpanMapper

# A graph break makes dynamo restart (it traces the frame twice: two bytecode_tracing stretches), and the backward
# compiles lazily: several stretches of the same phase in one compile.
WORKLOAD = """
import torch
torch._dynamo.config.automatic_dynamic_shapes = False

def f(x):
    y = x.sin() * 2
    torch._dynamo.graph_break()
    return (y.cos() + 1).sum()

cf = torch.compile(f, backend="aot_eager")
for n in (4, 8):
    cf(torch.randn(n, requires_grad=True)).backward()
"""


def _phase_of(s) -> str | None:  # type: ignore[no-untyped-def]
    phase = phase_label(s.name)
    if phase is None and s.attributes and s.attributes.get("torch.compile.kind") in ("backward", "compiled_autograd"):
        phase = {"backward": "backward_compile", "compiled_autograd": "compiled_autograd"}[s.attributes["torch.compile.kind"]]
    return phase


def _phase_time_in_spans(spans: list) -> dict[str, float]:  # type: ignore[type-arg]
    """Per phase label: its spans' durations summed, compile by compile, a span inside another of its label (an
    ancestor) not counted again. Independent of the bridge's own code: read from the spans' parents alone."""
    by_id = {s.context.span_id: s for s in spans}
    out: dict[str, float] = {}
    for s in spans:
        phase = _phase_of(s)
        if phase is None:
            continue
        parent = by_id.get(s.parent.span_id) if s.parent is not None else None
        while parent is not None and _phase_of(parent) != phase:
            parent = by_id.get(parent.parent.span_id) if parent.parent is not None else None
        if parent is None:  # no ancestor of the same label
            out[phase] = out.get(phase, 0.0) + (s.end_time - s.start_time) / 1e9
    return out


def _phase_sums(registry: CollectorRegistry) -> dict[str, float]:
    out = {}
    for metric in registry.collect():
        if metric.name == "torch_compile_phase_duration_seconds":
            for s in metric.samples:
                if s.name.endswith("_sum"):
                    out[s.labels["phase"]] = s.value
    return out


def _assert_events_inside_their_roots(spans: list) -> None:  # type: ignore[type-arg]
    roots = [s for s in spans if s.attributes and "torch.compile.kind" in s.attributes]
    assert roots
    for root in roots:
        for e in root.events:
            assert root.start_time <= e.timestamp <= root.end_time, (root.attributes["torch.compile.id"], e.name)


def _record_log(tmp_path: Path) -> Path:
    trace_dir = tmp_path / "trace"
    res = run_python("-c", {"TORCH_TRACE": str(trace_dir)}, args=[WORKLOAD])
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = trace_dir.glob("*.log")
    return log


def _replay(log: Path, capture: str = "default") -> tuple[list, CollectorRegistry]:  # type: ignore[type-arg]
    exporter, provider, registry = InMemorySpanExporter(), TracerProvider(), CollectorRegistry()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    pipeline = Pipeline(
        [CompileMetrics([PrometheusBackend(registry)])], tracing=SpanMapper(provider.get_tracer("t"), Settings(), live=False)
    )
    code = replay_paths([str(log)], pipeline, ReplayStats(), artifacts=capture == "full")
    assert code == 0
    return list(exporter.get_finished_spans()), registry


def test_phase_histogram_sums_equal_the_time_its_spans_cover_live(cap):
    exec(compile(WORKLOAD, "workload", "exec"), {})
    spans = cap.spans()
    restarted = [s for s in spans if s.name == "bytecode_tracing"]
    assert len(restarted) > len({s.context.trace_id for s in restarted})  # some compile traced twice (a restart)
    expected, got = _phase_time_in_spans(spans), _phase_sums(cap.registry)
    assert expected and set(got) == set(expected), (sorted(got), sorted(expected))
    for phase, seconds in expected.items():
        assert got[phase] == pytest.approx(seconds, rel=1e-9, abs=1e-6), phase


def test_phase_histogram_sums_equal_the_time_its_spans_cover_on_replay(tmp_path):
    spans, registry = _replay(_record_log(tmp_path))
    expected, got = _phase_time_in_spans(spans), _phase_sums(registry)
    assert expected and set(got) == set(expected)
    for phase, seconds in expected.items():
        assert got[phase] == pytest.approx(seconds, rel=1e-9, abs=1e-6), phase


def test_every_root_event_lies_inside_its_compile_live_and_on_replay(cap, tmp_path):
    exec(compile(WORKLOAD, "workload", "exec"), {})
    live = cap.spans()
    names = {e.name for s in live for e in s.events}
    assert {"torch.compile.graph_break", "torch.compile.restart"} <= names, names
    _assert_events_inside_their_roots(live)
    replayed, _ = _replay(_record_log(tmp_path), capture="full")
    assert {"torch.compile.graph_break", "torch.compile.artifact"} <= {e.name for s in replayed for e in s.events}
    _assert_events_inside_their_roots(replayed)


def test_bulk_records_never_crowd_out_graph_breaks_at_full_capture(make_capture):
    cap = make_capture("full")

    class Deep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(30)])
            self.b = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(30)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            torch._dynamo.graph_break()
            out: torch.Tensor = self.b(h)
            return out

    torch.compile(Deep(), backend="eager")(torch.randn(2, 8))
    root = cap.root("0/0")
    names = [e.name for e in root.events]
    assert "torch.compile.graph_break" in names and "torch.compile.restart" in names
    count = root.attributes["torch.compile.artifact_count"]
    attached = names.count("torch.compile.artifact")
    assert count > 128 and attached + root.attributes["torch.compile.artifacts_not_attached"] == count
    assert root.dropped_events == 0  # nothing the user needs was dropped by the SDK's event limit


def test_the_otlp_json_file_counts_what_the_sdk_dropped(tmp_path):
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider(span_limits=SpanLimits(max_events=2, max_span_attributes=1))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonFileSpanExporter(str(path))))
    span = provider.get_tracer("t").start_span("s", attributes={"a": 1, "b": 2, "c": 3})
    for i in range(5):
        span.add_event(f"e{i}")
    span.end()
    provider.shutdown()
    (written,) = json.loads(path.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert written["droppedEventsCount"] == 3 and written["droppedAttributesCount"] == 2
    assert [e["name"] for e in written["events"]] == ["e3", "e4"]


def test_grad_mode_recompile_is_a_global_state_recompile(cap):
    fn = torch.compile(lambda x: x.sin(), backend="eager")
    x = torch.randn(3, requires_grad=True)
    fn(x)
    with torch.no_grad():  # train to eval: a very common recompile
        fn(x)
    r = cap.root("0/1")
    assert r.attributes["torch.compile.recompile_reason"] == "GLOBAL_STATE changed: grad_mode"
    assert r.attributes["torch.compile.recompile_reason.category"] == "global_state"
    assert cap.sample("torch_compile_recompiles_total", rank="0", reason="global_state") == 1


FLAG = False


def test_a_boolean_value_guard_keeps_no_literal(cap):
    global FLAG

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if FLAG else x + 1

    fn = torch.compile(f, backend="eager")
    fn(torch.randn(3))
    FLAG = True
    try:
        fn(torch.randn(3))
    finally:
        FLAG = False
    reason = cap.root("0/1").attributes["torch.compile.recompile_reason"]
    assert reason.endswith("== <value>") and "False" not in reason and "True" not in reason, reason


class _Copied:
    """``copy.deepcopy`` (the standard library) calls the compiled function: a library between it and the user."""

    x = torch.ones(3)
    __deepcopy__ = staticmethod(torch.compile(lambda memo: _Copied.x.sin(), backend="eager"))


def test_the_caller_is_the_users_line_not_a_librarys(cap):
    import copy

    copy.deepcopy(_Copied())  # the user's line
    a = cap.root("0/0").attributes
    assert a["torch.compile.caller.function.name"] == "test_the_caller_is_the_users_line_not_a_librarys"
    assert a["torch.compile.caller.file.path"] == __file__
    stack = a["code.stacktrace"].splitlines()
    assert stack[-1].startswith(f'  File "{copy.__file__}"') and stack[-1].endswith("in deepcopy"), stack
    assert stack[-2].startswith(f'  File "{__file__}"'), stack


def test_the_caller_is_the_users_line_past_more_library_frames_than_the_stack_keeps(cap):
    """Deep inside a library (a transformers model's layers: a Mixtral's experts sit eight frames and more below the
    user's line), the walk goes on past the frames ``code.stacktrace`` keeps until it reaches the user's line, as
    torch's own record of the compile's stack (replay's) does."""
    import copy

    from torch_otel._capture.frames import MAX_STACK

    nested: list[object] = [_Copied()]
    for _ in range(MAX_STACK):  # each level is two of copy's frames: deepcopy, then _deepcopy_list
        nested = [nested]
    here = sys._getframe()
    line = here.f_lineno + 1
    copy.deepcopy(nested)  # the user's line
    a = cap.root("0/0").attributes
    assert a["torch.compile.caller.function.name"] == here.f_code.co_name
    assert a["torch.compile.caller.file.path"] == __file__
    assert a["torch.compile.caller.line.number"] == line
    stack = a["code.stacktrace"].splitlines()
    assert len(stack) == MAX_STACK and all(f'File "{copy.__file__}"' in line for line in stack), stack  # the nearest kept


RECOMPILES = """
import torch
torch._dynamo.config.automatic_dynamic_shapes = False
f = torch.compile(lambda x: x.sin() + 1, backend="eager")
for n in (1, 2, 3):
    f(torch.randn(n))
"""


def test_every_recompile_reason_is_kept_live_on_replay_and_as_tlparse_lists_them(cap, tmp_path):
    exec(compile(RECOMPILES, "workload", "exec"), {})
    live = cap.root("0/2").attributes
    assert list(live["torch.compile.recompile_reasons.categories"]) == ["size_mismatch", "size_mismatch"]
    reasons = list(live["torch.compile.recompile_reasons"])
    assert len(reasons) == 2 and all("size mismatch at index 0" in r for r in reasons), reasons
    assert live["torch.compile.recompile_reason"] == reasons[0]  # torch's own field keeps the first
    assert live["torch.compile.is_recompile"] is True and cap.root("0/0").attributes["torch.compile.is_recompile"] is False
    # The same run's TORCH_TRACE log: replay keeps them all, as tlparse does.
    trace_dir = tmp_path / "trace"
    res = run_python("-c", {"TORCH_TRACE": str(trace_dir)}, args=[RECOMPILES])
    assert res.returncode == 0, res.stderr[-3000:]
    (log,) = trace_dir.glob("*.log")
    spans, _ = _replay(log)
    replayed = next(s for s in spans if s.attributes and s.attributes.get("torch.compile.id") == "0/2").attributes
    assert list(replayed["torch.compile.recompile_reasons"]) == reasons
    tl = _tlparse_recompile_reasons(log, tmp_path / "tl")
    assert [r.split(":", 1)[1].strip() if r[:1].isdigit() else r for r in tl] == reasons, tl


def _tlparse_recompile_reasons(log: Path, out: Path) -> list[str]:
    """The reasons tlparse (the reference reader) writes for compile 0/2."""
    import shutil
    import subprocess

    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    # tlparse, the reference reader: another program than the bridge's
    subprocess.run([tlparse, str(log), "-o", str(out), "--no-browser", "--overwrite"], check=True, capture_output=True)
    (found,) = [p for p in (out / "-_0_2_0").glob("recompile_reasons*.json")]
    data = json.loads(found.read_text())
    return [data] if isinstance(data, str) else list(data)


def test_ddp_split_backwards_are_told_apart_live_and_on_replay(tmp_path):
    """DDP's optimizer splits one frame into a graph per bucket, each with a lazy backward under the same compile id."""
    from tests.helpers import WORKLOADS, read_otlp_json_spans, run, torchrun_under_torch_otel

    env = {
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCH_OTEL_TRACES_FILE": str(tmp_path / "live.jsonl"),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OMP_NUM_THREADS": "1",
    }
    argv = torchrun_under_torch_otel(2, WORKLOADS / "ddp_buckets.py")
    r = run(argv, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rr = run_cli("replay", str(tmp_path / "trace"), "-o", str(tmp_path / "replay.jsonl"), script=True)
    assert rr.returncode == 0, rr.stderr
    for name in ("live.jsonl", "replay.jsonl"):
        spans = read_otlp_json_spans(tmp_path / name)
        frames = [s["attrs"] for s in spans if s["name"] == "torch.compile"]
        backs = [s["attrs"] for s in spans if s["name"] == "torch.compile.backward"]
        assert len(frames) == 2 and all(a["torch.compile.aot_graph_count"] == "6" for a in frames), (name, frames)
        assert len(backs) == 12 and {a["torch.compile.id"] for a in backs} == {"0/0"}
        for rank in ("0", "1"):
            mine = [a for a in backs if a.get("torch.distributed.rank", rank) == rank] if name == "live.jsonl" else backs
            indices = sorted(int(a["torch.compile.backward.index"]) for a in mine)
            assert indices == (list(range(6)) if name == "live.jsonl" else sorted(list(range(6)) * 2)), (name, indices)
            if name == "live.jsonl":  # torch's own name of each bucket's graph, distinct per backward
                assert len({a["torch.compile.aot_graph"] for a in mine}) == 6
