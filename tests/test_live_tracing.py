"""Live capture against real torch.compile runs, read back from an InMemorySpanExporter."""

from __future__ import annotations

import logging
from unittest import mock

import pytest
import torch
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

import torch_otel
from tests.helpers import recompile_limit_fail_type
from torch_otel._core.categories import is_recompile_limit_hit

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)


def _events(span, name):
    return [dict(e.attributes) for e in span.events if e.name == name]


def test_one_trace_per_frame_compile_with_phase_children(cap):
    torch._dynamo.config.automatic_dynamic_shapes = False
    fn = torch.compile(lambda x: torch.relu(x) * 2, backend="aot_eager")
    fn(torch.randn(4))
    fn(torch.randn(5))
    roots = cap.roots()
    assert [r.attributes["torch.compile.id"] for r in roots] == ["0/0", "0/1"]
    assert len({r.context.trace_id for r in roots}) == 2, "each compile is a trace of its own"
    root = roots[0]
    assert root.name == "torch.compile" and root.parent is None
    a = root.attributes
    assert a["torch.compile.frame_id"] == 0 and a["torch.compile.frame_compile_id"] == 0
    assert a["torch.compile.attempt"] == 0
    assert a["code.function.name"] == "<lambda>"
    assert a["code.file.path"] == __file__ and isinstance(a["code.line.number"], int)
    # the user's call into compiled code
    assert a["torch.compile.caller.file.path"] == __file__
    assert a["torch.compile.caller.function.name"] == "test_one_trace_per_frame_compile_with_phase_children"
    names = {s.name for s in cap.spans() if s.context.trace_id == root.context.trace_id}
    assert {
        "entire_frame_compile",
        "bytecode_tracing",
        "backend_compile",
        "create_aot_dispatcher_function",
        "build_guards",
    } <= names
    for child in cap.spans():
        if child.context.trace_id == root.context.trace_id and child is not root:
            assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert a["torch.compile.guard_count"] > 0 and a["torch.compile.graph.op_count"] >= 2
    assert "torch.distributed.rank" not in a


def test_graph_break_event_with_reason_and_user_line(cap):
    def f(x):
        y = x.sin()
        print("graph break here")
        return y.cos()

    torch.compile(f, backend="eager")(torch.randn(3))
    root = cap.root("0/0")
    (gb,) = _events(root, "torch.compile.graph_break")
    assert "print" in gb["torch.compile.graph_break.reason"]
    assert gb["torch.compile.graph_break.type"] == "Failed to trace builtin operator"
    assert gb["torch.compile.graph_break.code"].startswith("GB")
    assert gb["code.file.path"] == __file__
    assert gb["code.line.number"] == f.__code__.co_firstlineno + 2
    # the traceback (which quotes source code) never leaves the process
    assert "User code traceback" not in gb["torch.compile.graph_break.reason"]
    assert root.attributes["torch.compile.graph_break_count"] == 1
    # torch's process-wide running total is named as one, never as this compile's count
    assert "torch.compile.num_graph_breaks" not in root.attributes
    assert _events(root, "torch.compile.restart"), "the graph break restarted the analysis"
    assert root.attributes["torch.compile.attempt"] == 1
    # the resumed code after the break is a frame compile of its own
    assert cap.root("1/0").attributes["code.function.name"].startswith("torch_dynamo_resume_in_f")
    assert cap.sample("torch_compile_graph_breaks_total", rank="0", reason=gb["torch.compile.graph_break.code"]) == 1


@pytest.mark.parametrize("logs", [{}, {"recompiles": True}, {"graph_breaks": True}], ids=["none", "recompiles", "graph_breaks"])
def test_graph_breaks_still_reach_the_bridge_after_set_logs(cap, logs, capsys):
    """torch._logging.set_logs() resets torch's loggers: a compile after it still gets its graph-break event."""

    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    torch.compile(f, backend="eager")(torch.randn(3))
    torch._logging.set_logs(**logs)
    try:
        torch._dynamo.reset()
        torch.compile(f, backend="eager")(torch.randn(3))
    finally:
        torch._logging.set_logs()
    roots = cap.roots()
    assert len(roots) == 4  # f and its resume function, twice
    with_breaks = [r for r in roots if _events(r, "torch.compile.graph_break")]
    assert len(with_breaks) == 2, [(r.attributes["torch.compile.id"], r.events) for r in roots]


