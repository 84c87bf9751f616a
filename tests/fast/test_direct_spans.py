"""Fast tier: a compile's phase spans handed to the SDK's processors finished (torch_otel._otel.direct_spans) are the
spans the SDK's own path makes, field by field; and where that cannot be known (a processor or sampler of the user's,
limits below the span's), the SDK's path is taken. No torch.compile: records from the assembler, as replay makes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from tests.fast.fastkit import B, Collect, E, feed, frame, instant, metrics
from torch_otel._core.errors import internal_error_count
from torch_otel._core.settings import Settings
from torch_otel._model.record import CompileRecord
from torch_otel._otel import direct_spans as direct_spans_module
from torch_otel._otel.direct_spans import MAX_TEXT, EncodedSpan, direct_spans
from torch_otel._otel.wire import Encoder, use_fast_encoding
from torch_otel._parse.trace_log import ReplayStats
from torch_otel._pipeline.replay import replay_file
from torch_otel._sinks.spans import SpanMapper
from torch_otel.sampling import RankSampler


def _record() -> CompileRecord:
    """A frame's compile: nested phases, instants with arguments of every kind (a long text the mapper leaves out)."""
    args = {"cache_state": "miss", "key": "f" * 300, "attributed": "x", "size": 3, "ratio": 0.5, "ok": True}
    _, sink = feed(
        frame(
            "0/1",
            0,
            9_000_000,
            ("bytecode_tracing", 10, 2_000_000),
            ("backend_compile", 2_000_010, 8_000_000, ("create_aot_dispatcher_function", 2_100_000, 7_000_000)),
        )[:-1],
        B("0/1", "inductor_compile", 7_100_000, args=args),
        instant("0/1", "fx_graph_cache_miss", 7_200_000, args={"key": "abc", "components": 4}),
        instant("0/1", "autotune", 7_300_000),
        E("0/1", "inductor_compile", 7_900_000),
        E("0/1", "dynamo", 9_000_000),
        metrics("0/1", guard_count=3),
    )
    return sink.only()


def _spans(provider: TracerProvider, exporter: InMemorySpanExporter, rec: CompileRecord) -> list[dict[str, Any]]:
    mapper = SpanMapper(provider.get_tracer("torch_otel.test", "1.0"), Settings(), live=False)
    mapper.emit(rec)
    provider.force_flush()
    spans = exporter.get_finished_spans()
    names = {s.context.span_id: s.name for s in spans}
    return [_fields(s, names) for s in spans]


def _fields(s: ReadableSpan, names: dict[int, str]) -> dict[str, Any]:
    """Everything an exporter reads of a span, its ids as the names they point to."""
    assert s.parent is None or s.parent.trace_id == s.context.trace_id
    return {
        "name": s.name,
        "parent": names.get(s.parent.span_id) if s.parent else None,
        "parent_remote": s.parent.is_remote if s.parent else None,
        "flags": int(s.context.trace_flags),
        "state": dict(s.context.trace_state or {}),
        "remote": s.context.is_remote,
        "kind": s.kind,
        "times": (s.start_time, s.end_time),
        "attributes": list(dict(s.attributes or {}).items()),  # in order
        "dropped": (s.dropped_attributes, s.dropped_events, s.dropped_links),
        "events": [(e.name, e.timestamp, list(dict(e.attributes or {}).items()), e.dropped_attributes) for e in s.events],
        "links": [(dict(link.attributes or {})) for link in s.links],
        "status": (s.status.status_code, s.status.description),
        "resource": dict(s.resource.attributes),
        "scope": (s.instrumentation_scope.name, s.instrumentation_scope.version) if s.instrumentation_scope else None,
    }


