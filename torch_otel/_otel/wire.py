"""Finished spans to OTLP's protobuf bytes, without building a protobuf object per field.

The OTLP exporters encode each export by building a protobuf message for every span, attribute and value (the SDK's
``encode_spans``): about 37 µs a span here, more than the span cost to build. This module writes the same message's
bytes directly, caching what repeats from one export to the next (a resource, a scope, an attribute's key and its
string value). The gRPC span exporter's client is then one that sends those bytes as they are (:class:`_BytesStub`,
made again on each of the SDK's reconnections): what goes on the wire is the message the SDK would have sent, without
parsing it into protobuf's objects for gRPC to serialize again. A client the bridge did not make is given the message
parsed back from the bytes.

It is used only where it was checked to agree: :func:`use_fast_encoding` encodes a probe batch (a root with every
kind of attribute value, events, a link, an error status, children) both ways and compares the two messages, and
keeps the SDK's encoder when they differ, as they would on an SDK that encodes a field this module does not know.
An export this module cannot encode (a value of a type it does not know) goes to the SDK's encoder too.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CHILD_TAIL", "INTERNAL_KIND", "Encoder", "Unencodable", "encodes_fast", "times", "use_fast_encoding"]

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_CACHE_MAX = 4096  # distinct (key, value) pairs kept encoded: label-like values repeat, measurements do not


class Unencodable(Exception):
    """A value of a type this module does not encode: the SDK's encoder takes the export."""


def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # int64 as protobuf writes a negative: ten bytes
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:  # two bytes: most lengths of a span or an attribute
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (every field here is numbered below 16), its length, its bytes."""
    n = len(payload)
    if n < 0x80:
        return bytes((tag, n)) + payload
    return bytes((tag, (n & 0x7F) | 0x80, n >> 7)) + payload if n < 0x4000 else bytes((tag,)) + _varint(n) + payload


# tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32)
_STRING_VALUE, _ARRAY_VALUE, _KVLIST_VALUE, _BYTES_VALUE = 0x0A, 0x2A, 0x32, 0x3A  # AnyValue's length-delimited
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags: whether the parent (or link) is remote, and that it is said
_SPAN_FLAGS = {r: b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if r else 0)) for r in (False, True)}  # field 16
_REMOTE_FLAGS = {r: b"\x35" + _pack_fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if r else 0)) for r in (False, True)}  # a link's 6
_STATUS = {code: b"\x7a\x02\x18" + bytes((code,)) if code else b"\x7a\x00" for code in range(3)}  # field 15: no message
times = struct.Struct("<BQBQ").pack  # a span's start and end (fields 7 and 8, fixed64)
INTERNAL_KIND = bytes((0x30, 1))  # field 6: the API's internal (0) is OTLP's 1
CHILD_TAIL = _STATUS[0] + _SPAN_FLAGS[False]  # an unset status, and a local parent: what ends most phase spans


def _value(v: Any) -> bytes:
    """An ``AnyValue``'s bytes."""
    if isinstance(v, str):
        return _len(_STRING_VALUE, v.encode("utf-8"))
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        if not -(1 << 63) <= v < (1 << 63):
            raise Unencodable("an integer outside int64")
        return b"\x18" + _varint(v)
    if isinstance(v, float):
        return b"\x21" + _pack_double(v)
    if isinstance(v, bytes):
        return _len(_BYTES_VALUE, v)
    if v is None:
        return b""
    if isinstance(v, Sequence):
        return _len(_ARRAY_VALUE, b"".join(_len(0x0A, _value(x)) for x in v))
    if isinstance(v, Mapping):
        return _len(_KVLIST_VALUE, b"".join(_len(0x0A, _key_value(str(k), x)) for k, x in v.items()))
    raise Unencodable(type(v).__name__)


_TEXT_TYPES = frozenset((str,))