def test_graph_breaks_reach_the_bridge_under_logging_disable_and_uninstrument_puts_the_loggers_back(cap):
    """logging.disable(WARNING), as an application quiets libraries: torch's graph-break records (debug level) would
    never be made. The bridge's handler is those loggers' only reader, so the bridge has them enabled by their own
    level as each compile starts: the graph break is on the trace. uninstrument takes that back off."""
    import logging

    from torch_otel._capture.attach_table import GRAPH_BREAK_LOGGERS

    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    loggers = [logging.getLogger(n) for n in GRAPH_BREAK_LOGGERS]
    pytests = {lg.name: [h for h in lg.handlers if type(h).__name__ == "LogCaptureHandler"] for lg in loggers}
    for lg in loggers:  # pytest's log capture: off, as in a user's process
        for h in pytests[lg.name]:
            lg.removeHandler(h)
    logging.disable(logging.WARNING)
    try:
        torch.compile(f, backend="eager")(torch.randn(3))
        roots = cap.roots()
        assert [r for r in roots if _events(r, "torch.compile.graph_break")], [r.events for r in roots]
        assert all("isEnabledFor" in vars(lg) for lg in loggers)
        torch_otel.uninstrument()
        assert not [lg.name for lg in loggers if "isEnabledFor" in vars(lg)]  # logging's own again
    finally:
        logging.disable(logging.NOTSET)
        for lg in loggers:
            for h in pytests[lg.name]:
                lg.addHandler(h)


def test_dynamic_shape_recompile_reason(cap):
    torch._dynamo.config.automatic_dynamic_shapes = False
    fn = torch.compile(lambda x: x + 1, backend="eager")
    fn(torch.randn(8))
    fn(torch.randn(16))
    r = cap.root("0/1")
    assert r.attributes["torch.compile.recompile_reason"] == "tensor 'x' size mismatch at index 0. expected 8, actual 16"
    assert r.attributes["torch.compile.recompile_reason.category"] == "size_mismatch"
    assert "torch.compile.recompile_reason" not in cap.root("0/0").attributes


@pytest.mark.parametrize(
    ("first", "second", "category", "needle"),
    [
        (lambda: torch.randn(4), lambda: torch.randn(5), "size_mismatch", "size mismatch"),
        (lambda: torch.randn(4), lambda: torch.randn(4, dtype=torch.float64), "dtype", "dtype mismatch"),
        (lambda: torch.randn(4), lambda: torch.randn(4, requires_grad=True), "requires_grad", "requires_grad mismatch"),
        (lambda: torch.randn(4), lambda: 3, "type", "expected type of"),  # 2.15 names the class, not "a tensor type"
        (lambda: torch.randn(4), lambda: torch.randn(4, 1), "rank", "mismatch"),
    ],
    ids=["size", "dtype", "requires_grad", "type", "ndim"],
)
def test_guard_failure_checks(cap, first, second, category, needle):
    torch._dynamo.config.automatic_dynamic_shapes = False
    fn = torch.compile(lambda x: x * 2, backend="eager")
    fn(first())
    fn(second())
    r = cap.root("0/1")
    assert needle in r.attributes["torch.compile.recompile_reason"]
    assert r.attributes["torch.compile.recompile_reason.category"] == category
    assert cap.sample("torch_compile_recompiles_total", rank="0", reason=category) == 1


def test_recompile_limit_is_impossible_to_miss(cap):
    from torch_otel._demo import hit_recompile_limit

    hit_recompile_limit("eager")  # the demo's: shapes static, the limit 2, four shapes
    r = cap.root("0/2")
    assert r.status.status_code is StatusCode.ERROR
    assert r.status.description.startswith("recompile limit exceeded: shift now runs in eager")
    assert r.attributes["error.type"] == recompile_limit_fail_type()
    assert r.attributes["torch.compile.recompile_limit_exceeded"] is True
    assert r.attributes["torch.compile.eager_fallback"] is True
    assert r.attributes["code.function.name"] == "shift"
    (exc,) = _events(r, "exception")
    # torch's own words, which differ by release ("recompile_limit reached" on 2.10, "Dynamo recompile limit exceeded" after)
    assert is_recompile_limit_hit(None, exc["exception.message"]), exc["exception.message"]
    assert _events(r, "torch.compile.recompile_limit_exceeded")
    assert len(cap.roots()) == 3, "no compile after the limit: the frame runs in eager"
    assert cap.sample("torch_compile_recompile_limit_hits_total", rank="0") == 1
    assert cap.sample("torch_compile_failures_total", rank="0", fail_type=recompile_limit_fail_type()) == 1


