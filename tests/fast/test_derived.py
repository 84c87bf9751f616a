"""Facts the assembler derives once, before any sink sees a record: the sinks only read them, in any order.

Driven by event sequences (no torch compile). The tracing step is the real span mapper on a real SDK tracer
provider with an in-memory exporter, so the ids on the record are the ids of the exported root spans.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from tests.fast.fastkit import Collect, flatten, frame, metrics
from torch_otel._assemble.assembler import Assembler
from torch_otel._capture.mega_cache import LoadedKeys
from torch_otel._core import errors as _internal
from torch_otel._core.settings import Settings
from torch_otel._model.record import CodeLocation, CompileRecord, Sink
from torch_otel._sinks.spans import SpanMapper
from torch_otel._sinks.summary import RunSummary

CODE = {"co_name": "forward", "co_filename": "/src/model.py", "co_firstlineno": 12}


def _tracing(sampler: Any = None) -> tuple[SpanMapper, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return SpanMapper(provider.get_tracer("fast"), Settings(), live=False), exporter


def _run(*events: object, **kw: Any) -> tuple[Assembler, Collect]:
    sink = Collect()
    asm = Assembler([sink], **kw)
    for ev in flatten(events):
        asm.feed(ev)  # type: ignore[arg-type]
    return asm, sink


def _root(exporter: InMemorySpanExporter, compile_id: str, kind: str = "frame") -> Any:
    (span,) = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes and s.attributes.get("torch.compile.id") == compile_id and s.attributes.get("torch.compile.kind") == kind
    ]
    return span


def test_a_compile_that_stops_before_dynamo_names_its_code_takes_its_frames():
    """The recompile-limit check fails a compile before dynamo reports the code: the frame's earlier compile names it."""
    _, sink = _run(
        frame("0/0", 0, 100),
        metrics("0/0", **CODE),
        frame("0/1", 200, 210),
        metrics("0/1", fail_type="Unsupported", fail_reason="Dynamo recompile limit exceeded"),
        frame("1/0", 300, 310),  # another frame: nothing to inherit
        metrics("1/0"),
    )
    by_id = {r.id_str: r for r in sink.finished}
    assert by_id["0/0"].code == CodeLocation("forward", "/src/model.py", 12)
    assert by_id["0/1"].code == CodeLocation("forward", "/src/model.py", 12)
    assert by_id["1/0"].code == CodeLocation()


def test_a_lazy_backward_has_its_forward_code_attempt_and_trace():
    mapper, exporter = _tracing()
    _, sink = _run(
        frame("0/0", 0, 100, ("compile_attempt_0", 1, 10), ("compile_attempt_1", 11, 90)),
        metrics("0/0", **CODE),
        frame("0/0", 500, 520, root="entire_backward_compile"),
        metrics("0/0", forward=False),
        tracing=mapper,
    )
    fwd, bwd = sink.finished
    assert bwd.kind == "backward" and bwd.forward is not None
    assert bwd.forward.attempt == 1 and fwd.attempt == 1
    assert (bwd.forward.trace_id, bwd.forward.span_id) == (fwd.trace_id, fwd.span_id)
    assert bwd.code == fwd.code == CodeLocation("forward", "/src/model.py", 12)
    span = _root(exporter, "0/0", "backward")
    assert span.attributes["torch.compile.attempt"] == 1
    assert span.attributes["code.function.name"] == "forward"
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [(fwd.trace_id, fwd.span_id)]


def test_a_frame_under_compiled_autograd_links_to_the_graph_compiled_before_it():
    mapper, exporter = _tracing()
    _, sink = _run(
        frame("!0/-/-", 0, 50, root="compiled_autograd"),
        frame("!0/0/0", 60, 90),
        metrics("!0/0/0", **CODE),
        tracing=mapper,
    )
    ca, fr = sink.finished
    assert fr.compiled_autograd is not None and fr.compiled_autograd.compile_id == ca.id_str
    assert [link.context.span_id for link in _root(exporter, "!0/0/0").links] == [ca.span_id]


