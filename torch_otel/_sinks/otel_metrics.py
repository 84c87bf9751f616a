"""The compile series as OpenTelemetry instruments, exported by a meter provider's readers (over OTLP, or the console).

Counters, up-down counters and gauges are observable: the numbers are kept in the bridge's series store
(torch_otel._sinks.store) and read by the meter when a reader collects. Histograms are the store's cells, exported by
the bridge where it built the meter provider (torch_otel._otel.meter_histograms), else the SDK's instruments, recorded
per compile with an exemplar.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.errors import record_error
from .._features.views import Observation, Series
from .metrics import series_store
from .store import SeriesStore

__all__ = ["OTelBackend"]


class OTelBackend:
    """The same series as OpenTelemetry instruments (exported over OTLP by the meter provider's readers).

    Counters are named without ``_total`` (Prometheus-compatible backends add
    it); histograms carry explicit buckets and an exemplar context pointing at
    the compile's root span.

    The numbers are kept in ``store`` (its own, unless given one the Prometheus
    backend serves too: then a compile's observation is applied once for both).
    Counters, up-down counters and gauges are observable instruments that read
    the store's numbers when a reader collects (every export interval): the SDK's
    per-measurement work (attribute hashing, the exemplar reservoir, one storage
    per reader) is paid once per series per export, not once per compile.
    Histograms, which have no observable form and carry exemplars, are the
    store's cells, exported by the bridge where it built the meter provider
    (``histograms``, torch_otel._otel.meter_histograms); otherwise each
    observation is recorded into the SDK's instruments as it comes (``record``).
    """

    def __init__(
        self, meter: Any, series: Mapping[str, Series] | None = None, histograms: Any = None, store: SeriesStore | None = None
    ) -> None:
        from opentelemetry.metrics import Observation as OTelObservation

        self._observation = OTelObservation
        self._instruments: dict[str, Any] = {}
        self.store = series_store(series) if store is None else store
        self._series = self.store.series
        self._attrs: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
        # the meter provider's histograms, where the bridge built it: the store's cells, exported by the bridge
        self._histograms = histograms
        # what this backend records itself: the SDK's histograms, where the bridge does not export its own
        self.record = self._record_histograms if histograms is None else None
        if histograms is not None:
            histograms.read(getattr(meter, "_instrumentation_scope", None) or _scope_of(meter), self.store.histograms)
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
        return [self._observation(v, self._attributes(name, labels)) for labels, v, _ in self.store.numbers.rows(name)]

    def after_fork_in_child(self) -> None:
        self.store.after_fork_in_child()

    def apply(self, name: str, labels: tuple[str, ...], value: float, exemplar: tuple[int, int] | None) -> None:
        self.apply_all(((name, labels, value, exemplar),))

    def apply_all(self, observations: Sequence[Observation]) -> None:
        """``observations`` into the store, and into the SDK's histograms where those are recorded."""
        self.store.apply_all(observations)
        if self.record is not None:
            self.record(observations)

    def _record_histograms(self, observations: Sequence[Observation]) -> None:
        is_histogram = self.store.is_histogram
        for ob in observations:
            try:
                name = ob[0]
                if is_histogram[name]:
                    _, labels, value, exemplar = ob
                    ctx = _span_context(exemplar) if exemplar else None
                    self._instruments[name].record(value, self._attributes(name, labels), context=ctx)
            except Exception as exc:  # noqa: BLE001 - one bad observation never stops the others
                record_error("metrics backend OTelBackend", exc)


def _scope_of(meter: Any) -> Any:
    """The instrumentation scope a meter of the SDK exports under (its own attribute, where an SDK names it otherwise)."""
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    return InstrumentationScope(getattr(meter, "name", "torch_otel"), getattr(meter, "version", None))


@functools.lru_cache(maxsize=4)  # one compile's observations share it
def _span_context(ids: tuple[int, int]) -> Any:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    return set_span_in_context(NonRecordingSpan(SpanContext(ids[0], ids[1], False, TraceFlags(TraceFlags.SAMPLED))))
