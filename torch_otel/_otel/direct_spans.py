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

The compile's root takes the same path where the SDK is one whose steps are known here (:meth:`DirectSpans.root`):
the tracer's sampler is asked as its ``start_span`` asks it (any sampler, the user's too), with the same trace id, trace
flags and span id, and a kept root records its attributes, events and status as given. At its ``end`` each value is
checked as the SDK's ``BoundedAttributes`` would (a text, number or flag within the limits is kept as it is; any other
value is cleaned by the SDK's own function), and a root that passes a limit (too many attributes, events or links) is
built by the SDK's own span, from the same calls in the same order: its limits apply and its counts of what it dropped
are kept.

Where every processor is the SDK's batch processor exporting through the bridge's OTLP encoder (the default: the bridge
built the provider, OTLP over gRPC), a phase span with no events is written as its OTLP bytes as it is made
(:class:`Phases`): an :class:`EncodedSpan`, which the encoder sends as it is. No ``SpanContext``, event tuple or span
fields are built for it, and the export does not encode it again. Anything else that reads one (the SDK's own encoder,
after a fork that changed the exporter) sees the ``ReadableSpan`` the direct path would have made, built at its first
read.

``tests/fast/test_direct_spans.py`` compares the paths' spans field by field, and the written bytes with the SDK's
encoding of the SDK's spans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import is_, not_
from time import time_ns
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    get_current_span,
)

try:  # what the root's path needs of the SDK: its value cleaning, its span and link checks (an older SDK: its own path)
    from opentelemetry.attributes import _clean_attribute_value
    from opentelemetry.sdk.trace import _is_valid_link, _Span
except ImportError:  # pragma: no cover - an SDK without them
    _clean_attribute_value = _is_valid_link = _Span = None  # type: ignore[assignment,misc]

from .encoded_span import EncodedSpan, finished_span
from .wire import CHILD_TAIL, INTERNAL_KIND, Encoder, Unencodable, encodes_fast, times

__all__ = ["MAX_ATTRIBUTES", "MAX_TEXT", "DirectSpans", "EncodedSpan", "Phases", "direct_spans"]

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


def _on_end(multi: Any) -> Any:
    """What the tracer's processors do with a finished span, as their ``on_end`` does it: a batch processor queues it
    when it is sampled (its queue's ``emit``, without the two calls around it), a simple one exports it."""
    ends = []
    for p in multi._span_processors:  # noqa: SLF001 - a tuple of the SDK's batch and simple processors (_build)
        emit = getattr(getattr(p, "_batch_processor", None), "emit", None) if type(p) is BatchSpanProcessor else None
        if emit is None:
            ends.append(p.on_end)
            continue

        def queued(span: ReadableSpan, emit: Any = emit) -> None:
            if span.context.trace_flags.sampled:  # as BatchSpanProcessor.on_end: an unsampled span is not exported
                emit(span)

        ends.append(queued)
    if len(ends) == 1:
        return ends[0]
    if not ends:
        return multi.on_end

    def each(span: ReadableSpan) -> None:
        for end in ends:
            end(span)

    return each


def _fits(limit: int | None, need: int) -> bool:
    return limit is None or limit >= need