class _Starts(SpanProcessor):
    """A user's processor that reads each span as it starts: the direct path must not skip it."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span.name)


def _provider(sampler: Any = None, limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(sampler=sampler, span_limits=limits)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_the_direct_paths_spans_are_the_sdks_field_by_field():
    rec = _record()
    provider, exporter = _provider()
    assert direct_spans(provider.get_tracer("t")) is not None  # the SDK's defaults: the direct path is taken
    direct = _spans(provider, exporter, rec)
    sdk_provider, sdk_exporter = _provider()
    starts = _Starts()
    sdk_provider.add_span_processor(starts)
    assert direct_spans(sdk_provider.get_tracer("t")) is None  # a processor of the user's: the SDK's path
    sdk = _spans(sdk_provider, sdk_exporter, rec)
    assert len(direct) == 5 and direct == sdk
    assert starts.started[0] == "torch.compile" and len(starts.started) == 5  # the user's processor saw every span
    inductor = next(s for s in direct if s["name"] == "inductor_compile")
    assert ("torch.compile.cache_state", "miss") in inductor["attributes"]
    assert not any(k == "torch.compile.key" for k, _ in inductor["attributes"])  # over 256 characters: left out
    assert [e[0] for e in inductor["events"]] == ["fx_graph_cache_miss", "autotune"]
    assert [s["name"] for s in direct[:2]] == ["bytecode_tracing", "create_aot_dispatcher_function"]  # children first


@pytest.mark.parametrize(
    "sampler, direct, spans",
    [
        (None, True, 5),  # the SDK's default: ParentBased(ALWAYS_ON)
        (ALWAYS_ON, True, 5),
        (ParentBased(TraceIdRatioBased(1.0)), True, 5),
        (RankSampler("0"), True, 5),
        (ParentBased(ALWAYS_ON, local_parent_sampled=ALWAYS_OFF), False, 1),  # a user's choice: the root alone
        (TraceIdRatioBased(1.0), False, 5),  # not known here to keep a child as given: the SDK's path
    ],
)
def test_the_direct_path_is_taken_only_with_a_sampler_known_to_keep_a_sampled_parents_children(sampler, direct, spans):
    rec = _record()
    provider, exporter = _provider(sampler)
    assert (direct_spans(provider.get_tracer("t")) is not None) is direct
    got = _spans(provider, exporter, rec)
    reference, ref_exporter = _provider(sampler)
    reference.add_span_processor(_Starts())
    expected = _spans(reference, ref_exporter, rec)
    assert got == expected and len(got) == spans


def test_limits_below_the_spans_and_a_batch_processor_of_the_users():
    rec = _record()
    few = SpanLimits(max_span_attributes=2)
    provider, exporter = _provider(limits=few)
    assert direct_spans(provider.get_tracer("t")) is None  # fewer attributes than a phase may carry: the SDK's path
    got = _spans(provider, exporter, rec)
    inductor = next(s for s in got if s["name"] == "inductor_compile")
    assert len(inductor["attributes"]) == 2 and inductor["dropped"][0] > 0  # the SDK applied the limit, and counted
    one_event = SpanLimits(max_events=1)
    provider, exporter = _provider(limits=one_event)
    assert direct_spans(provider.get_tracer("t")) is not None  # the events limit is checked span by span
    got = _spans(provider, exporter, rec)
    inductor = next(s for s in got if s["name"] == "inductor_compile")
    assert [e[0] for e in inductor["events"]] == ["autotune"] and inductor["dropped"][1] == 1  # the SDK's path for it
    batch_provider = TracerProvider()
    batch_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    assert direct_spans(batch_provider.get_tracer("t")) is not None
    batch_provider.add_span_processor(_Starts())  # added later: the tracer's path is checked again
    assert direct_spans(batch_provider.get_tracer("t")) is None
    batch_provider.shutdown()


class _Counting(IdGenerator):
    """Ids in a fixed order: the two paths, drawing the same ids in the same order, give the same spans and trees."""

    def __init__(self) -> None:
        self.n = self.traces = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.traces += 1
        return (self.traces << 64) | (self.traces % 2) << 63  # TraceIdRatioBased(0.5) reads the low 64 bits: every other

    def is_trace_id_random(self) -> bool:
        return True


CORPUS = Path(__file__).resolve().parents[1] / "data" / "tlparse-corpus"


def _replayed(log: str, sampler: Any, limits: SpanLimits | None, user_processor: bool, artifacts: bool) -> list[Any]:
    """Every span of a real log's replay (tlparse's corpus), each with its ids, as an exporter reads it."""
    provider = TracerProvider(sampler=sampler, span_limits=limits, id_generator=_Counting())
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if user_processor:
        provider.add_span_processor(_Starts())
    tracer = provider.get_tracer("torch_otel.test", "1.0")
    assert (direct_spans(tracer) is None) is user_processor
    mapper = SpanMapper(tracer, Settings(capture="full" if artifacts else "default"), live=False)
    errors = internal_error_count()
    replay_file(CORPUS / log, [Collect()], ReplayStats(), artifacts=artifacts, tracing=mapper)
    assert internal_error_count() == errors
    spans = exporter.get_finished_spans()
    names = {s.context.span_id: s.name for s in spans}
    return [(s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None, _fields(s, names)) for s in spans]


def _no_sdk_span(**_: Any) -> None:
    raise AssertionError("the SDK's span was built for a root within the limits")


@pytest.mark.parametrize(
    "log, sampler, limits, artifacts",
    [
        ("comp_failure.log.gz", None, None, False),  # failed compiles: an error status, the exception events
        ("cache_hit_miss.log.gz", None, None, True),  # full capture: the artifact events; lazy backwards linked
        ("multi_rank_runtime_rank_0.log.gz", ALWAYS_ON, None, False),  # 12 roots, runtime ones too
        ("multi_rank_runtime_rank_0.log.gz", ParentBased(TraceIdRatioBased(0.5)), None, False),  # some roots dropped
        ("simple.log.gz", ParentBased(ALWAYS_OFF), None, False),  # every root dropped
        ("multi_rank_runtime_rank_0.log.gz", None, SpanLimits(max_span_attributes=40, max_events=2), True),  # roots cut
        ("cache_hit_miss.log.gz", None, SpanLimits(max_attribute_length=260, max_span_attribute_length=300), True),
    ],
)
def test_a_compiles_root_on_the_direct_path_is_the_sdks_root(log, sampler, limits, artifacts, monkeypatch):
    """Each compile of a real log, its root built both ways: the same spans, field by field, with the same ids drawn in
    the same order (the sampler asked alike), and where the SDK's limits cut the root, the same cut and counts."""
    if limits is None:  # within the limits no root takes the SDK's span (it would fail, and count an internal error)
        monkeypatch.setattr(direct_spans_module, "_Span", _no_sdk_span)
    direct = _replayed(log, sampler, limits, user_processor=False, artifacts=artifacts)
    monkeypatch.undo()
    sdk = _replayed(log, sampler, limits, user_processor=True, artifacts=artifacts)
    assert direct == sdk
    roots = [f for *_, parent, f in direct if parent is None]
    if isinstance(sampler, ParentBased) and sampler._root is ALWAYS_OFF:
        assert direct == []
        return
    assert roots
    if isinstance(sampler, ParentBased):  # the ratio: some roots kept, some not (the ids drawn for each alike)
        assert 0 < len(roots) < 12
    if log == "comp_failure.log.gz":
        assert any(r["status"][0] is StatusCode.ERROR and r["status"][1] for r in roots)
    if limits is not None and limits.max_events == 2:
        assert any(r["dropped"][0] > 0 for r in roots)  # the SDK's cut of the attributes (events: the mapper fits them)
        assert max(len(r["events"]) for r in roots) == 2