def test_dynamo_tracing_error(cap):
    def bad(x):
        return x + torch.randn(3, 3) @ torch.randn(4, 4)

    with pytest.raises(Exception, match="fake tensor"):
        torch.compile(bad, backend="eager")(torch.randn(3))
    r = cap.root("0/0")
    assert r.status.status_code is StatusCode.ERROR
    assert r.attributes["error.type"] == "TorchRuntimeError"
    (exc,) = _events(r, "exception")
    assert exc["exception.type"] == "TorchRuntimeError"
    assert "same reduction dim" in exc["exception.message"]
    assert r.attributes["torch.compile.fail.file.path"] == __file__
    assert r.attributes["torch.compile.fail.line.number"] == bad.__code__.co_firstlineno + 1
    assert cap.sample("torch_compile_frame_duration_seconds_count", rank="0", kind="frame", status="failed") == 1


def test_inductor_lowering_error(cap):
    from torch._inductor import lowering

    def broken(*args, **kwargs):
        raise RuntimeError("lowering exploded on purpose")

    with mock.patch.dict(lowering.lowerings, {torch.ops.aten.sin.default: broken}):
        with pytest.raises(Exception, match="lowering exploded on purpose"):
            torch.compile(lambda x: x.sin() + 1, backend="inductor")(torch.randn(4))
    r = cap.root("0/0")
    assert r.status.status_code is StatusCode.ERROR
    assert r.attributes["error.type"] == "InductorError"
    assert "lowering exploded on purpose" in _events(r, "exception")[0]["exception.message"]
    names = {s.name for s in cap.spans() if s.context.trace_id == r.context.trace_id}
    assert "GraphLowering.run" in names or "compile_fx_inner" in names or "inductor_compile" in names


def test_compiled_autograd_graph_is_its_own_trace_with_recompile(cap):
    from torch._dynamo.utils import counters

    captures_before = counters["compiled_autograd"]["captures"]
    model = torch.nn.Linear(4, 4)
    cm = torch.compile(model, backend="aot_eager")
    with torch._dynamo.compiled_autograd._enable(torch.compile(backend="aot_eager")):
        cm(torch.randn(2, 4)).sum().backward()
        cm(torch.randn(3, 4)).sum().backward()
    ca = cap.roots("compiled_autograd")
    assert [s.attributes["torch.compile.id"] for s in ca] == ["!0/-/-", "!1/-/-"]
    assert all(s.name == "torch.compiled_autograd" and s.parent is None for s in ca)
    assert [s.attributes["torch.compiled_autograd.id"] for s in ca] == [0, 1]
    ca_frames = [r for r in cap.roots() if "torch.compiled_autograd.id" in r.attributes]
    assert ca_frames and all(r.attributes["torch.compile.id"].startswith("!") for r in ca_frames)
    assert {r.attributes["torch.compiled_autograd.id"] for r in ca_frames} == {0, 1}
    # each compiled-autograd frame trace links to its compiled-autograd graph's trace
    for r in ca_frames:
        assert any(link.attributes.get("torch.compile.link") == "compiled_autograd" for link in r.links)
    recompiled = [r for r in cap.roots() if "torch.compile.recompile_reason" in r.attributes]
    assert recompiled, "the second batch size recompiles"
    # torch's own counter, served as is: one capture per compiled-autograd graph (the new shape was a cache miss)
    assert counters["compiled_autograd"]["captures"] - captures_before == len(ca)
    assert cap.sample("torch_compile_compiled_autograd_captures_total", rank="0") == counters["compiled_autograd"]["captures"]


def test_rank_from_fake_process_group(cap):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=3, world_size=4)
    try:
        torch.compile(lambda x: x - 1, backend="eager")(torch.randn(2))
    finally:
        dist.destroy_process_group()
    r = cap.root("0/0")
    assert r.attributes["torch.distributed.rank"] == 3
    assert cap.sample("torch_compile_compiles_total", rank="3", kind="frame", status="ok") == 1


def test_compile_nests_under_the_users_active_span(cap):
    tracer = cap.provider.get_tracer("user")
    with tracer.start_as_current_span("train_step") as step:
        torch.compile(lambda x: x * 3, backend="eager")(torch.randn(2))
    r = cap.root("0/0")
    assert r.parent is not None and r.parent.span_id == step.get_span_context().span_id
    assert r.context.trace_id == step.get_span_context().trace_id