class DirectSpans:
    """One SDK tracer's direct path (see the module). ``limits``: the tracer's span limits."""

    def __init__(self, tracer: SdkTracer) -> None:
        self.on_end = _on_end(tracer.span_processor)
        self.resource = tracer.resource
        self.scope = tracer._instrumentation_scope  # noqa: SLF001 - what the SDK's spans carry, read once
        self.info = tracer.instrumentation_info
        self.limits = tracer._span_limits  # noqa: SLF001
        self.tracer = tracer
        # the root's path, where the SDK's start_span is the one this module follows (trace flags with RANDOM_TRACE_ID,
        # a tracer that can be disabled)
        self.roots = (
            _Span is not None and hasattr(TraceFlags, "RANDOM_TRACE_ID") and callable(getattr(tracer, "_is_enabled", None))
        )
        # the batch processors' queues, where every processor queues for the bridge's encoder (_encoded_emits)
        self.emits: list[Any] | None = None
        self.encoder: Encoder | None = None

    def phases(self, root: SpanContext) -> Phases | None:
        """The writer of the phase spans under ``root`` as their bytes; None where they are not written so (see the
        module), or where the root is recorded but not sampled (the batch processors export none of its spans)."""
        if self.emits is None or not root.trace_flags.sampled:
            return None
        return Phases(self, root)

    def root(self, name: str, context: Any, attributes: Mapping[str, Any], links: Sequence[Link], start_ns: int) -> Any:
        """A compile's root, as the tracer's ``start_span(name, context, INTERNAL, attributes, links, start_ns)`` starts
        it: the sampler asked with the same arguments, the same ids drawn in the same order. A kept root records what
        it is given until its ``end`` hands it to the processors (see the module); a dropped one is the SDK's
        non-recording span."""
        tracer = self.tracer
        links = links or ()
        parent: SpanContext | None = get_current_span(context).get_span_context()
        if not tracer._is_enabled():  # noqa: SLF001 - the SDK's tracer configurator turned it off
            return NonRecordingSpan(parent)  # type: ignore[arg-type]  # as the SDK's start_span does
        ids = tracer.id_generator
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = ids.generate_trace_id()
            random_id = ids.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random_id = parent.trace_flags.random_trace_id
        sampled = tracer.sampler.should_sample(context, trace_id, name, SpanKind.INTERNAL, attributes, links)
        kept: bool = sampled.decision.is_sampled()  # type: ignore[no-untyped-call]
        flags = TraceFlags.SAMPLED if kept else TraceFlags.DEFAULT
        if random_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        ctx = SpanContext(
            trace_id, ids.generate_span_id(), is_remote=False, trace_flags=TraceFlags(flags), trace_state=sampled.trace_state
        )
        if not sampled.decision.is_recording():  # type: ignore[no-untyped-call]
            return NonRecordingSpan(ctx)
        return _Root(self, name, ctx, parent, sampled.attributes, links, start_ns, context)

    def context(self, parent: SpanContext) -> SpanContext:
        """A new child's context: a span id of its own, the sampled parent's trace, flags and state (as the SDK's
        sampler gives a kept child of a local parent)."""
        return SpanContext(
            parent.trace_id,
            self.tracer.id_generator.generate_span_id(),  # the tracer's generator as it is now, as the root's draws
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
        events_made = tuple(Event(n, a, ts) for n, ts, a in events)
        self.on_end(finished_span(name, ctx, parent, self, attributes, events_made, start_ns, end_ns))


class Phases:
    """One compile's phase spans written as their OTLP bytes (:class:`EncodedSpan`), children of its sampled root:
    each the message the encoder would write of the direct path's span, queued as that span would be."""

    __slots__ = ("_encoder", "_head", "_state", "emits", "generate", "info", "resource", "root", "scope")

    def __init__(self, direct: DirectSpans, root: SpanContext) -> None:
        encoder = direct.encoder
        assert encoder is not None and direct.emits is not None
        self._encoder = encoder
        self.root, self.resource, self.scope, self.info = root, direct.resource, direct.scope, direct.info
        self.emits = direct.emits
        self.generate = direct.tracer.id_generator.generate_span_id  # the tracer's generator as it is now
        self._head = b"\x0a\x10" + root.trace_id.to_bytes(16, "big") + b"\x12\x08"  # the trace id; the span id's head
        self._state = encoder.state_field(root.trace_state)

    def context(self, span_id: int) -> SpanContext:
        """The context :meth:`DirectSpans.context` gives a span of this compile with that id (the root's, for its id)."""
        root = self.root
        return SpanContext(root.trace_id, span_id, is_remote=False, trace_flags=root.trace_flags, trace_state=root.trace_state)

    def span(self, name: str, span_id: int, parent_id: int, attributes: dict[str, Any], start: int, end: int) -> bool:
        """A finished span with no events, written and queued; False (nothing done) where a value cannot be written."""
        encoder = self._encoder
        try:
            fields = encoder.attributes(attributes) if attributes else b""
        except Unencodable:
            return False
        otlp = b"".join(
            (
                self._head,
                span_id.to_bytes(8, "big"),
                self._state,
                b"\x22\x08",  # the parent's span id
                parent_id.to_bytes(8, "big"),
                encoder.name_field(name),
                INTERNAL_KIND,
                times(0x39, start, 0x41, end),
                fields,
                CHILD_TAIL,
            )
        )
        span = EncodedSpan(otlp, self, name, span_id, parent_id, attributes, start, end)
        for emit in self.emits:
            emit(span)
        return True


def _encoded_emits(processors: tuple[Any, ...]) -> list[Any] | None:
    """Each processor's queue, where every one is the SDK's batch processor exporting through the bridge's encoder
    (its exporter, or the inner one of the bridge's guard around it): a span may then be queued as its bytes."""
    emits = []
    for p in processors:
        queue = getattr(p, "_batch_processor", None) if type(p) is BatchSpanProcessor else None
        exporter = getattr(queue, "_exporter", None)
        emit = getattr(queue, "emit", None)
        if emit is None or not encodes_fast(getattr(exporter, "inner", exporter)):
            return None
        emits.append(emit)
    return emits or None


_SCALAR_TYPES = frozenset((str, bool, int, float))  # values the SDK keeps as they are (a text within its limit)
_TEXT_TYPES = frozenset((str,))  # an attribute's key, and the values of a sequence kept as their tuple
_SEQUENCE_TYPES = frozenset((list, tuple))  # a list of texts (a compile's recompile reasons) is kept as their tuple


def _cleaned(
    given: Mapping[Any, Any], later: Sequence[tuple[Any, Any]], most: int | None, longest: int | None
) -> dict[str, Any] | None:
    """``given``, then each of ``later`` set, as the SDK's ``BoundedAttributes(most, given, max_value_len=longest)``
    holds them; None where it would drop one (a key that is not a text, an empty one, more than ``most``): the SDK's own
    span must then apply its limits. A text, number or flag within ``longest`` is kept as it is; any other value is
    cleaned by the SDK's own function. The checks run over the whole mapping at once, in C (a Python step per value cost
    as much as the SDK's own)."""
    out = dict(given)
    for k, v in later:
        out.pop(k, None)  # set again: last, as the SDK keeps it
        out[k] = v
    if (most is not None and len(out) > most) or "" in out:
        return None
    try:  # every key a text (a subclass too, as the SDK's check): joined in C, where a Python step per key cost more
        "".join(out)
    except TypeError:
        return None
    values = out.values()
    types = list(map(type, values))
    if longest is not None and any(map(longest.__lt__, map(len, compress(values, map(is_, types, repeat(str)))))):
        keys = list(out)  # a text past the limit: every value looked at
    elif _SCALAR_TYPES.issuperset(types):
        return out
    else:  # the others (a list of texts, a mapping), each cleaned below
        keys = list(compress(out, map(not_, map(_SCALAR_TYPES.__contains__, types))))
    for k in keys:
        v = out[k]
        t = type(v)
        if t is str and longest is not None and len(v) > longest:
            out[k] = _clean_attribute_value(v, longest)  # a long text: the SDK's cleaning (its warning, its cut)
        elif t in _SEQUENCE_TYPES and _TEXT_TYPES.issuperset(map(type, v)):
            if longest is None or not any(map(longest.__lt__, map(len, v))):
                out[k] = tuple(v)  # texts within the limit: the tuple the SDK's cleaning makes of them
            else:
                out[k] = _clean_attribute_value(v, longest)
        elif t not in _SCALAR_TYPES:
            out[k] = _clean_attribute_value(v, longest)  # another sequence, a mapping: the SDK's cleaning
    return out


class _Root:
    """A kept root (:meth:`DirectSpans.root`): the calls the span mapper makes of an SDK span, kept until ``end``."""

    def __init__(
        self,
        direct: DirectSpans,
        name: str,
        ctx: SpanContext,
        parent: SpanContext | None,
        attributes: Mapping[str, Any],
        links: Sequence[Link],
        start_ns: int,
        context: Any,
    ) -> None:
        self._direct, self._name, self._ctx, self._parent = direct, name, ctx, parent
        self._attributes, self._links, self._start, self._context = attributes, links, start_ns, context
        self._later: list[tuple[str, Any]] = []
        self._events: list[tuple[str, Mapping[str, Any], int]] = []
        self._statuses: list[Status] = []
        self._end: int | None = None

    def get_span_context(self) -> SpanContext:
        return self._ctx

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._end is None:
            self._later.append((key, value))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        if self._end is None:
            self._events.append((name, attributes or {}, time_ns() if timestamp is None else timestamp))

    def set_status(self, status: Status) -> None:
        if self._end is None:
            self._statuses.append(status)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = time_ns() if end_time is None else end_time
        span = self._finished()
        if span is None:
            self._sdk_span()
        else:
            self._direct.on_end(span)

    def _finished(self) -> ReadableSpan | None:
        """The span as the SDK's would end, or None where one of its limits applies."""
        limits, d = self._direct.limits, self._direct
        attributes = _cleaned(self._attributes, self._later, limits.max_span_attributes, limits.max_span_attribute_length)
        if attributes is None or not _fits(limits.max_events, len(self._events)) or not _fits(limits.max_links, len(self._links)):
            return None
        events = []
        for name, given, ts in self._events:
            a = _cleaned(given, (), limits.max_event_attributes, limits.max_attribute_length)
            if a is None:
                return None
            events.append(Event(name, a, ts))
        links = []
        for link in self._links:
            a = _cleaned(link.attributes or {}, (), limits.max_link_attributes, limits.max_attribute_length)
            if a is None or not _is_valid_link(link.context, link.attributes):
                return None
            links.append(link if a == link.attributes else Link(link.context, a))
        status = Status(StatusCode.UNSET)
        for st in self._statuses:  # the SDK's rule: OK is final, UNSET is never set
            if status.status_code is not StatusCode.OK and st.status_code is not StatusCode.UNSET:
                status = st
        return ReadableSpan(
            name=self._name,
            context=self._ctx,
            parent=self._parent,
            resource=d.resource,
            attributes=attributes,
            events=tuple(events),
            links=tuple(links),
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=self._start,
            end_time=self._end,
            instrumentation_info=d.info,
            instrumentation_scope=d.scope,
        )

    def _sdk_span(self) -> None:
        """The SDK's own span, given the same calls in the same order: its limits apply, and it counts what it drops."""
        t = self._direct.tracer
        span = _Span(
            name=self._name,
            context=self._ctx,
            parent=self._parent,
            sampler=t.sampler,
            resource=t.resource,
            attributes=self._attributes,
            span_processor=t.span_processor,
            kind=SpanKind.INTERNAL,
            links=self._links,
            instrumentation_info=t.instrumentation_info,
            limits=t._span_limits,  # noqa: SLF001
            instrumentation_scope=t._instrumentation_scope,  # noqa: SLF001
        )
        span.start(start_time=self._start, parent_context=self._context)
        for key, value in self._later:
            span.set_attribute(key, value)
        for name, attributes, ts in self._events:
            span.add_event(name, attributes, timestamp=ts)
        for status in self._statuses:
            span.set_status(status)
        span.end(end_time=self._end)


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
        direct = DirectSpans(real)
    except AttributeError:  # an SDK release without one of these: its own path
        return None
    direct.emits = _encoded_emits(processors)
    if direct.emits is not None:
        direct.encoder = Encoder()
    return direct
