"""The histograms of a meter provider the bridge built, aggregated by the bridge and handed to its readers' exporters.

The OpenTelemetry SDK's ``Histogram.record`` builds a measurement, asks the exemplar filter, copies and hashes the
attributes, and offers the exemplar reservoir of every reader, about 1,200 Python bytecodes per observation and one
observation per phase per compile: the largest part of what a compile's metrics cost. The SDK has no observable
histogram and no metric producer, so where the bridge built the meter provider itself (nothing was set globally),
each reader's exporter is wrapped (:class:`HistogramExporter`): the bridge keeps the histograms here, as the SDK's
explicit-bucket aggregation keeps them (cumulative counts, sum, min, max, and per bucket the last exemplar since that
reader's last export), and each export carries them beside the SDK's own metrics, in the bridge's scope. The numbers
are the metrics backend's histogram cells (torch_otel._sinks.histograms), the same that its Prometheus collector reads:
a compile's observation is counted once for both.

It is used only where it gives what the SDK would: every reader cumulative for histograms with the default
aggregation, and the exemplar filter ``trace_based`` or ``always_off`` (:func:`owned_histograms_for`). Any other
setting keeps the SDK's instruments. ``tests/fast/test_meter_histograms.py`` compares the exported points with the
SDK's own on any observations.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["HistogramExporter", "MeterHistograms", "owned_histograms", "owned_histograms_for"]

_owned: weakref.WeakKeyDictionary[Any, MeterHistograms] = weakref.WeakKeyDictionary()
_owned_lock = threading.Lock()


class MeterHistograms:
    """The histograms of one meter provider: the metrics backend's cells (torch_otel._sinks.histograms.HistogramCells,
    counted once per observation for every backend), read at each export as the SDK's points."""

    def __init__(self, exemplars: bool = True) -> None:
        self._exemplars = exemplars
        self._scope: Any = None
        self._cells: Any = None  # the backend's HistogramCells (``read``)
        self._attributes: dict[tuple[str, ...], dict[str, str]] = {}  # one dict per label set, as a point's attributes

    def read(self, scope: Any, cells: Any) -> None:
        """Export ``cells`` (a ``HistogramCells``: its ``meta``, ``cells``, ``lock`` and ``seq``) under ``scope``."""
        self._scope, self._cells = scope, cells

    def after_fork_in_child(self) -> None:
        """Nothing of its own is locked: the cells' lock is the backend's (its ``after_fork_in_child``)."""

    def metrics(self, since: int, now_ns: int) -> tuple[list[Any], int]:
        """The SDK's ``Metric`` of every histogram observed so far, cumulative at ``now_ns``, each bucket's exemplar if
        kept after exemplar number ``since``; and the number to pass next time."""
        from opentelemetry.sdk.metrics import Exemplar
        from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram, HistogramDataPoint, Metric

        table = self._cells
        if table is None:
            return [], since
        out = []
        with table.lock:
            seq = table.seq
            if not self._exemplars:
                since = seq  # the filter is always_off: no exemplar is new
            for name, cells in table.cells.items():
                if not cells:
                    continue
                description, unit, label_names, bounds = table.meta[name]
                points = []
                for labels, cell in cells.items():
                    counts, _, interval, total, low, high, start, slots = cell[:8]
                    cell[3] = total = interval + total  # as the SDK adds each interval's sum to the total
                    cell[2] = 0
                    if not any(counts):
                        continue  # only values the SDK refuses: it has no point for them
                    attributes = self._attributes.get(labels)
                    if attributes is None:
                        attributes = self._attributes[labels] = dict(zip(label_names, labels, strict=True))
                    # the exemplar's attributes not on its point, as the SDK gives them: none left, None for none given
                    kept: dict[str, Any] | None = {} if attributes else None
                    exemplars = [Exemplar(kept, s[1], s[2], s[3], s[4]) for s in slots if s is not None and since < s[0] <= seq]
                    points.append(
                        HistogramDataPoint(
                            attributes=attributes,
                            start_time_unix_nano=start,
                            time_unix_nano=now_ns,
                            count=sum(counts),
                            sum=total,
                            bucket_counts=tuple(counts),
                            explicit_bounds=bounds,
                            min=low,
                            max=high,
                            exemplars=exemplars,
                        )
                    )
                if points:
                    out.append(Metric(name, description, unit, Histogram(points, AggregationTemporality.CUMULATIVE)))
        return out, seq

    def merged(self, metrics_data: Any, since: int) -> tuple[Any, int]:
        """``metrics_data`` (an SDK collection, for one reader) with the histograms added to the bridge's scope."""
        from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics

        resources = list(getattr(metrics_data, "resource_metrics", None) or ())
        if not resources or self._scope is None:
            return metrics_data, since
        now_ns = _collection_time(resources) or time.time_ns()
        ours, seq = self.metrics(since, now_ns)
        if not ours:
            return metrics_data, seq
        first = resources[0]
        scopes = list(first.scope_metrics)
        for i, sm in enumerate(scopes):
            if sm.scope == self._scope:
                scopes[i] = ScopeMetrics(scope=sm.scope, metrics=[*sm.metrics, *ours], schema_url=sm.schema_url)
                break
        else:
            scopes.append(ScopeMetrics(scope=self._scope, metrics=ours, schema_url=self._scope.schema_url or ""))
        resources[0] = ResourceMetrics(resource=first.resource, scope_metrics=scopes, schema_url=first.schema_url)
        return MetricsData(resource_metrics=resources), seq