def _text_value(b: bytes) -> bytes:
    """A text's ``AnyValue`` as an element of an ``ArrayValue`` (its field 1): the text's UTF-8 bytes given."""
    n = len(b)
    if n < 0x7E:  # one length byte each
        return bytes((0x0A, n + 2, _STRING_VALUE, n)) + b
    return _len(0x0A, _len(_STRING_VALUE, b))


def _key_value(k: str, v: Any) -> bytes:
    return _len(0x0A, k.encode("utf-8")) + _len(0x12, _value(v))


class Encoder:
    """Encodes exports of finished spans; keeps what repeats between exports (bounded)."""

    def __init__(self) -> None:
        # by field tag (a span's, an event's, a link's attributes): (key, value, the value's type) -> its field
        self._fields: dict[int, dict[tuple[str, Any, type], bytes]] = {}
        self._floats: dict[tuple[int, str], bytes] = {}  # (field tag, key) -> the field's bytes before a double's eight
        self._keys: dict[str, bytes] = {}  # an attribute's key -> its KeyValue's key field
        self._names: dict[str, bytes] = {}  # a span's name -> its name field
        from opentelemetry.trace import SpanKind

        self._kinds = {k: bytes((0x30, k.value + 1)) for k in SpanKind}  # field 6: the API's 0 (internal) is OTLP's 1
        self._internal_kind = SpanKind.INTERNAL
        self._internal = self._kinds[SpanKind.INTERNAL]
        from opentelemetry.trace import StatusCode

        self._unset = StatusCode.UNSET
        self._groups: dict[tuple[int, int], tuple[Any, Any, tuple[bytes, bytes, bytes, bytes]]] = {}  # their bytes
        from opentelemetry.sdk.trace import ReadableSpan

        self._readable: Any = ReadableSpan
        self._default_status = inspect.signature(ReadableSpan.__init__).parameters["status"].default  # unset, shared
        self._unset_tail = {r: _STATUS[0] + _SPAN_FLAGS[r] for r in (False, True)}
        from opentelemetry.trace import DEFAULT_TRACE_STATE, SpanContext, TraceState

        self._context_type: Any = SpanContext
        self._no_state = DEFAULT_TRACE_STATE  # most spans' (empty) trace state: not asked its length
        self._state_type: Any = TraceState  # its entries read from its dict, not by a Python call of its length
        from .encoded_span import EncodedSpan

        self._encoded: Any = EncodedSpan  # a phase span written as its bytes as it was made: sent as they are

    def name_field(self, name: str) -> bytes:
        """A span's name field (5), kept for the names that come back."""
        field = self._names.get(name)
        if field is None:
            field = _len(0x2A, name.encode("utf-8"))
            if len(self._names) < _CACHE_MAX:
                self._names[name] = field
        return field

    def state_field(self, ts: Any) -> bytes:
        """A span's trace state field (3); nothing for an empty one."""
        if ts is self._no_state or not (ts._dict if type(ts) is self._state_type else ts):
            return b""
        return _len(0x1A, ",".join(f"{k}={v}" for k, v in ts.items()).encode("utf-8"))

    def attributes(self, attributes: Mapping[str, Any] | None) -> bytes:
        """A span's attribute fields (9); raises :class:`Unencodable` for a value this module does not encode."""
        return self._attributes(0x4A, attributes)

    def _key(self, k: str) -> bytes:
        kb = self._keys.get(k)
        if kb is None:
            kb = _len(0x0A, k.encode("utf-8"))
            if len(self._keys) < _CACHE_MAX:
                self._keys[k] = kb
        return kb

    def _attributes(self, tag: int, attributes: Mapping[str, Any] | None) -> bytes:
        """Each attribute as a ``KeyValue`` field numbered by ``tag``.

        The fields kept encoded are looked up all at once, by ``(key, value, type of the value)`` (the type: ``True``,
        ``1`` and ``1.0`` are equal keys otherwise): a compile's label-like values come back at every compile, and
        only the new ones are encoded one at a time."""
        if not attributes:
            return b""
        fields = self._fields.get(tag)
        if fields is None:
            fields = self._fields[tag] = {}
        values = attributes.values()
        try:
            got: list[Any] = list(map(fields.get, zip(attributes, values, map(type, values), strict=True)))
        except TypeError:  # an unhashable value (a list the SDK did not make a tuple of): one at a time
            return b"".join([self._field(tag, fields, k, v) for k, v in attributes.items()])
        if None in got:
            keys, vals = list(attributes), list(values)
            i = 0
            try:
                while True:
                    i = got.index(None, i)
                    got[i] = self._field(tag, fields, keys[i], vals[i])
                    i += 1
            except ValueError:  # no field left to encode
                pass
        return b"".join(got)

    def _field(self, tag: int, fields: dict[tuple[str, Any, type], bytes], k: str, v: Any) -> bytes:
        """One attribute's ``KeyValue`` field, kept where its value comes back (a text, a flag, an integer: ids, lines,
        counts) and the cache is not full; a full cache starts again (measurements move on)."""
        t = type(v)
        if t is float:  # a measurement: never kept; the key's part is
            head = self._floats.get((tag, k))
            if head is None:
                kb = self._key(k)
                n = len(kb) + 11  # the key, then AnyValue's field: 0x12, its length (9), 0x21, eight bytes
                head = bytes((tag, n)) + kb + b"\x12\x09\x21" if n < 0x80 else b""
                if len(self._floats) < _CACHE_MAX:
                    self._floats[(tag, k)] = head
            return head + _pack_double(v) if head else _len(tag, self._key(k) + _len(0x12, b"\x21" + _pack_double(v)))
        if t is int:
            if not -(1 << 63) <= v < (1 << 63):
                raise Unencodable("an integer outside int64")
            vb = bytes((v,)) if 0 <= v < 0x80 else _varint(v)
            kb = self._keys.get(k) or self._key(k)
            n = len(kb) + 3 + len(vb)  # the key, then AnyValue's field: 0x12, its length, 0x18, the varint
            if n < 0x80:  # most: one length byte each, written at once
                kv = bytes((tag, n)) + kb + bytes((0x12, len(vb) + 1, 0x18)) + vb
            else:
                kv = _len(tag, kb + _len(0x12, b"\x18" + vb))
        elif t is str and len(v) < 0x30:
            vb = v.encode("utf-8")
            kb = self._keys.get(k) or self._key(k)
            n = len(kb) + 4 + len(vb)  # the key, then AnyValue's field: 0x12, its length, 0x0A, the text's length
            if n < 0x80:
                kv = bytes((tag, n)) + kb + bytes((0x12, len(vb) + 2, _STRING_VALUE, len(vb))) + vb
            else:
                kv = _len(tag, kb + _len(0x12, _len(_STRING_VALUE, vb)))
        else:
            if t is tuple and _TEXT_TYPES.issuperset(map(type, v)):  # texts (a compile's recompile reasons): no call each
                value = _len(_ARRAY_VALUE, b"".join([_text_value(x.encode("utf-8")) for x in v]))
            else:
                value = _value(v)
            kv = _len(tag, self._key(k) + _len(0x12, value))
            if not (t is str or t is bool or t is tuple) or len(kv) > 256:
                return kv  # long texts (a stack), other values: encoded each time
        if len(fields) >= _CACHE_MAX:
            fields.clear()
        try:
            fields[(k, v, t)] = kv
        except TypeError:  # a tuple of something unhashable
            pass
        return kv

    def _span(self, s: Any) -> bytes:
        if type(s) is self._readable:  # the SDK's finished span, its fields read without a property's call each
            ctx, parent, name, kind, attributes = s._context, s._parent, s._name, s._kind, s._attributes
            events, links, st, start, end = s._events, s._links, s._status, s._start_time, s._end_time
        else:
            ctx, parent, name, kind, attributes = s.context, s.parent, s.name, s.kind, s.attributes
            events, links, st, start, end = s.events, s.links, s.status, s.start_time, s.end_time
        sc = self._context_type  # the API's tuple: (trace id, span id, is remote, flags, state, is valid)
        if type(ctx) is sc:
            tid, sid, ts = ctx[0], ctx[1], ctx[4]
        else:
            tid, sid, ts = ctx.trace_id, ctx.span_id, ctx.trace_state
        if parent is None:
            up, remote = b"", False
        elif type(parent) is sc:
            up, remote = b"\x22\x08" + parent[1].to_bytes(8, "big"), bool(parent[2])
        else:
            up, remote = (b"\x22\x08" + parent.span_id.to_bytes(8, "big") if parent else b""), bool(parent.is_remote)
        field = self._names.get(name)  # name_field, inlined: a call per span costs more than the lookup
        if field is None:
            field = self.name_field(name)
        out = [b"\x0a\x10" + tid.to_bytes(16, "big") + b"\x12\x08" + sid.to_bytes(8, "big")]
        if ts is not self._no_state:  # most spans' is the empty default: no call
            out.append(self.state_field(ts))
        out += (
            up,
            field,
            self._internal if kind is self._internal_kind else self._kinds[kind],  # an enum's hash is Python's
            times(0x39, start, 0x41, end),
            self._attributes(0x4A, attributes),
        )
        if type(attributes) is not dict and s.dropped_attributes:  # only the SDK's bounded attributes drop any
            out.append(b"\x50" + _varint(s.dropped_attributes))
        if events:
            for e in events:
                body = (
                    b"\x09"
                    + _pack_fixed64(e.timestamp)
                    + _len(0x12, e.name.encode("utf-8"))
                    + self._attributes(0x1A, e.attributes)
                )
                if e.dropped_attributes:
                    body += b"\x20" + _varint(e.dropped_attributes)
                out.append(_len(0x5A, body))
            if s.dropped_events:
                out.append(b"\x60" + _varint(s.dropped_events))
        if links:
            for link in links:
                lc = link.context
                body = b"\x0a\x10" + lc.trace_id.to_bytes(16, "big") + b"\x12\x08" + lc.span_id.to_bytes(8, "big")
                body += self._attributes(0x22, link.attributes)
                if link.dropped_attributes:
                    body += b"\x28" + _varint(link.dropped_attributes)
                body += _REMOTE_FLAGS[bool(lc.is_remote)]
                out.append(_len(0x6A, body))
            if s.dropped_links:
                out.append(b"\x70" + _varint(s.dropped_links))
        if st is self._default_status:  # most spans: the SDK's default, unset (an enum's value is a Python property)
            out.append(self._unset_tail[remote])
            return b"".join(out)
        if st is not None and st.status_code is self._unset and not st.description:
            out.append(_STATUS[0])
        elif st is not None:
            code = st.status_code.value
            if st.description:
                body = _len(0x12, st.description.encode("utf-8")) + (bytes((0x18, code)) if code else b"")
                out.append(_len(0x7A, body))
            else:
                out.append(_STATUS[code])
        out.append(_SPAN_FLAGS[remote])
        return b"".join(out)

    def _group(self, resource: Any, scope: Any) -> tuple[bytes, bytes, bytes, bytes]:
        """The ``Resource`` field and ``schema_url`` of a ``ResourceSpans``, and the ``InstrumentationScope`` field and
        ``schema_url`` of a ``ScopeSpans``: each encoded once per resource and scope."""
        key = (id(resource), id(scope))
        got = self._groups.get(key)
        if got is not None and got[0] is resource and got[1] is scope:
            return got[2]
        res = _len(0x0A, self._attributes(0x0A, resource.attributes))
        res_url = _len(0x1A, resource.schema_url.encode("utf-8")) if getattr(resource, "schema_url", None) else b""
        if scope is None:
            sc, sc_url = b"\x0a\x00", b""
        else:
            body = _len(0x0A, scope.name.encode("utf-8")) if scope.name else b""
            if scope.version:
                body += _len(0x12, scope.version.encode("utf-8"))
            body += self._attributes(0x1A, scope.attributes)
            sc = _len(0x0A, body)
            sc_url = _len(0x1A, scope.schema_url.encode("utf-8")) if scope.schema_url else b""
        if len(self._groups) >= 64:
            self._groups.clear()
        parts = (res, res_url, sc, sc_url)
        self._groups[key] = (resource, scope, parts)
        return parts

    def encode(self, spans: Sequence[Any]) -> bytes:
        """An ``ExportTraceServiceRequest``'s bytes: spans grouped by resource, then scope, in order of first sight."""
        groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}  # by identity: no resource hashed
        readable, span, encoded = self._readable, self._span, self._encoded
        last: tuple[Any, Any] = (self, self)  # the resource and scope of the span before (most are one's and one's)
        kept: list[bytes] = []
        for s in spans:
            t = type(s)
            if t is readable or t is encoded:
                res_obj, scope_obj = s._resource, s._instrumentation_scope or None
            else:
                res_obj, scope_obj = s.resource, s.instrumentation_scope or None
            if res_obj is not last[0] or scope_obj is not last[1]:
                last = (res_obj, scope_obj)
                of_resource = groups.get(id(res_obj))
                if of_resource is None:
                    of_resource = groups[id(res_obj)] = (res_obj, {})
                of_scope = of_resource[1].get(id(scope_obj))
                if of_scope is None:
                    of_scope = of_resource[1][id(scope_obj)] = (scope_obj, [])
                kept = of_scope[1]
            kept.append(s._otlp if t is encoded else span(s))
        out = []
        for resource, scopes in groups.values():
            body = []
            for scope, encoded in scopes.values():
                res, res_url, sc, sc_url = self._group(resource, scope)
                body.append(_len(0x12, sc + b"".join([_len(0x12, e) for e in encoded]) + sc_url))
            out.append(_len(0x0A, res + b"".join(body) + res_url))
        return b"".join(out)