def test_every_sink_reads_the_trace_ids_of_the_exported_root_whatever_its_place():
    mapper, exporter = _tracing()

    class Seen(Sink):
        def __init__(self) -> None:
            self.ids: list[tuple[int | None, int | None]] = []

        def on_finish(self, record: CompileRecord) -> None:
            self.ids.append((record.trace_id, record.span_id))

    first, last = Seen(), Seen()
    asm = Assembler([first, RunSummary(), last], tracing=mapper)
    for ev in flatten([frame("0/0", 0, 100), metrics("0/0", **CODE), frame("1/0", 200, 300), metrics("1/0")]):
        asm.feed(ev)  # type: ignore[arg-type]
    roots = [_root(exporter, "0/0"), _root(exporter, "1/0")]
    expected = [(s.context.trace_id, s.context.span_id) for s in roots]
    assert first.ids == last.ids == expected
    assert len({t for t, _ in expected}) == 2  # a trace per compile


def test_a_compile_the_sampler_drops_has_no_trace_ids_and_sinks_still_get_it():
    mapper, exporter = _tracing(ALWAYS_OFF)
    _, sink = _run(frame("0/0", 0, 100), metrics("0/0", **CODE), tracing=mapper)
    rec = sink.only()
    assert rec.trace_id is None and rec.span_id is None
    assert exporter.get_finished_spans() == ()


def test_a_failing_tracing_step_is_counted_and_the_sinks_still_get_the_record():
    class Broken:
        def emit(self, record: CompileRecord) -> tuple[int, int] | None:
            raise RuntimeError("exporter exploded")

    before = _internal.internal_error_count()
    _, sink = _run(frame("0/0", 0, 100), metrics("0/0", **CODE), tracing=Broken())
    assert sink.only().trace_id is None
    assert _internal.internal_error_count() == before + 1


def test_mega_cache_hits_are_derived_once_from_the_loaded_keys():
    keys = LoadedKeys()

    class Info:
        artifacts = {"aot_autograd": ["aot-key"], "inductor": ["fx-key"]}

    assert keys.remember(Info()) == 2
    backend = ("backend_compile", 10, 80, ("AOTAutogradCache.inductor_load", 20, 30))
    _, sink = _run(frame("0/0", 0, 100, backend), metrics("0/0", **CODE), cache_loads=keys)
    rec = sink.only()
    assert rec.mega_cache_hits == {}  # torch said nothing about a hit yet
    # the phase's end carries torch's cache state and key, as torch's backend_compile end does
    events = frame("1/0", 200, 300, backend)
    end = next(e for e in events if e.name == "backend_compile" and e.ph == "E")
    end.args = {"cache_state": "hit", "key": "aot-key"}
    _, sink = _run(events, metrics("1/0", **CODE), cache_loads=keys)
    assert sink.only().mega_cache_hits == {"aot_autograd": 1, "fx_graph": 1}


def test_replays_stamp_is_on_the_record_before_any_sink_sees_it():
    seen: list[tuple[int | None, str | None]] = []

    class Reads(Sink):
        def on_start(self, record: CompileRecord) -> None:
            seen.append((record.process_id, record.trace_file))

        def on_finish(self, record: CompileRecord) -> None:
            seen.append((record.process_id, record.torch_version))

    def stamp(record: CompileRecord, ended: bool) -> None:
        if ended:
            record.torch_version = "2.13.0"
        else:
            record.process_id, record.trace_file = 4242, "rank_0.log"

    asm = Assembler([Reads()], stamp=stamp)
    for ev in flatten([frame("0/0", 0, 100), metrics("0/0", **CODE)]):
        asm.feed(ev)  # type: ignore[arg-type]
    assert seen == [(4242, "rank_0.log"), (4242, "2.13.0")]


