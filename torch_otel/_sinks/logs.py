"""torch's compile warnings and graph breaks -> OpenTelemetry log records, correlated with the compile's trace.

On only when a logger provider is given (``OTEL_LOGS_EXPORTER``). Records are
emitted when the compile finishes, with torch's own timestamps and the root
span's trace and span ids; a warning logged outside any compile goes out
uncorrelated. Bodies are capped like span attributes; tracebacks (which quote
source code) are never sent.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry._logs import SeverityNumber

from .._core.categories import scrub_guard_text
from .._core.graph_breaks import graph_break_code
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._model.events import LogEvent
from .._model.record import CompileRecord, Sink
from .._version import __version__

_SEVERITY = {
    logging.CRITICAL: (SeverityNumber.FATAL, "CRITICAL"),
    logging.ERROR: (SeverityNumber.ERROR, "ERROR"),
    logging.WARNING: (SeverityNumber.WARN, "WARNING"),
    logging.INFO: (SeverityNumber.INFO, "INFO"),
}


def _severity(level: int) -> tuple[SeverityNumber, str]:
    for lvl in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO):
        if level >= lvl:
            return _SEVERITY[lvl]
    return SeverityNumber.DEBUG, "DEBUG"


class LogSink(Sink):
    def __init__(
        self,
        logger_provider: Any,
        max_length: int = 4096,
        redact_paths: bool = False,
        scrub: bool = True,
        features: tuple[Feature, ...] | None = None,
    ) -> None:
        self._logger = logger_provider.get_logger("torch_otel", __version__)
        # the added features that make log records of their own (torch_otel._features)
        self._views = tuple(k.logs for k in features_or_default(features) if k.logs is not None)
        self._max = max_length
        self._redact = redact_paths
        self._scrub = scrub  # guard text in warnings (the recompile limit's "last reason") without source or values

    def _context(self, rec: CompileRecord) -> Any:
        if not rec.trace_id or not rec.span_id:
            return None
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

        return set_span_in_context(
            NonRecordingSpan(SpanContext(rec.trace_id, rec.span_id, False, TraceFlags(TraceFlags.SAMPLED)))
        )

    def _emit(self, ev: LogEvent, ctx: Any, attrs: dict[str, Any]) -> None:
        number, text = _severity(ev.level)
        self._logger.emit(
            timestamp=ev.ts_ns,
            context=ctx,
            severity_number=number,
            severity_text=text,
            body=(scrub_guard_text(ev.message) if self._scrub else ev.message)[: self._max],
            attributes={"logger.name": ev.logger, **attrs},
        )

    def on_finish(self, rec: CompileRecord) -> None:
        added = [r for view in self._views for r in view(rec)]
        if not rec.logs and not rec.graph_breaks and not added:
            return
        ctx = self._context(rec)
        base = {"torch.compile.id": rec.id_str}
        for ev in rec.logs:
            self._emit(ev, ctx, base)
        end = rec.root.end_ns or rec.root.start_ns
        for gb in rec.graph_breaks:
            attrs: dict[str, Any] = {**base, "torch.compile.graph_break.code": graph_break_code(gb.gb_type, gb.reason)}
            if gb.filename:
                attrs["code.file.path"] = os.path.basename(gb.filename) if self._redact else gb.filename
            if gb.lineno is not None:
                attrs["code.line.number"] = gb.lineno
            what = gb.gb_type or (gb.reason.splitlines()[0] if gb.reason else "unknown")
            text = f"graph break: {what}"
            self._emit(LogEvent(rec.compile_id, gb.ts_ns or end, logging.WARNING, "torch._dynamo.graph_breaks", text), ctx, attrs)
        for ts, level, logger, message, kind_attrs in added:
            self._emit(LogEvent(rec.compile_id, ts or end, level, logger, message), ctx, {**base, **kind_attrs})

    def on_orphan_log(self, event: LogEvent) -> None:
        attrs = {"torch.compile.id": str(event.compile_id)} if event.compile_id is not None else {}
        self._emit(event, None, attrs)
