"""A span exporter that appends OTLP-JSON lines to a local file (the collector's file format)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from ._internal import warn_once


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attributes(attrs: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in (attrs or {}).items()]


def _span(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        "kind": span.kind.value + 1,  # OTLP numbers kinds from 1 (INTERNAL)
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.attributes:
        out["attributes"] = _attributes(span.attributes)
    if span.events:
        out["events"] = [
            {
                "timeUnixNano": str(e.timestamp),
                "name": e.name,
                **({"attributes": _attributes(e.attributes)} if e.attributes else {}),
            }
            for e in span.events
        ]
    if span.links:
        out["links"] = [
            {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
                "attributes": _attributes(link.attributes),
            }
            for link in span.links
        ]
    status: dict[str, Any] = {}
    if span.status.status_code is not StatusCode.UNSET:
        status["code"] = 1 if span.status.status_code is StatusCode.OK else 2
    if span.status.description:
        status["message"] = span.status.description
    out["status"] = status
    return out


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """An ExportTraceServiceRequest in OTLP/JSON: hex ids, enums as integers, spans grouped by resource and scope."""
    by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for sp in spans:
        resource = sp.resource
        _, scopes = by_resource.setdefault(id(resource), (resource, {}))
        scope = sp.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        scopes.setdefault(key, []).append(_span(sp))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource.attributes if resource is not None else {})},
                "scopeSpans": [
                    {"scope": {"name": name, **({"version": version} if version else {})}, "spans": items}
                    for (name, version), items in scopes.items()
                ],
            }
            for resource, scopes in by_resource.values()
        ]
    }


class OTLPJsonFileSpanExporter(SpanExporter):
    """One ``ExportTraceServiceRequest`` as JSON per line, readable by the OTel Collector's ``otlpjsonfile`` receiver."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        try:
            line = json.dumps(encode_otlp_json(spans), separators=(",", ":"))
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
            return SpanExportResult.SUCCESS
        except OSError as exc:
            warn_once(
                f"file:{self.path}",
                "cannot write spans to %s (%s); set TORCH_OTEL_TRACES_FILE to a writable path",
                self.path,
                exc,
            )
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closed = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
