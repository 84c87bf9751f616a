"""The bridge's OTLP span encoder (torch_otel._otel.wire) gives the message the SDK's encoder gives, for any spans.

What a collector receives must not depend on which encoder ran: each test compares the two messages, parsed, field
for field. The bridge's spans from real compiles are compared the same way in tests/test_live_tracing.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from torch_otel._otel import wire
from torch_otel._otel.providers import otlp_exporter


def _fast(spans: Any, encoder: wire.Encoder | None = None) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString((encoder or wire.Encoder()).encode(spans))


def test_this_sdk_encodes_the_probe_spans_as_the_bridge_does_so_the_fast_encoder_is_used():
    """Where they disagree (an SDK that encodes a field the bridge does not know), the bridge keeps the SDK's encoder;
    on the SDK the package is tested with, they must agree, or every export pays the SDK's price."""
    spans = wire._probe_spans()
    assert len(spans) >= 4 and any(s.events for s in spans) and any(s.links for s in spans)
    assert _fast(spans) == sdk_encode_spans(spans)
    assert wire._agrees()


scalars = st.one_of(
    st.text(max_size=300),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
values = st.one_of(
    scalars,
    st.lists(st.text(max_size=20), max_size=4),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
    st.lists(st.booleans(), max_size=3),
    st.lists(st.floats(allow_nan=False), max_size=3),
)
attributes = st.dictionaries(st.text(min_size=1, max_size=30), values, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    root_attrs=attributes,
    child_attrs=attributes,
    event_attrs=st.lists(attributes, max_size=3),
    link_attrs=st.lists(attributes, max_size=2),
    status=st.sampled_from([None, (StatusCode.OK, None), (StatusCode.ERROR, None), (StatusCode.ERROR, "it failed: \u00e9")]),
    remote=st.booleans(),
    kind=st.sampled_from(list(SpanKind)),
    times=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
)
def test_any_spans_encode_to_the_sdks_message(root_attrs, child_attrs, event_attrs, link_attrs, status, remote, kind, times):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource({"service.name": "svc", "k": 1}),
        span_limits=SpanLimits(max_span_attributes=8, max_event_attributes=8, max_link_attributes=8, max_events=2),
        shutdown_on_exit=False,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("torch_otel", "9.9")
    start, end = sorted(times)
    parent = SpanContext(7, 9, remote, TraceFlags(1), TraceState([("a", "b")]) if remote else None)
    links = [Link(SpanContext(11 + i, 13 + i, i % 2 == 1, TraceFlags(1)), a) for i, a in enumerate(link_attrs)]
    quiet = logging.getLogger("opentelemetry.attributes")
    before = quiet.level
    quiet.setLevel(logging.ERROR)  # the SDK says so when a limit drops an attribute: the drops are what is tested
    try:
        root = tracer.start_span(
            "torch.compile",
            context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
            kind=kind,
            attributes=root_attrs,
            links=links,
            start_time=start,
        )
        for i, a in enumerate(event_attrs):
            root.add_event(f"event {i}", a, timestamp=start + i)
        child = tracer.start_span("phase", context=trace.set_span_in_context(root), attributes=child_attrs, start_time=start)
        child.end(end_time=end)
        if status is not None:
            root.set_status(Status(*status))
        root.end(end_time=end)
    finally:
        quiet.setLevel(before)
    spans = exporter.get_finished_spans()
    encoder = wire.Encoder()
    assert _fast(spans, encoder) == sdk_encode_spans(spans)
    assert _fast(spans, encoder) == sdk_encode_spans(spans)  # again, from what the encoder kept


def _span_exporter(protocol: str) -> Any:
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    guarded = otlp_exporter(env, "traces")
    assert guarded is not None
    return guarded.inner


def test_the_grpc_span_exporter_encodes_with_the_bridges_encoder_and_gives_the_sdks_message():
    inner = _span_exporter("grpc")
    spans = wire._probe_spans()
    sent = inner._translate_data(spans)  # the bytes, which the exporter's stub sends as they are
    assert isinstance(sent, bytes) and isinstance(inner._client, wire._BytesStub)
    assert ExportTraceServiceRequest.FromString(sent) == sdk_encode_spans(spans)
    assert inner._translate_data.__module__ == wire.__name__
    # a reconnection builds the client again from the exporter's stub: the same one
    inner._initialize_channel_and_stub()
    assert isinstance(inner._client, wire._BytesStub)
    # a client the bridge did not make (an SDK that builds it otherwise) is given the message
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    inner._client = TraceServiceStub(inner._channel)
    assert inner._translate_data(spans) == sdk_encode_spans(spans)
    # http/protobuf encodes inside its own export: it keeps the SDK's encoder
    http = _span_exporter("http/protobuf")
    assert getattr(http, "_translate_data", None) is None or http._translate_data.__module__ != wire.__name__


def test_a_value_the_bridge_cannot_encode_goes_to_the_sdks_encoder_and_the_rest_is_sent():
    """An integer outside int64 (OTLP's int_value): the SDK's encoder skips that attribute and logs it; the export
    goes on with every other attribute, as it would without the bridge's encoder."""
    inner = _span_exporter("grpc")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("t").start_span("s", attributes={"big": 2**70, "ok": 1}).end()
    spans = exporter.get_finished_spans()
    with pytest.raises(wire.Unencodable):
        wire.Encoder().encode(spans)
    logging.getLogger("opentelemetry.exporter.otlp.proto.common._internal").disabled = True
    try:
        sent = inner._translate_data(spans)
    finally:
        logging.getLogger("opentelemetry.exporter.otlp.proto.common._internal").disabled = False
    keys = [kv.key for kv in sent.resource_spans[0].scope_spans[0].spans[0].attributes]
    assert keys == ["ok"]


def test_the_encoders_kept_integers_start_again_when_full_and_still_encode_as_the_sdk():
    """Integer attributes are kept encoded (ids, lines and counts come back); past the bound the kept ones are dropped,
    never a wrong field: a batch of more distinct integers than the bound, twice, each time the SDK's message."""
    from opentelemetry.sdk.trace import ReadableSpan

    ctx, resource = SpanContext(1, 2, False, TraceFlags(1)), Resource({"service.name": "svc"})
    spans = [
        ReadableSpan(
            name=f"s{j}",
            context=ctx,
            resource=resource,
            attributes={f"k{i}": j * 1000 + i % 7 for i in range(1000)},
            start_time=1,
            end_time=2,
        )
        for j in range(6)
    ]
    encoder = wire.Encoder()
    assert _fast(spans, encoder) == sdk_encode_spans(spans)
    assert 0 < len(encoder._fields[0x4A]) <= wire._CACHE_MAX  # the bound held: 6,000 distinct integers went through it
    assert _fast(spans, encoder) == sdk_encode_spans(spans)