def test_lazy_backward_compile_links_to_forward(cap):
    fn = torch.compile(lambda x: (x * x).sum(), backend="aot_eager")
    fn(torch.randn(3, requires_grad=True)).backward()
    (bwd,) = cap.roots("backward")
    assert bwd.name == "torch.compile.backward"
    assert bwd.attributes["torch.compile.id"] == "0/0"
    assert bwd.attributes["code.function.name"] == "<lambda>"
    fwd = cap.root("0/0")
    assert [link.context.span_id for link in bwd.links] == [fwd.context.span_id]


def test_unique_trace_ids_with_the_sdk_default_id_generator():
    """Dynamo restores `random` around each compile; ids must still differ.

    The bridge's own tracer reads os.urandom; the module-wide `random.getrandbits` is never swapped (the
    worker thread builds spans while the user's code runs), and the provider keeps its generator.
    """
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from torch_otel._sinks import spans as _spans

    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # RandomIdGenerator: draws from `random`
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    swaps = []
    real_private_random = _spans.private_random

    def counted() -> object:
        swaps.append(1)
        return real_private_random()

    with mock.patch.object(_spans, "private_random", counted):
        torch_otel.instrument(provider, registry=None)
        torch._dynamo.config.automatic_dynamic_shapes = False
        fn = torch.compile(lambda x: x + 2, backend="eager")
        for n in range(1, 6):
            fn(torch.randn(n))
        torch_otel.uninstrument()
    assert swaps == []
    assert type(provider.id_generator) is RandomIdGenerator
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert len(roots) == 5
    assert len({s.context.trace_id for s in roots}) == 5
    assert len({s.context.span_id for s in exporter.get_finished_spans()}) == len(exporter.get_finished_spans())


def test_instrument_twice_is_a_noop_and_uses_global_provider():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with mock.patch.object(trace, "get_tracer_provider", return_value=provider):
        first = torch_otel.instrument(registry=CollectorRegistry())
        assert torch_otel.instrument(registry=CollectorRegistry()) is first
        torch.compile(lambda x: x / 2, backend="eager")(torch.randn(2))
    torch_otel.uninstrument()
    assert len([s for s in exporter.get_finished_spans() if s.parent is None]) == 1


def test_bridge_never_raises_into_torch_compile(cap):
    from torch_otel._sinks import spans as _spans

    with mock.patch.object(_spans.SpanMapper, "emit", side_effect=RuntimeError("boom in the exporter")):
        out = torch.compile(lambda x: x + 5, backend="eager")(torch.ones(2))
        torch_otel.force_flush()  # the mapping runs off the compile's path: run it while it is broken
    assert torch.equal(out, torch.full((2,), 6.0))
    assert torch_otel.internal_error_count() >= 1
    # metrics still recorded: one sink failing does not starve the others
    assert cap.sample("torch_compile_compiles_total", rank="0", kind="frame", status="ok") == 1


def test_internal_errors_log_once_to_own_logger(cap):
    from torch_otel._assemble import assembler as _assembler

    lg = logging.getLogger("torch_otel")
    assert lg.propagate is False
    records: list[logging.LogRecord] = []
    h = logging.Handler()
    h.emit = records.append  # type: ignore[method-assign]
    lg.addHandler(h)
    try:
        with mock.patch.object(_assembler.Assembler, "feed", side_effect=ValueError("bad")):
            fn = torch.compile(lambda x: x + 7, backend="eager")
            fn(torch.ones(2))
            fn(torch.ones(3))
            torch_otel.force_flush()
    finally:
        lg.removeHandler(h)
    assert len(records) == 1 and "internal error" in records[0].getMessage()
    assert torch_otel.internal_error_count() > 1


def test_uninstrument_restores_loggers_exactly():
    import torch._dynamo.convert_frame as cf
    import torch._dynamo.utils as du
    import torch._inductor.debug as idbg

    names = ["torch._dynamo.symbolic_convert.__graph_breaks", "torch._dynamo.convert_frame.__graph_breaks", "torch.__trace"]
    # torch's LazyTraceHandler removes itself at the first compile when TORCH_TRACE is unset
    torch.compile(lambda x: x - 1, backend="eager")(torch.ones(1))
    torch._dynamo.reset()
    before = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names}

    import torch._functorch._aot_autograd.graph_compile as gc
    import torch._logging._internal as li

    def functions() -> tuple[object, ...]:
        return (
            du.record_chromium_event_internal,
            du.log_compilation_event,
            cf.get_and_maybe_log_recompilation_reasons,
            idbg.log_collective_schedule,
            idbg._dump_collective_schedule,
            # full capture's trace_structured, where torch defines it, re-exports it and imported it by name
            li.trace_structured,
            torch._logging.trace_structured,
            gc.trace_structured,
        )

    hooks = functions()
    for level in ("default", "full"):
        torch_otel.instrument(TracerProvider(), registry=None, capture=level)
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
        torch_otel.uninstrument()
        torch._dynamo.reset()
        after = {
            n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names
        }
        assert after == before
        assert functions() == hooks