def test_what_later_compiles_inherit_is_bounded():
    asm, sink = _run(
        [[frame(f"{i}/0", i * 10, i * 10 + 5), metrics(f"{i}/0", **CODE)] for i in range(50)],
        recent=8,
    )
    assert len(sink.finished) == 50
    assert len(asm.derive._forwards) == 8 and len(asm.derive._frame_code) == 8


def test_torchs_cudagraph_skip_reason_is_on_the_root_without_the_users_source():
    """torch's ``cudagraph_skip_reason`` ends with the user's source lines ("Found from : File ..., line N, in f" and
    the line itself, as the H200 run printed it): the root keeps the reason, not the source, unless payloads are
    opted in."""
    reason = (
        "skipping cudagraphs due to mutated inputs (1 instances). Found from : \n"
        '   File "/src/model.py", line 359, in mutates\n'
        "    buf.add_(1)  # secret_scale = 0.125\n"
    )
    for settings, want in (
        (Settings(), "skipping cudagraphs due to mutated inputs (1 instances)"),
        (Settings(capture_payloads=True), reason.strip()),
    ):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        mapper = SpanMapper(provider.get_tracer("fast"), settings, live=False)
        _run(frame("1/0", 0, 100), metrics("1/0", cudagraph_skip_reason=reason, **CODE), tracing=mapper)
        got = _root(exporter, "1/0").attributes["torch.compile.cudagraph_skip_reason"]
        assert got == want
        assert ("secret_scale" in got) == settings.capture_payloads


def test_a_frame_is_named_by_the_class_of_its_own_objects_as_the_user_wrote_it():
    """The rules of docs/span-model.md, "Which frame": a method by its object's class; torch's wrapper by the class of
    what it wraps (a module, a bound method's object), at the user's line that called it; a function as torch names it."""
    from torch_otel._model.record import frame_name

    wrapper = CodeLocation("inner", "/v/site-packages/torch/_dynamo/external_utils.py", 67)
    site = CodeLocation("<module>", "/w/train.py", 40)
    seq = "torch.nn.modules.container.Sequential"
    assert frame_name(wrapper, {"fn": seq}, site) == (CodeLocation("Sequential", "/w/train.py", 40), seq)
    assert frame_name(wrapper, {"fn": seq}, None) == (CodeLocation("Sequential", wrapper.file, 67), seq)  # no user line
    bound = {"fn": "method", "fn.__self__": "__main__.Trainer"}
    assert frame_name(wrapper, bound, site) == (CodeLocation("Trainer", "/w/train.py", 40), "__main__.Trainer")
    assert frame_name(wrapper, {"fn": "function"}, site) == (wrapper, None)  # a function: torch's name stays
    forward = CodeLocation("forward", "/w/model.py", 12)
    assert frame_name(forward, {"self": "model.MyModel"}, site) == (
        CodeLocation("MyModel.forward", "/w/model.py", 12),
        "model.MyModel",
    )
    assert frame_name(forward, {"fn": seq}, site) == (forward, None)  # a user's function holding an ``fn``: not torch's
    assert frame_name(forward, {}, site) == (forward, None)


# transformers 5.x wraps many models' ``forward`` in ``deprecate_kwarg``'s ``wrapped_func(*args, **kwargs)``: a Llama's
# guards, as torch 2.13 logged them (the line replay reads), and the frame the wrapper is
LLAMA_ARGS_GUARD = (
    "| | +- GuardManager: source=L['args'][0], accessed_by=TupleGetItemGuardAccessor(0), type=<class "
    "'transformers.models.llama.modeling_llama.LlamaForCausalLM'>, tag_safe=(False, False)"
)
DEPRECATE_KWARG = CodeLocation("wrapped_func", "/v/lib/python3.11/site-packages/transformers/utils/deprecation.py", 121)


