"""A finished span as the OTLP bytes it is sent as (torch_otel._otel.direct_spans writes a compile's phase spans so)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

__all__ = ["EncodedSpan"]


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
        ReadableSpan.__init__(
            self,
            name=span_name,
            context=phases.context(span_id),
            parent=phases.context(parent_id),
            resource=phases.resource,
            attributes=attributes,
            events=(),
            links=(),
            kind=SpanKind.INTERNAL,
            start_time=start,
            end_time=end,
            instrumentation_info=phases.info,
            instrumentation_scope=phases.scope,
        )
        self.__dict__.pop("_made", None)
        return getattr(self, name)