def test_full_capture_adds_artifacts_but_no_payloads_by_default(make_capture):
    cap = make_capture("full")
    torch.compile(lambda x: x.relu() + 1, backend="aot_eager")(torch.randn(3))
    r = cap.root("0/0")
    arts = _events(r, "torch.compile.artifact")
    kinds = {a["torch.compile.artifact.kind"] for a in arts}
    assert {"dynamo_output_graph", "aot_forward_graph"} <= kinds or "dynamo_output_graph" in kinds
    assert all(a["torch.compile.artifact.size"] >= 0 for a in arts)
    assert any("torch.compile.artifact.hash" in a for a in arts)
    # a record's own fields never overwrite the payload size the bridge measured
    storages = [a for a in arts if a["torch.compile.artifact.kind"] == "describe_storage"]
    assert storages and all(a["torch.compile.artifact.size"] == 0 for a in storages)
    assert all(a["torch.compile.artifact.metadata.size"] > 0 for a in storages)
    assert not any("torch.compile.artifact.payload" in a for a in arts)
    # the same phase tree as default capture
    names = {s.name for s in cap.spans() if s.context.trace_id == r.context.trace_id}
    assert {"entire_frame_compile", "bytecode_tracing", "backend_compile"} <= names


def test_payloads_only_on_explicit_opt_in(make_capture):
    cap = make_capture("full", capture_payloads=True, attribute_max_length=200)
    torch.compile(lambda x: x.relu() + 1, backend="aot_eager")(torch.randn(3))
    arts = _events(cap.root("0/0"), "torch.compile.artifact")
    payloads = [a["torch.compile.artifact.payload"] for a in arts if "torch.compile.artifact.payload" in a]
    assert payloads and all(len(p) <= 200 for p in payloads)


def test_redacted_paths_keep_basenames(make_capture):
    cap = make_capture("default", redact_paths=True)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    a = cap.root("0/0").attributes
    assert a["code.file.path"] == "test_live_tracing.py"
    assert a["torch.compile.caller.file.path"] == "test_live_tracing.py"


def test_no_bridge_work_per_step_once_compiled(cap):
    """Steady state: after compilation, a training step never enters the bridge."""
    from torch_otel._assemble import assembler as _assembler

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cm = torch.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)

    def step() -> None:
        opt.zero_grad()
        cm(x).sum().backward()
        opt.step()

    for _ in range(3):
        step()
    assert cap.roots(None)  # compiled, and traced
    with mock.patch.object(_assembler.Assembler, "feed", side_effect=AssertionError("bridge entered")) as feed:
        for _ in range(20):
            step()
        torch_otel.force_flush()  # anything the steps queued would be processed (and fail) here
    assert feed.call_count == 0


def test_compiles_become_spans_off_the_compile_path_without_a_flush(cap):
    """The hooks only queue; the bridge's worker thread builds the spans within about BATCH_DELAY_S."""
    import threading
    import time

    from torch_otel._capture import live_capture as _live

    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")
    for n in (2, 3):  # a compile, then a recompile (dynamic from then on)
        fn(torch.ones(n))
    deadline = time.monotonic() + 10 * _live.BATCH_DELAY_S
    while time.monotonic() < deadline:  # no force_flush: only the worker can build them
        ids = {s.attributes["torch.compile.id"] for s in cap.exporter.get_finished_spans() if "torch.compile.id" in s.attributes}
        if ids >= {"0/0", "0/1"}:
            break
        time.sleep(0.05)
    assert ids >= {"0/0", "0/1"}, ids
    workers = [t for t in threading.enumerate() if t.name == "torch-otel-live"]
    assert workers and all(t.daemon for t in workers)
    torch_otel.uninstrument()  # stops the worker
    for t in workers:
        t.join(2)
    assert not any(t.is_alive() for t in workers)


FRESH_PROCESS_FULL = """
import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import torch_otel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
torch_otel.instrument(provider, capture="full")
torch.compile(lambda x: x.relu() + 1, backend="aot_eager")(torch.randn(3))
torch_otel.force_flush()
roots = [s for s in exporter.get_finished_spans() if s.attributes.get("torch.compile.id") == "0/0"]
kinds = sorted({e.attributes["torch.compile.artifact.kind"] for s in roots for e in s.events if e.name == "torch.compile.artifact"})
print("ARTIFACTS", ",".join(kinds))
"""