def _collection_time(resources: Sequence[Any]) -> int | None:
    """The SDK's collection time (every point of one collection has it), so the histograms' points share it."""
    for rm in resources:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in getattr(m.data, "data_points", ()):
                    return int(p.time_unix_nano)
    return None


class HistogramExporter:
    """A reader's exporter, with the bridge's histograms added to each export; everything else is the inner one's (the
    SDK's reader reads its preferences from these two attributes, as from any ``MetricExporter``)."""

    def __init__(self, inner: Any, histograms: MeterHistograms) -> None:
        self._preferred_temporality = getattr(inner, "_preferred_temporality", None)
        self._preferred_aggregation = getattr(inner, "_preferred_aggregation", None)
        self.inner = inner
        self._histograms = histograms
        self._since = 0  # this reader's exemplars: those offered after this number are new to it

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        try:
            metrics_data, self._since = self._histograms.merged(metrics_data, self._since)
        except Exception as exc:  # noqa: BLE001 - the SDK's own metrics still go
            from .._core.errors import record_error

            record_error("meter histograms", exc)
        return self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def owned_histograms_for(exporters: Sequence[Any], environ: Mapping[str, str] | None = None) -> MeterHistograms | None:
    """A table for the meter provider about to be built with readers on ``exporters``, or None where the SDK's own
    histograms must stay: a reader that wants them delta, or aggregated otherwise than in explicit buckets, or an
    exemplar filter other than ``trace_based`` and ``always_off`` (the SDK reads it from the process's environment)."""
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality
    from opentelemetry.sdk.metrics.view import DefaultAggregation, ExplicitBucketHistogramAggregation

    environ = os.environ if environ is None else environ
    exemplar_filter = environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "trace_based")
    if exemplar_filter not in ("trace_based", "always_off") or not exporters:
        return None
    for e in exporters:
        temporality = (getattr(e, "_preferred_temporality", None) or {}).get(Histogram, AggregationTemporality.CUMULATIVE)
        aggregation = (getattr(e, "_preferred_aggregation", None) or {}).get(Histogram)
        if temporality is not AggregationTemporality.CUMULATIVE:
            return None
        if aggregation is None or type(aggregation) is DefaultAggregation:
            continue  # the instrument's own: explicit buckets at the advised bounds
        if type(aggregation) is not ExplicitBucketHistogramAggregation:
            return None  # exponential buckets, or no histogram at all
        if getattr(aggregation, "_boundaries", None) is not None or getattr(aggregation, "_record_min_max", True) is not True:
            return None  # bounds of the reader's own, or no min and max
    return MeterHistograms(exemplars=exemplar_filter == "trace_based")


def own(provider: Any, histograms: MeterHistograms) -> None:
    """``provider``'s histograms are ``histograms`` (its readers' exporters add them)."""
    with _owned_lock:
        _owned[provider] = histograms


def owned_histograms(provider: Any) -> MeterHistograms | None:
    """The bridge's histograms of ``provider``, if it built the provider with them; else the SDK's instruments stay."""
    with _owned_lock:
        try:
            return _owned.get(provider)
        except TypeError:  # a provider that cannot be weakly referenced was not built here
            return None