def _root_calls(span: Any) -> None:
    """What the span mapper does with a root: attributes set again, events, statuses (OK is final)."""
    span.set_attribute("torch.compile.artifact_count", 3)
    span.set_attribute("first", "again")  # set again: it moves last
    span.add_event("torch.compile.graph_break", {"reason": "r", "lines": [1, 2], "none": None}, timestamp=5)
    span.add_event("plain", None, timestamp=6)
    span.set_status(Status(StatusCode.OK))
    span.set_status(Status(StatusCode.ERROR, "ignored: OK is final"))
    span.end(end_time=9)


@pytest.mark.parametrize(
    "limits",
    [None, SpanLimits(max_span_attributes=33, max_link_attributes=1, max_events=1), SpanLimits(max_attribute_length=MAX_TEXT)],
)
def test_a_root_with_a_remote_parent_links_and_statuses_is_the_sdks(limits):
    """Beyond what a log replays: a user's remote parent with a trace state, links (a lazy backward's forward), values
    the SDK cleans (a list, a long text, bytes, None), an attribute set again, statuses; and limits that cut them."""
    got = []
    for path in ("direct", "sdk"):
        provider = TracerProvider(span_limits=limits, id_generator=_Counting())
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("torch_otel.test", "1.0")
        d = direct_spans(tracer)
        assert d is not None and d.roots
        remote = SpanContext(7, 8, True, TraceFlags(TraceFlags.SAMPLED), TraceState([("k", "v")]))
        parent = trace.set_span_in_context(NonRecordingSpan(remote))
        linked = SpanContext(5, 6, False, TraceFlags(TraceFlags.SAMPLED))
        links = [Link(linked, {"torch.compile.link": "forward", "n": 1}), Link(linked, {"torch.compile.link": "ca"})]
        attrs: dict[str, Any] = {"first": 1, "list": ["a", "b"], "long": "x" * 5000, "bytes": b"\x00", "none": None}
        attrs.update({f"a{i}": i for i in range(30)})
        # sequences: of texts (kept as their tuple, cut to the limit), of mixed kinds, of numbers, empty
        attrs.update(
            {"texts": ("ab", "cd"), "long_texts": ["y" * (MAX_TEXT + 2), "g"], "mixed": ["a", 1], "ints": [1, 2], "empty": []}
        )
        if path == "direct":
            span = d.root("torch.compile", parent, attrs, links, 1)
        else:
            span = tracer.start_span("torch.compile", parent, SpanKind.INTERNAL, attrs, links, start_time=1)
        _root_calls(span)
        (s,) = exporter.get_finished_spans()
        got.append((s.context, s.parent, _fields(s, {})))
    assert got[0] == got[1]
    ctx, parent_ctx, fields = got[0]
    assert parent_ctx.span_id == 8 and parent_ctx.is_remote and dict(ctx.trace_state) == {"k": "v"}
    assert fields["status"] == (StatusCode.OK, None) and fields["attributes"][-1] == ("first", "again")
    if limits is None or limits.max_attribute_length == MAX_TEXT:  # no attribute dropped
        assert ("list", ("a", "b")) in fields["attributes"]  # the SDK's tuple
        cut = MAX_TEXT if limits is not None else MAX_TEXT + 2  # cut to the limit where one is set
        assert ("long_texts", ("y" * cut, "g")) in fields["attributes"]
    else:
        assert fields["dropped"][:2] == (9, 1) and fields["links"][0] == {"n": 1}  # the SDK keeps the newest