def test_full_capture_of_the_first_compile_in_a_fresh_process(tmp_path):
    """torch resets its loggers as the first compile starts: the trace handler must be back in time for its records."""
    from tests.helpers import run_python

    script = tmp_path / "fresh.py"
    script.write_text(FRESH_PROCESS_FULL)
    res = run_python(script)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("ARTIFACTS"))
    kinds = set(line.split(" ", 1)[1].split(","))
    assert {"dynamo_output_graph", "aot_inference_graph", "describe_tensor"} <= kinds, line


def test_the_collective_schedule_hook_wraps_torch_once():
    """Two threads starting inductor compiles at once both try to wrap torch's schedule logger: it is wrapped once."""
    import torch._inductor.debug as idbg

    from torch_otel._pipeline.bridge import current

    torch_otel.instrument(TracerProvider(), registry=None)
    try:
        cap = current().capture
        hooked = idbg.log_collective_schedule
        attach = next(cb for src, cb in cap.attached.waiting if src.name == "collective_schedule")
        attach()  # as a second thread importing inductor would run it
        src = next(src for src in cap.attached.rows if src.name == "collective_schedule")
        src.attach(cap)  # and the row itself, run twice, wraps torch's function once
        assert idbg.log_collective_schedule == hooked
        assert cap.originals["torch._inductor.debug.log_collective_schedule"] is not hooked
        idbg.log_collective_schedule([])  # torch's function runs, once, under the wrapper
    finally:
        torch_otel.uninstrument()


def test_the_bridges_otlp_encoder_gives_the_sdks_message_for_real_compiles(make_capture):
    """The OTLP/gRPC span exporter encodes with torch_otel._otel.wire; a collector must receive what the SDK's encoder
    would have sent. Compared on full capture's spans of real compiles: artifacts, a graph break, a recompile's
    reasons, a backward linked to its forward, and a failed compile's error status and exception event."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from torch_otel._otel.wire import Encoder

    cap = make_capture("full")
    torch._dynamo.config.automatic_dynamic_shapes = False

    def broken(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return (y * 2).sum()

    fn = torch.compile(broken, backend="aot_eager")
    for n in (3, 4):
        fn(torch.randn(n, requires_grad=True)).backward()
    with pytest.raises(Exception, match="fake tensor"):
        torch.compile(lambda x: x + torch.randn(3, 3) @ torch.randn(4, 4), backend="eager")(torch.randn(3))
    spans = cap.spans()
    roots = [s for s in spans if s.attributes and "torch.compile.kind" in s.attributes]
    assert any(s.links for s in roots) and any(s.status.status_code is StatusCode.ERROR for s in roots)
    assert any(e.name == "torch.compile.graph_break" for s in roots for e in s.events)
    assert any(e.name == "torch.compile.artifact" for s in roots for e in s.events)
    encoder = Encoder()
    assert ExportTraceServiceRequest.FromString(encoder.encode(spans)) == encode_spans(spans)
    assert ExportTraceServiceRequest.FromString(encoder.encode(spans)) == encode_spans(spans)  # from what it kept


def test_the_bytes_the_bridges_encoder_writes_reach_a_grpc_receiver_as_the_sdks_message(monkeypatch):
    """The bridge's OTLP/gRPC exporter sends the bytes its encoder wrote, unparsed: a real gRPC server of OTLP's trace
    service receives the message the SDK's encoder makes of the same spans, over a reconnection too."""
    from concurrent import futures

    import grpc
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
    from opentelemetry.sdk.trace.export import SpanExportResult

    from torch_otel._core.ports import free_port
    from torch_otel._otel import wire
    from torch_otel._otel.providers import otlp_exporter

    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 - the service's own name
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    port = free_port()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        for k, v in env.items():  # the SDK's exporter reads its endpoint from the process's environment
            monkeypatch.setenv(k, v)
        exporter = otlp_exporter(env, "traces")
        assert exporter is not None and isinstance(exporter.inner._client, wire._BytesStub)
        spans = wire._probe_spans()
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.inner._initialize_channel_and_stub()  # as the SDK reconnects after UNAVAILABLE
        assert exporter.export(spans[:2]) == SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        server.stop(None)
    assert received == [encode_spans(spans), encode_spans(spans[:2])]
