"""A compile's phase spans handed to the SDK's span processors finished, where the SDK's own path makes the same span.

A phase span is built after its compile ended, with its times, attributes and events known, as a child of the compile's
root, which the SDK's tracer has just sampled and is recording. The SDK's path for it (``start_span``, ``add_event``,
``end``) asks the sampler, builds a mutable span (a lock, every attribute value checked again against the limits), calls
the processors' ``on_start`` and ``_on_ending``, and at ``end`` copies it into the ``ReadableSpan`` the processors
export. Counted in instructions it was 40% of the bridge's span building. Where every one of those steps is known to
leave the span as given, :class:`DirectSpans` builds that ``ReadableSpan`` itself and hands it to the processors'
``on_end``, in the order the SDK would (a span after its children). That holds when:

- the tracer is the SDK's, with no span metrics of its own (``TracerProvider(meter_provider=...)`` counts spans);
- its sampler keeps a sampled local parent's child with no attributes of its own and the parent's trace state: the
  SDK's ``ParentBased`` with its default for that case, ``ALWAYS_ON``, or the bridge's ``torch_otel_rank`` sampler;
- its processors are the SDK's batch and simple processors, whose ``on_start`` and ``_on_ending`` do nothing;
- the span's attributes and events fit the tracer's limits (a span that does not fit takes the SDK's path).

Anything else (a processor of the user's, a sampler of the user's) takes the SDK's path, span by span as before.
``tests/fast/test_direct_spans.py`` compares the two paths' spans field by field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import SpanContext, SpanKind

__all__ = ["MAX_ATTRIBUTES", "MAX_TEXT", "DirectSpans", "direct_spans"]

# What the span mapper's phase attributes are bounded by (SpanMapper._scalar_args): at most 32 attributes, each text
# at most 256 characters. A tracer whose limits are below these takes the SDK's path, which applies them.
MAX_ATTRIBUTES = 32
MAX_TEXT = 256
_PROCESSORS = (BatchSpanProcessor, SimpleSpanProcessor)


def _sampler_keeps_children(sampler: Any) -> bool:
    """Whether ``sampler`` keeps every child of a sampled local parent as given (its attributes, the parent's state)."""
    if sampler is ALWAYS_ON:
        return True
    if type(sampler) is ParentBased:
        return getattr(sampler, "_local_parent_sampled", None) is ALWAYS_ON
    # the bridge's own (torch_otel.sampling, an entry point above this layer): a child, which has no compile kind, goes
    # to its ParentBased(ALWAYS_ON)
    kind = type(sampler)
    if (kind.__module__, kind.__qualname__) == ("torch_otel.sampling", "RankSampler"):
        return _sampler_keeps_children(getattr(sampler, "_others", None))
    return False


def _fits(limit: int | None, need: int) -> bool:
    return limit is None or limit >= need


class DirectSpans:
    """One SDK tracer's direct path (see the module). ``events_limit``: the tracer's events per span."""

    def __init__(self, tracer: SdkTracer) -> None:
        self.on_end = tracer.span_processor.on_end
        self.new_span_id = tracer.id_generator.generate_span_id
        self.resource = tracer.resource
        self.scope = tracer._instrumentation_scope  # noqa: SLF001 - what the SDK's spans carry, read once
        self.info = tracer.instrumentation_info
        self.events_limit: int | None = tracer._span_limits.max_events  # noqa: SLF001

    def context(self, parent: SpanContext) -> SpanContext:
        """A new child's context: a span id of its own, the sampled parent's trace, flags and state (as the SDK's
        sampler gives a kept child of a local parent)."""
        return SpanContext(
            parent.trace_id,
            self.new_span_id(),
            is_remote=False,
            trace_flags=parent.trace_flags,
            trace_state=parent.trace_state,
        )

    def span(
        self,
        name: str,
        ctx: SpanContext,
        parent: SpanContext,
        attributes: Mapping[str, Any],
        events: Sequence[tuple[str, int | None, Mapping[str, Any]]],
        start_ns: int,
        end_ns: int | None,
    ) -> None:
        """A finished child of ``parent`` (its context ``ctx``, from :meth:`context`), handed to the processors."""
        self.on_end(
            ReadableSpan(
                name=name,
                context=ctx,
                parent=parent,
                resource=self.resource,
                attributes=attributes,
                events=tuple(Event(n, a, ts) for n, ts, a in events),
                links=(),
                kind=SpanKind.INTERNAL,
                start_time=start_ns,
                end_time=end_ns,
                instrumentation_info=self.info,
                instrumentation_scope=self.scope,
            )
        )


_cache: dict[int, tuple[Any, Any, DirectSpans | None]] = {}


def direct_spans(tracer: Any) -> DirectSpans | None:
    """The direct path for ``tracer`` (the API's proxy resolved), or None where the SDK's own path must be taken."""
    real = getattr(tracer, "_real_tracer", None) or tracer
    if type(real) is not SdkTracer:
        return None
    processor = getattr(real, "span_processor", None)
    processors = getattr(processor, "_span_processors", None)
    got = _cache.get(id(real))
    if got is not None and got[0] is real and got[1] is processors:  # a processor added since: a new tuple
        return got[2]
    direct = _build(real, processor, processors)
    if len(_cache) > 64:
        _cache.clear()
    _cache[id(real)] = (real, processors, direct)
    return direct


def _build(real: SdkTracer, processor: Any, processors: Any) -> DirectSpans | None:
    if type(processor) is not SynchronousMultiSpanProcessor or not isinstance(processors, tuple):
        return None
    if not all(type(p) in _PROCESSORS for p in processors):
        return None
    if type(getattr(real, "_tracer_metrics", None)).__name__ not in ("NoOpTracerMetrics", "NoneType"):
        return None  # the SDK counts the spans it starts and ends
    if not _sampler_keeps_children(real.sampler):
        return None
    limits = getattr(real, "_span_limits", None)
    if limits is None:
        return None
    if not (
        _fits(limits.max_span_attributes, MAX_ATTRIBUTES)
        and _fits(limits.max_event_attributes, MAX_ATTRIBUTES)
        and _fits(limits.max_span_attribute_length, MAX_TEXT)
        and _fits(limits.max_attribute_length, MAX_TEXT)
    ):
        return None
    try:
        return DirectSpans(real)
    except AttributeError:  # an SDK release without one of these: its own path
        return None