def test_a_direct_path_made_before_the_bridge_took_over_the_tracers_ids_draws_none_from_the_users_random():
    """The bridge gives an SDK tracer drawing from ``random`` a generator of its own at its first compile
    (torch_otel._otel.ids.own_ids). A direct path made before that (here, asked for first) draws every span's id from
    the tracer's generator as it is when the span is made: the user's ``random`` stream is neither read nor advanced."""
    import random

    provider, _ = _provider()
    tracer = provider.get_tracer("t")
    assert direct_spans(tracer) is not None  # made while the tracer still draws from ``random``
    random.seed(7)
    want = random.getrandbits(64)
    random.seed(7)
    SpanMapper(tracer, Settings(), live=False).emit(_record())
    assert random.getrandbits(64) == want


def test_a_finished_span_reaches_each_processor_as_its_own_on_end_takes_it():
    """The direct path hands a finished span to a batch processor's queue without the two calls around it, and to a
    simple processor's ``on_end``: what each exports is what the SDK's own ``on_end`` chain exports, an unsampled
    (record-only) span included, which neither exports."""

    def provider() -> tuple[TracerProvider, InMemorySpanExporter, InMemorySpanExporter]:
        p, batch, simple = TracerProvider(), InMemorySpanExporter(), InMemorySpanExporter()
        p.add_span_processor(BatchSpanProcessor(batch))
        p.add_span_processor(SimpleSpanProcessor(simple))
        return p, batch, simple

    spans = [
        ReadableSpan(name, context=SpanContext(1, i + 1, False, TraceFlags(flags)), start_time=1, end_time=2)
        for i, (name, flags) in enumerate([("kept", TraceFlags.SAMPLED), ("recorded only", TraceFlags.DEFAULT), ("kept too", 1)])
    ]
    ours, ours_batch, ours_simple = provider()
    theirs, their_batch, their_simple = provider()
    direct = direct_spans(ours.get_tracer("t"))
    assert direct is not None and direct.on_end != ours._active_span_processor.on_end  # noqa: SLF001
    for s in spans:
        direct.on_end(s)
        theirs._active_span_processor.on_end(s)  # noqa: SLF001 - the SDK's own chain
    for p in (ours, theirs):
        p.force_flush()
    names = [[s.name for s in e.get_finished_spans()] for e in (ours_batch, ours_simple, their_batch, their_simple)]
    assert names == [["kept", "kept too"]] * 4
    for p in (ours, theirs):
        p.shutdown()


