"""The user's own sinks (``torch_otel.Sink``: ``instrument(sinks=[...])`` and the ``torch_otel.sinks`` entry points):
each finished compile as the public record (``torch_otel.Compile``, torch_otel._model.sink_api), each call guarded.

:class:`UserSinks` is one sink of the pipeline: it makes the public record of each compile once, from the compile
record the bridge's own sinks read, and hands it to each user sink in order. What a user sink raises is caught,
counted and logged once (``sink <its class>.<method>``); the next sink still gets the record, and torch never sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core.categories import scrub_guard_text, strip_recompile_prefix
from .._core.errors import record_error
from .._core.graph_breaks import graph_break_code
from .._core.paths import call_site_text
from .._model.record import CompileRecord, PhaseNode, Sink
from .._model.sink_api import SCHEMA_VERSION, CacheRequests, Compile, GraphBreak, Phase
from .._model.sink_api import Sink as UserSink

__all__ = ["UserSinks", "public_record"]


def _phase(node: PhaseNode) -> Phase:
    end = node.end_ns if node.end_ns is not None else node.start_ns
    return Phase(node.name, node.start_ns, end, tuple(_phase(c) for c in node.children))


def _numbers(metrics: dict[str, Any] | None) -> dict[str, int | float | bool]:
    """torch's CompilationMetrics, its numbers and flags only (its texts can carry source, paths and values)."""
    return {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float, bool))}


def public_record(rec: CompileRecord, capture_payloads: bool = False) -> Compile:
    """The public record of a finished compile (schema ``SCHEMA_VERSION``)."""
    failed = rec.fail_type or ("Incomplete" if rec.incomplete else None)
    reason = rec.recompile_reason
    if reason:
        reason = strip_recompile_prefix(reason)
        reason = reason if capture_payloads else scrub_guard_text(reason)
    handled = {id(gb) for gb in rec.handled_graph_breaks}
    site = rec.call_site
    code = rec.code
    end = rec.root.end_ns if rec.root.end_ns is not None else rec.root.start_ns
    return Compile(
        schema_version=SCHEMA_VERSION,
        id=rec.id_str,
        kind=rec.kind,
        attempt=rec.attempt,
        rank=rec.rank,
        status="error" if failed else "ok",
        error_type=failed,
        start_unix_nano=rec.root.start_ns,
        end_unix_nano=end,
        duration_s=round(rec.duration_ns / 1e9, 9),
        function=code.function,
        file=code.file,
        line=code.line,
        # the user's line that called it, as the run summary writes it
        call_site=call_site_text(site),
        recompile_reason=reason or None,
        graph_breaks=tuple(
            GraphBreak(
                graph_break_code(gb.gb_type, gb.reason), gb.gb_type, gb.filename, gb.lineno, id(gb) in handled, gb.ends_frame
            )
            for gb in rec.graph_breaks
        ),
        cache_requests=tuple(CacheRequests(c, loc, r, n) for (c, loc, r), n in sorted(rec.cache_counts().items())),
        phases=tuple(_phase(c) for c in rec.root.children),
        trace_id=format(rec.trace_id, "032x") if rec.trace_id else None,
        span_id=format(rec.span_id, "016x") if rec.span_id else None,
        torch_version=rec.torch_version,
        process_id=rec.process_id,
        torch_metrics=_numbers(rec.metrics),
    )


class UserSinks(Sink):
    """The user's sinks, in order, each getting every compile's public record (see the module)."""

    def __init__(self, sinks: Sequence[UserSink], capture_payloads: bool = False) -> None:
        self.sinks = tuple(sinks)
        self.capture_payloads = capture_payloads
        self._done = False

    def _call(self, sink: UserSink, what: str, *args: Any) -> Any:
        try:
            return getattr(sink, what)(*args)
        except Exception as exc:  # noqa: BLE001 - a user's sink never reaches torch, nor stops the next one
            record_error(f"sink {type(sink).__name__}.{what}", exc)
            return None

    def on_finish(self, record: CompileRecord) -> None:
        if not self.sinks:
            return
        compile_ = public_record(record, self.capture_payloads)
        for sink in self.sinks:
            self._call(sink, "on_compile", compile_)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all([bool(self._call(s, "force_flush", timeout_millis)) for s in self.sinks])

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        if self._done:
            return
        self._done = True
        for sink in self.sinks:
            self._call(sink, "shutdown", timeout_millis)
