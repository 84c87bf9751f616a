"""The compile series as OpenTelemetry instruments, exported by a meter provider's readers (over OTLP, or the console).

Counters, up-down counters and gauges are observable: the numbers are kept in the bridge's series table and read by
the meter when a reader collects. Histograms are the bridge's own where it built the meter provider
(torch_otel._otel.meter_histograms), else the SDK's instruments, recorded per compile with an exemplar.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.errors import record_error
from .._features.views import Observation, Series
from .metrics import SERIES, _SeriesTable

__all__ = ["OTelBackend"]


class OTelBackend:
    """The same series as OpenTelemetry instruments (exported over OTLP by the meter provider's readers).

    Counters are named without ``_total`` (Prometheus-compatible backends add
    it); histograms carry explicit buckets and an exemplar context pointing at
    the compile's root span.

    Counters, up-down counters and gauges are observable instruments: an
    observation adds to a number kept here (the same table the Prometheus
    backend serves from), and the meter reads the numbers when
    its reader collects (every export interval). The SDK's per-measurement work
    (attribute hashing, the exemplar reservoir, one storage per reader) is then
    paid once per series per export, not once per compile. Histograms, which
    have no observable form and carry exemplars, are kept by the bridge where it
    built the meter provider (``histograms``, torch_otel._otel.meter_histograms)
    and otherwise recorded into the SDK's instruments as they come.
    """

    def __init__(self, meter: Any, series: Mapping[str, Series] | None = None, histograms: Any = None) -> None:
        from opentelemetry.metrics import Observation as OTelObservation

        self._observation = OTelObservation
        self._instruments: dict[str, Any] = {}
        self._series = SERIES if series is None else series
        self._table = _SeriesTable(self._series)
        self._is_histogram = {s.name: s.instrument == "histogram" for s in self._series.values()}
        self._attrs: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
        # the meter provider's histograms, where the bridge built it: kept by the bridge (torch_otel._otel.meter_histograms)
        self._histograms = histograms
        if histograms is not None:
            histograms.define(
                getattr(meter, "_instrumentation_scope", None) or _scope_of(meter),
                [(s.name, s.help, s.unit, s.buckets or ()) for s in self._series.values() if s.instrument == "histogram"],
            )
        for s in self._series.values():
            if s.instrument == "histogram":
                if histograms is not None:
                    continue
                inst = meter.create_histogram(
                    s.name, unit=s.unit, description=s.help, explicit_bucket_boundaries_advisory=list(s.buckets or ())
                )
            else:
                create = {
                    "counter": meter.create_observable_counter,
                    "gauge": meter.create_observable_gauge,
                    "info": meter.create_observable_gauge,
                    "updown": meter.create_observable_up_down_counter,
                }[s.instrument]
                inst = create(s.name, callbacks=[functools.partial(self._observe, s.name)], unit=s.unit, description=s.help)
            self._instruments[s.name] = inst

    def _attributes(self, name: str, labels: tuple[str, ...]) -> dict[str, str]:
        key = (name, labels)
        a = self._attrs.get(key)
        if a is None:  # label sets are bounded: one dict per series, never changed after
            a = self._attrs[key] = dict(zip(self._series[name].labels, labels, strict=True))
        return a

    def _observe(self, name: str, _options: Any) -> list[Any]:
        """The meter's callback: every series of ``name``, as it stands."""
        return [self._observation(v, self._attributes(name, labels)) for labels, v, _ in self._table.rows(name)]

    def after_fork_in_child(self) -> None:
        self._table.after_fork_in_child()
        if self._histograms is not None:
            self._histograms.after_fork_in_child()

    def apply(self, name: str, labels: tuple[str, ...], value: float, exemplar: tuple[int, int] | None) -> None:
        self.apply_all(((name, labels, value, exemplar),))

    def apply_all(self, observations: Sequence[Observation]) -> None:
        histograms, is_histogram = self._histograms, self._is_histogram
        numbers = []
        for ob in observations:
            try:
                name = ob[0]
                if not is_histogram[name]:
                    numbers.append(ob)
                    continue
                _, labels, value, exemplar = ob
                if histograms is not None:
                    histograms.observe(name, labels, self._attributes(name, labels), value, exemplar or None)
                else:
                    ctx = _span_context(exemplar) if exemplar else None
                    self._instruments[name].record(value, self._attributes(name, labels), context=ctx)
            except Exception as exc:  # noqa: BLE001 - one bad observation never stops the others
                record_error("metrics backend OTelBackend", exc)
        self._table.apply_all(numbers)


def _scope_of(meter: Any) -> Any:
    """The instrumentation scope a meter of the SDK exports under (its own attribute, where an SDK names it otherwise)."""
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    return InstrumentationScope(getattr(meter, "name", "torch_otel"), getattr(meter, "version", None))


@functools.lru_cache(maxsize=4)  # one compile's observations share it
def _span_context(ids: tuple[int, int]) -> Any:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    return set_span_in_context(NonRecordingSpan(SpanContext(ids[0], ids[1], False, TraceFlags(TraceFlags.SAMPLED))))
