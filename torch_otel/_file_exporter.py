"""A span exporter that appends OTLP-JSON lines to a local file (the collector's file format)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._internal import warn_once

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(obj: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, not as protobuf-JSON's base64."""
    if isinstance(obj, dict):
        return {k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hex_ids(v) for v in obj]
    return obj


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
            line = json.dumps(_hex_ids(MessageToDict(encode_spans(spans))), separators=(",", ":"))
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
