"""What a pipeline's metrics backends serve: every series' numbers, kept once for all of them.

A compile's observations are applied here once (:class:`SeriesStore`), whichever backends serve them: the Prometheus
backend's collectors and the OpenTelemetry backend's observable instruments and histograms read the same numbers when
they collect. Counters and gauges are a table of numbers (:class:`_SeriesTable`), histograms a table of cells
(torch_otel._sinks.histograms.HistogramCells).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._core.errors import record_error
from .._core.ranks import RankSet
from .._features.views import Observation, Series
from .histograms import HistogramCells

__all__ = ["SeriesStore"]


class SeriesStore:
    """Every series of ``series`` (a histogram with no buckets of its own has ``default_buckets``): ``apply_all`` applies
    a compile's observations once; the backends built on this store read them (``numbers``, ``histograms``)."""

    def __init__(self, series: Mapping[str, Series], default_buckets: Sequence[float] = ()) -> None:
        self.series = series
        self.numbers = _SeriesTable(series)
        self.histograms = HistogramCells(
            (s.name, s.help, s.unit, s.labels, s.buckets or default_buckets)
            for s in series.values()
            if s.instrument == "histogram"
        )
        self.is_histogram = {s.name: s.instrument == "histogram" for s in series.values()}

    def after_fork_in_child(self) -> None:
        self.numbers.after_fork_in_child()
        self.histograms.after_fork_in_child()

    def apply_all(self, observations: Sequence[Observation]) -> None:
        """Each ``(name, labels, value, exemplar)``: a histogram's value counted with its exemplar (the compile's root
        span's trace and span ids, or None), a counter's added, a gauge's set. One that fails is counted, and the rest
        still go."""
        is_histogram = self.is_histogram
        values: list[Observation] = []
        numbers: list[Observation] = []
        for ob in observations:
            try:
                (values if is_histogram[ob[0]] else numbers).append(ob)
            except Exception as exc:  # noqa: BLE001 - one bad observation never stops the others
                record_error("metrics series", exc)
        if values:
            self.histograms.observe_all(values)
        if numbers:
            self.numbers.apply_all(numbers)


class _SeriesTable:
    """The counter and gauge series of ``SERIES``, as numbers: what both backends read when they collect.

    Registered on a prometheus_client registry, it is the collector that serves them at scrape time.
    """

    def __init__(self, series: Mapping[str, Series]) -> None:
        self._lock = threading.Lock()
        self._series = series
        self.detail_ranks = RankSet("all")  # the ranks whose counters carry ``_created`` (the rank is the first label)
        self._values: dict[str, dict[tuple[str, ...], list[float]]] = {
            s.name: {} for s in self._series.values() if s.instrument != "histogram"
        }
        # name -> (its series, whether a number adds to it (a counter, an up-down counter), whether it is an info):
        # one lookup per number
        self._of = {
            s.name: (self._values[s.name], s.instrument in ("counter", "updown"), s.instrument == "info")
            for s in self._series.values()
            if s.instrument != "histogram"
        }

    def apply_all(self, numbers: Sequence[Observation]) -> None:
        """Each ``(name, labels, value, exemplar)``: a counter or up-down counter adds the value, a gauge or info takes
        it (the exemplar is not kept: only histograms keep one)."""
        of = self._of
        with self._lock:
            for ob in numbers:
                try:
                    name, labels, value, _ = ob
                    series, adds, info = of[name]
                    cell = series.get(labels)
                    if cell is None:
                        if info:  # the rank's one series: a new label set replaces its last (only a new one: the
                            # others went when this one came)
                            for other in [k for k in series if k[0] == labels[0]]:
                                del series[other]
                        series[labels] = [value, time.time()]  # the value, and when the series was created
                    elif adds:
                        cell[0] += value
                    else:  # a gauge, an info
                        cell[0] = value
                except Exception as exc:  # noqa: BLE001 - one bad observation never stops the others
                    record_error("metrics series", exc)

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it as the process forked

    def rows(self, name: str) -> list[tuple[tuple[str, ...], float, float]]:
        """Every series of ``name`` as it stands: (label values, value, when it was created)."""
        with self._lock:
            return [(labels, cell[0], cell[1]) for labels, cell in self._values[name].items()]

    def collect(self) -> Iterator[Any]:
        from prometheus_client import metrics as prometheus_metrics

        created = getattr(prometheus_metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        for name in self._values:
            s = self._series[name]
            fam = _family(s)
            for labels, value, since in self.rows(name):
                if s.instrument == "counter":
                    fam.add_metric(labels, value, created=since if created and labels[0] in self.detail_ranks else None)
                else:
                    fam.add_metric(labels, value)
            yield fam

    def describe(self) -> list[Any]:
        """Every family ``collect`` yields, empty: the registry refuses a second metric of one of these names."""
        return [_family(self._series[name]) for name in self._values]


def _family(s: Series) -> Any:
    """``s`` as an empty prometheus_client family (a counter, else a gauge): what ``collect`` fills, ``describe`` returns."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    return (CounterMetricFamily if s.instrument == "counter" else GaugeMetricFamily)(s.name, s.help, labels=s.labels)
