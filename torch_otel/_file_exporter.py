"""A span exporter that appends OTLP-JSON lines to a local file (the collector's file format)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._internal import warn_once


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
            line = MessageToJson(encode_spans(spans), indent=None)
            with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line.replace("\n", " ") + "\n")
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