def _probe_spans() -> list[Any]:
    """Finished spans with every field the bridge's spans use: each kind of attribute value, events, links, an error
    status, a child, a remote parent, a trace state, two scopes."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

    done: list[Any] = []

    class _Keep(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            done.extend(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource({"service.name": "probe", "host.name": "h\u00e9", "process.pid": 7}, schema_url="https://s/1"),
        shutdown_on_exit=False,
    )
    provider.add_span_processor(SimpleSpanProcessor(_Keep()))
    tracer = provider.get_tracer("torch_otel", "1.2.3", schema_url="https://s/2")
    other = provider.get_tracer("other")
    values: dict[str, Any] = {
        "s": "text \u00e9 " + "x" * 300,
        "empty": "",
        "t": True,
        "f": False,
        "i": 12345678901,
        "zero": 0,
        "neg": -3,
        "d": 0.25,
        "dz": 0.0,
        "strs": ["a", "", "b"],
        "ints": (1, -2, 3),
        "bools": [True, False],
        "floats": [1.5],
        "none_list": [],
    }
    values.update({f"n{i}": i * 1000 for i in range(20)})
    remote = SpanContext(0xABC, 0xDEF, True, TraceFlags(1), TraceState([("k", "v"), ("k2", "w")]))
    link = Link(SpanContext(0x123, 0x456, False, TraceFlags(1)), {"torch.compile.link": "forward", "n": 2})
    root = tracer.start_span(
        "torch.compile",
        context=trace.set_span_in_context(trace.NonRecordingSpan(remote)),
        kind=SpanKind.INTERNAL,
        attributes=values,
        links=[link],
        start_time=1_000,
        record_exception=False,
    )
    root.add_event("torch.compile.graph_break", {"reason": "r", "n": 1}, timestamp=1_500)
    root.add_event("plain", timestamp=0)
    ctx = trace.set_span_in_context(root)
    child = tracer.start_span("dynamo", context=ctx, attributes={"torch.compile.cache_state": "hit"}, start_time=1_100)
    child.end(end_time=1_200)
    other.start_span("elsewhere", kind=SpanKind.CLIENT, start_time=5).end(end_time=6)
    root.set_status(Status(StatusCode.ERROR, "failed: \u00e9"))
    root.end(end_time=2_000)
    ok = tracer.start_span("ok", start_time=1)
    ok.set_status(Status(StatusCode.OK))
    ok.end(end_time=2)
    return done


_AGREES: bool | None = None


def _agrees() -> bool:
    """Whether this module encodes the probe spans as the SDK's encoder does (worked out once per process)."""
    global _AGREES
    if _AGREES is None:
        try:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode_spans
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

            spans = _probe_spans()
            _AGREES = ExportTraceServiceRequest.FromString(Encoder().encode(spans)) == sdk_encode_spans(spans)
        except Exception:  # noqa: BLE001 - an SDK this module cannot check against: its own encoder, as before
            _AGREES = False
    return _AGREES