def test_a_librarys_wrapper_of_a_method_is_named_by_the_class_of_its_first_argument_live_and_on_replay():
    """A Llama in transformers 5.x: its frame was ``wrapped_func (deprecation.py:121)``, no model named (the wrapper has
    no ``self``; the model is its ``args[0]``). Replay reads the class from the guard torch logged on ``L['args'][0]``,
    live from the frame's own ``args``; both name it ``LlamaForCausalLM.wrapped_func``. Only a library's wrapper, and
    only for an object: a tensor, a value or a user's own ``*args`` function keep torch's name."""
    from torch_otel._capture.frames import object_classes
    from torch_otel._model.record import frame_name
    from torch_otel._parse.records import FRAME_OBJECT_MARKS, guard_classes

    llama = "transformers.models.llama.modeling_llama.LlamaForCausalLM"
    assert any(mark.decode() in LLAMA_ARGS_GUARD for mark in FRAME_OBJECT_MARKS)  # the reader keeps the line
    replayed = guard_classes([LLAMA_ARGS_GUARD, "| | +- GuardManager: source=L['args'][0].config, type=<class 'x.C'>"])
    assert replayed == {"args[0]": llama}

    class LlamaForCausalLM:  # the model's class as the frame holds it (a module of transformers)
        pass

    LlamaForCausalLM.__module__ = "transformers.models.llama.modeling_llama"
    LlamaForCausalLM.__qualname__ = "LlamaForCausalLM"
    live = object_classes({"args": (LlamaForCausalLM(),), "kwargs": {}})
    assert live == replayed
    site = CodeLocation("<module>", "/w/train.py", 40)
    named = CodeLocation("LlamaForCausalLM.wrapped_func", DEPRECATE_KWARG.file, 121)
    assert frame_name(DEPRECATE_KWARG, live, site) == (named, llama)
    for value in ("torch.Tensor", "torch.nn.parameter.Parameter", "int", "tuple", "function", "torch._C.Generator"):
        assert frame_name(DEPRECATE_KWARG, {"args[0]": value}, site) == (DEPRECATE_KWARG, None), value
    users = CodeLocation("wrapped_func", "/w/decorators.py", 3)  # the user's own wrapper: torch's name stays
    assert frame_name(users, {"args[0]": llama}, site) == (users, None)
    assert object_classes({"args": ()}) == {} and object_classes({"args": [1]}) == {}  # no first argument, no tuple


def test_live_and_replay_name_a_method_by_its_class_and_keep_torchs_code_on_the_span():
    from torch_otel._core.compile_id import parse_compile_id
    from torch_otel._model.events import FrameObjectsEvent

    tracing, exporter = _tracing()
    _, sink = _run(
        frame("0/0", 0, 100),
        FrameObjectsEvent(parse_compile_id("0/0"), {"self": "__main__.Encoder"}),
        metrics("0/0", guard_count=3, **CODE),
        # a recompile that fails before torch builds its guards: named as its frame's earlier compile
        frame("0/1", 200, 210),
        FrameObjectsEvent(parse_compile_id("0/1"), {"self": "__main__.Other"}),  # no guards: not read
        metrics("0/1", fail_type="Unsupported", fail_reason="Dynamo recompile limit exceeded", **CODE),
        # a frame torch skipped before any guard: no class to name it by, live or on replay
        frame("1/0", 300, 310),
        metrics("1/0", has_guarded_code=False, co_name="step", co_filename="/src/model.py", co_firstlineno=40),
        tracing=tracing,
    )
    rec, limited, skipped = sink.finished
    assert rec.code == CodeLocation("Encoder.forward", "/src/model.py", 12)
    assert rec.torch_code == CodeLocation("forward", "/src/model.py", 12) and rec.frame_class == "__main__.Encoder"
    assert (limited.code, limited.torch_code, limited.frame_class) == (rec.code, rec.torch_code, rec.frame_class)
    assert (skipped.code, skipped.torch_code, skipped.frame_class) == (CodeLocation("step", "/src/model.py", 40), None, None)
    a = _root(exporter, "0/0").attributes
    assert (a["code.function.name"], a["torch.compile.code.function.name"], a["torch.compile.frame.class"]) == (
        "Encoder.forward",
        "forward",
        "__main__.Encoder",
    )
