"""A span exporter that appends OTLP-JSON lines to a local file (the collector's file format)."""

# ruff: noqa: UP031 - the JSON is written as text, and %-formatting keeps its braces literal

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from .._core.errors import warn_once

# The JSON text is written directly: attribute keys repeat in every span, so each is quoted once.
_q = encode_basestring_ascii
_float = json.JSONEncoder(separators=(",", ":")).encode


@functools.lru_cache(maxsize=4096)
def _key(k: str) -> str:
    return '{"key":' + _q(k) + ',"value":'


def _value(v: Any) -> str:
    t = type(v)
    if t is str:
        return '{"stringValue":' + _q(v) + "}"
    if t is bool:
        return '{"boolValue":true}' if v else '{"boolValue":false}'
    if t is int:
        return '{"intValue":"' + str(v) + '"}'
    if t is float:
        return '{"doubleValue":' + _float(v) + "}"
    if isinstance(v, (list, tuple)):
        return '{"arrayValue":{"values":[' + ",".join(_value(x) for x in v) + "]}}"
    for base in (bool, int, float, str):  # subclasses (enums and the like): their plain value
        if isinstance(v, base):
            return _value(base(v))
    return _value(str(v))


def _attributes(attrs: Any) -> str:
    return "[" + ",".join(_key(k) + _value(v) + "}" for k, v in (attrs or {}).items()) + "]"


def _dropped(n: int, field: str) -> str:
    """OTLP's ``dropped*Count`` fields, written only when something was dropped (zero is their default)."""
    return ',"%s":%d' % (field, n) if n else ""


def _event(e: Any) -> str:
    attrs = (',"attributes":' + _attributes(e.attributes)) if e.attributes else ""
    dropped = _dropped(getattr(e.attributes, "dropped", 0), "droppedAttributesCount")
    return '{"timeUnixNano":"%d","name":%s%s%s}' % (e.timestamp, _q(e.name), attrs, dropped)


def _span(span: ReadableSpan) -> str:
    ctx = span.context
    out = [
        '{"traceId":"%032x","spanId":"%016x","name":%s,"kind":%d,"startTimeUnixNano":"%d","endTimeUnixNano":"%d"'
        % (ctx.trace_id, ctx.span_id, _q(span.name), span.kind.value + 1, span.start_time or 0, span.end_time or 0)
    ]  # OTLP numbers kinds from 1 (INTERNAL)
    if span.parent is not None:
        out.append(',"parentSpanId":"%016x"' % span.parent.span_id)
    if span.attributes:
        out.append(',"attributes":' + _attributes(span.attributes))
    out.append(_dropped(span.dropped_attributes, "droppedAttributesCount"))
    if span.events:
        out.append(',"events":[' + ",".join(_event(e) for e in span.events) + "]")
    out.append(_dropped(span.dropped_events, "droppedEventsCount"))
    if span.links:
        links = (
            '{"traceId":"%032x","spanId":"%016x","attributes":%s}'
            % (link.context.trace_id, link.context.span_id, _attributes(link.attributes))
            for link in span.links
        )
        out.append(',"links":[' + ",".join(links) + "]")
    status = []
    if span.status.status_code is not StatusCode.UNSET:
        status.append('"code":%d' % (1 if span.status.status_code is StatusCode.OK else 2))
    if span.status.description:
        status.append('"message":' + _q(span.status.description))
    out.append(',"status":{' + ",".join(status) + "}}")
    return "".join(out)


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """An ExportTraceServiceRequest in OTLP/JSON: hex ids, enums as integers, spans grouped by resource and scope."""
    by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[str]]]] = {}
    for sp in spans:
        resource = sp.resource
        _, scopes = by_resource.setdefault(id(resource), (resource, {}))
        scope = sp.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        scopes.setdefault(key, []).append(_span(sp))
    parts = []
    for resource, scopes in by_resource.values():
        scope_spans = ",".join(
            '{"scope":{"name":%s%s},"spans":[%s]}' % (_q(name), (',"version":' + _q(version)) if version else "", ",".join(items))
            for (name, version), items in scopes.items()
        )
        attrs = _attributes(resource.attributes if resource is not None else {})
        parts.append('{"resource":{"attributes":%s},"scopeSpans":[%s]}' % (attrs, scope_spans))
    return '{"resourceSpans":[' + ",".join(parts) + "]}"


class OTLPJsonFileSpanExporter(SpanExporter):
    """One ``ExportTraceServiceRequest`` as JSON per line, readable by the OTel Collector's ``otlpjsonfile`` receiver."""

    def __init__(self, path: str, setting: str = "TORCH_OTEL_TRACES_FILE") -> None:
        self.path = path
        self.setting = setting  # what the user sets to choose another path (the line about a failed write names it)
        self.failed = False  # a write failed: some spans are not in the file
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        try:
            line = encode_otlp_json(spans)
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            return SpanExportResult.SUCCESS
        except OSError as exc:
            self.failed = True
            warn_once(
                f"file:{self.path}",
                "cannot write spans to %s (%s); set %s to a writable path",
                self.path,
                exc.strerror or exc,
                self.setting,
            )
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closed = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