class _Encoding(SpanExporter):
    """The bridge's OTLP/gRPC span exporter as the bridge sets it up (its own encoder, sending bytes), behind a guard
    like the bridge's (``inner``): keeps each export's request as the bytes it would send, and the spans it was given.
    Nothing is sent (no export reaches its channel)."""

    def __init__(self) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        self.inner = OTLPSpanExporter(endpoint="127.0.0.1:9", insecure=True)
        assert use_fast_encoding(self.inner)
        self.requests: list[bytes] = []
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.requests.append(self.inner._translate_data(spans))  # noqa: SLF001 - what its export sends
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _flat(request: Any) -> list[tuple[Any, Any, Any]]:
    """An export request's spans, each with its resource and scope (as the collector reads them)."""
    return [(rs.resource, ss.scope, span) for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


@pytest.mark.parametrize(
    "log, artifacts",
    [("comp_failure.log.gz", False), ("cache_hit_miss.log.gz", True), ("multi_rank_runtime_rank_0.log.gz", False)],
)
def test_phase_spans_written_as_bytes_are_the_message_the_sdks_path_and_encoder_make(log, artifacts):
    """The default set-up (the SDK's batch processor, the bridge's OTLP/gRPC exporter): a real log's phase spans are
    written as their OTLP bytes as they are made. The requests the exporter sends are the SDK's encoding of the SDK's own
    spans, span by span, with the same ids; and a reader other than the bridge's encoder sees the SDK's span fields."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    provider = TracerProvider(id_generator=_Counting())
    encoding = _Encoding()
    provider.add_span_processor(BatchSpanProcessor(encoding))
    tracer = provider.get_tracer("torch_otel.test", "1.0")
    direct = direct_spans(tracer)
    assert direct is not None and direct.emits is not None  # the bytes are written
    errors = internal_error_count()
    mapper = SpanMapper(tracer, Settings(capture="full" if artifacts else "default"), live=False)
    replay_file(CORPUS / log, [Collect()], ReplayStats(), artifacts=artifacts, tracing=mapper)
    provider.force_flush()
    assert internal_error_count() == errors
    written = [s for s in encoding.spans if type(s) is EncodedSpan]
    assert written and len(written) < len(encoding.spans)  # the phases as bytes; the roots as spans
    sent = [x for r in encoding.requests for x in _flat(ExportTraceServiceRequest.FromString(r))]

    sdk_provider = TracerProvider(id_generator=_Counting())
    sdk_exporter = InMemorySpanExporter()
    sdk_provider.add_span_processor(SimpleSpanProcessor(sdk_exporter))
    sdk_provider.add_span_processor(_Starts())  # a processor of the user's: the SDK's own path for every span
    sdk_tracer = sdk_provider.get_tracer("torch_otel.test", "1.0")
    assert direct_spans(sdk_tracer) is None
    mapper = SpanMapper(sdk_tracer, Settings(capture="full" if artifacts else "default"), live=False)
    replay_file(CORPUS / log, [Collect()], ReplayStats(), artifacts=artifacts, tracing=mapper)
    sdk_spans = sdk_exporter.get_finished_spans()
    assert sent == _flat(encode_spans(sdk_spans))
    # read as a span (a console exporter, the SDK's encoder): the fields the SDK's path gives
    names = {s.context.span_id: s.name for s in sdk_spans}
    assert [_fields(s, names) for s in encoding.spans] == [_fields(s, names) for s in sdk_spans]
    assert ExportTraceServiceRequest.FromString(Encoder().encode(written)) == encode_spans(written)  # made, then encoded
    for p in (provider, sdk_provider):
        p.shutdown()


def test_phase_spans_are_not_written_as_bytes_where_an_exporter_encodes_otherwise():
    """Another exporter beside the bridge's (a console one, a user's): every span is a span, for both."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Encoding()))
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    direct = direct_spans(provider.get_tracer("t"))
    assert direct is not None and direct.emits is None
    only = TracerProvider()
    only.add_span_processor(BatchSpanProcessor(_Encoding()))
    assert direct_spans(only.get_tracer("t")).emits is not None  # type: ignore[union-attr]
    for p in (provider, only):
        p.shutdown()
