"""A finished span as the OTLP bytes it is sent as (torch_otel._otel.direct_spans writes a compile's phase spans so)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

__all__ = ["EncodedSpan", "finished_span"]


class EncodedSpan(ReadableSpan):
    """A finished phase span as its OTLP ``Span`` message's bytes (``_otlp``), which the bridge's encoder sends as they
    are. Its resource and scope are set (the encoder groups by them); every other field is the direct path's
    ``ReadableSpan``'s, made at the first read of one (the SDK's encoder, a console exporter)."""

    def __init__(
        self, otlp: bytes, phases: Any, name: str, span_id: int, parent_id: int, attributes: Any, start: int, end: int
    ) -> None:  # the fields a reader needs are made on its first read (__getattr__)
        self._otlp = otlp
        self._resource = phases.resource
        self._instrumentation_scope = phases.scope
        self._made = (phases, name, span_id, parent_id, attributes, start, end)

    def __getattr__(self, name: str) -> Any:
        made = self.__dict__.get("_made")  # taken only once the fields are set: a reader on another thread meanwhile
        if made is None:  # makes the same fields, never finds them missing
            raise AttributeError(name)
        phases, span_name, span_id, parent_id, attributes, start, end = made
        span = finished_span(span_name, phases.context(span_id), phases.context(parent_id), phases, attributes, (), start, end)
        self.__dict__.update(vars(span))
        self.__dict__.pop("_made", None)
        return getattr(self, name)


def finished_span(
    name: str, ctx: Any, parent: Any, tracer: Any, attributes: Any, events: tuple[Any, ...], start: int, end: int | None
) -> ReadableSpan:
    """A finished internal span as the SDK's path ends one, of ``tracer``'s resource and scope (``resource``, ``info``,
    ``scope``): the direct path's phase span (torch_otel._otel.direct_spans), and what an :class:`EncodedSpan` reads as."""
    return ReadableSpan(
        name=name,
        context=ctx,
        parent=parent,
        resource=tracer.resource,
        attributes=attributes,
        events=events,
        links=(),
        kind=SpanKind.INTERNAL,
        start_time=start,
        end_time=end,
        instrumentation_info=tracer.info,
        instrumentation_scope=tracer.scope,
    )