def use_fast_encoding(exporter: Any) -> bool:
    """Give an OTLP/gRPC span exporter this module's encoder; its own stays for an export this one cannot encode, and
    for every export if the two disagree on the probe spans (checked at the first export, on the exporting thread).
    False where the exporter has no ``_translate_data`` to take over."""
    original = getattr(exporter, "_translate_data", None)
    if original is None:
        return False
    try:  # the gRPC span exporter's module has imported it already
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:
        return False
    parse, encoder = ExportTraceServiceRequest.FromString, Encoder()
    _send_bytes(exporter)

    def translate(data: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not _agrees():  # an SDK that passes more than the spans, or encodes otherwise: its own
            exporter._translate_data = original
            return original(data, *args, **kwargs)
        try:
            encoded = encoder.encode(data)
        except Exception:  # noqa: BLE001 - a value it does not encode: the SDK's encoder, which skips what it cannot
            return original(data)
        # the bytes themselves where the exporter's stub is this module's (it sends them as they are), else the message
        return encoded if isinstance(exporter._client, _BytesStub) else parse(encoded)

    translate.encodes_fast = True  # type: ignore[attr-defined]  # what encodes_fast looks for
    exporter._translate_data = translate
    return True


def encodes_fast(exporter: Any) -> bool:
    """Whether ``exporter`` encodes with this module (:func:`use_fast_encoding`), which agrees with the SDK's encoder
    here: a span it is handed may then be one written as its bytes already (torch_otel._otel.direct_spans)."""
    return getattr(getattr(exporter, "_translate_data", None), "encodes_fast", False) is True and _agrees()


def _serialized(request: Any) -> bytes:
    """What goes on the wire: this module's bytes as they are, or a message (the SDK's encoder's) serialized."""
    return request if type(request) is bytes else request.SerializeToString()


class _BytesStub:
    """The trace service's client, sending an ``Export`` request given as its bytes (or as a message) unchanged: the
    bytes this module encoded are the message, so parsing them into protobuf's objects only for gRPC to serialize them
    again is skipped."""

    def __init__(self, channel: Any, export_path: str, response: Any) -> None:
        try:
            self.Export = channel.unary_unary(
                export_path, request_serializer=_serialized, response_deserializer=response, _registered_method=True
            )
        except TypeError:  # a gRPC before registered methods
            self.Export = channel.unary_unary(export_path, request_serializer=_serialized, response_deserializer=response)


def _send_bytes(exporter: Any) -> bool:
    """Give ``exporter`` a stub that sends the encoded bytes (and makes the same on every reconnection: the SDK builds
    its client from ``_stub`` then). False where the exporter is not the SDK's gRPC one as this module knows it."""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
    except ImportError:
        return False
    if getattr(exporter, "_stub", None) is not TraceServiceStub or getattr(exporter, "_channel", None) is None:
        return False
    path = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

    def stub(channel: Any) -> _BytesStub:
        return _BytesStub(channel, path, ExportTraceServiceResponse.FromString)

    try:
        exporter._stub = stub
        exporter._client = stub(exporter._channel)
    except Exception:  # noqa: BLE001 - the SDK's own stub stays
        exporter._stub = TraceServiceStub
        return False
    return True
