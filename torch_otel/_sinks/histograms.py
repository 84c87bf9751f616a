"""The histogram series, counted once by the bridge and read by every metrics backend that serves them.

A pipeline's histograms are one table of cells (:class:`HistogramCells`), kept the way both expositions need: each
observation is a bucket found by bisection and a few numbers set under one lock, once, whichever backends serve it.
Each backend reads the cells when it collects:

- Prometheus (:class:`PrometheusHistograms`, a collector on a prometheus_client registry) builds its samples at scrape
  time as prometheus_client builds its own: ``_bucket`` cumulative with the last trace-id exemplar of each bucket,
  ``_count``, ``_sum``, ``_created``. prometheus_client's ``Histogram.observe`` with an exemplar validates the
  exemplar's labels, takes a lock per bucket and builds an ``Exemplar`` each time: a quarter of what one compile's
  metrics cost, before these cells. ``tests/fast/test_histograms.py`` compares the two on any observations.
- OpenTelemetry, where the bridge built the meter provider (torch_otel._otel.meter_histograms), exports the same cells
  as the SDK's explicit-bucket aggregation would: cumulative counts, sum, min, max, and per bucket the last exemplar
  since that reader's last export. ``tests/fast/test_meter_histograms.py`` compares them with the SDK's own.

The two differ on values OpenTelemetry refuses (negative, infinite, NaN): the SDK drops them, prometheus_client counts
them (NaN in no bucket, but in the sum). Such a value is kept apart in its cell (``REFUSED``), which only the
Prometheus collector adds in.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .._core.errors import record_error

__all__ = ["HistogramCells", "PrometheusHistograms"]

# A cell: a list, by these indices (one histogram series: a name and its label values)
COUNTS = 0  # per bucket (the last: above every bound), the observations both expositions count
SUM = 1  # every value, in order, as prometheus_client sums them
INTERVAL = 2  # OpenTelemetry's: the counted values since its last export (the SDK adds each interval to its total)
TOTAL = 3  # OpenTelemetry's sum before this interval
LOW, HIGH = 4, 5  # the counted values' min and max
START = 6  # when the series began (ns)
EXEMPLARS = 7  # per bucket, the last value given a trace: (seq, value, time ns, span id, trace id), or None
REFUSED = 8  # None, or (per-bucket counts, per-bucket exemplars) of the values only Prometheus counts


class HistogramCells:
    """Every histogram of ``(name, help, unit, label names, bucket bounds)``: ``observe`` counts a value once."""

    def __init__(
        self, histograms: Iterable[tuple[str, str, str, Sequence[str], Sequence[float]]], clock: Any = time.time_ns
    ) -> None:
        self.lock = threading.Lock()
        self._clock = clock
        # name -> (help, unit, label names, finite bounds, ascending)
        self.meta: dict[str, tuple[str, str, tuple[str, ...], tuple[float, ...]]] = {}
        for name, doc, unit, labels, bounds in histograms:
            finite = tuple(sorted(float(b) for b in bounds if float(b) != math.inf))
            self.meta[name] = (doc, unit, tuple(labels), finite)
        self._bounds = {name: m[3] for name, m in self.meta.items()}
        # name -> label values -> cell
        self.cells: dict[str, dict[tuple[str, ...], list[Any]]] = {name: {} for name in self.meta}
        self.seq = 0  # exemplars kept so far: an OpenTelemetry reader exports those kept since its last export

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # a parent's thread may have held it as the process forked

    def observe(self, name: str, labels: tuple[str, ...], value: float, ids: tuple[int, int] | None) -> None:
        """One value of histogram ``name`` for ``labels``; ``ids``: the exemplar's trace and span ids, or None."""
        self.observe_all(((name, labels, value, ids),))

    def observe_all(self, observations: Iterable[tuple[str, tuple[str, ...], float, tuple[int, int] | None]]) -> None:
        """Each ``(name, labels, value, ids)`` as :meth:`observe`, under one lock and at one time (a compile's values).
        One that fails (a name with no histogram) is counted, and the rest still go."""
        bounds_of, cells_of, inf = self._bounds, self.cells, math.inf
        now = self._clock()
        with self.lock:
            for name, labels, value, ids in observations:
                try:
                    bounds = bounds_of[name]
                    counted = value >= 0 and value != inf  # what both count (a value that is no number raises here)
                    cell = cells_of[name].get(labels)
                    if cell is None:
                        n = len(bounds) + 1
                        cell = cells_of[name][labels] = [[0] * n, 0.0, 0, 0, inf, -inf, now, [None] * n, None]
                    cell[1] += value  # SUM
                    if counted:
                        i = bisect_left(bounds, value)
                        cell[0][i] += 1  # COUNTS
                        cell[2] += value  # INTERVAL
                        if value < cell[4]:  # LOW
                            cell[4] = value
                        if value > cell[5]:  # HIGH
                            cell[5] = value
                        if ids:
                            self.seq += 1
                            cell[7][i] = (self.seq, value, now, ids[1], ids[0])  # EXEMPLARS
                    elif value == value:  # negative or infinite: a bucket for Prometheus alone (NaN: in none, only summed)
                        self._refused(cell, bounds, value, ids, now)
                except Exception as exc:  # noqa: BLE001 - one bad observation never stops the others
                    record_error("metrics histograms", exc)

    def _refused(self, cell: list[Any], bounds: tuple[float, ...], value: float, ids: tuple[int, int] | None, now: int) -> None:
        refused = cell[REFUSED]
        if refused is None:
            n = len(bounds) + 1
            refused = cell[REFUSED] = ([0] * n, [None] * n)
        i = bisect_left(bounds, value)
        refused[0][i] += 1
        if ids:
            self.seq += 1
            refused[1][i] = (self.seq, value, now, ids[1], ids[0])


class PrometheusHistograms:
    """The cells' histograms served on a prometheus_client registry, built at scrape time."""

    def __init__(self, cells: HistogramCells) -> None:
        self.cells = cells

    def collect(self) -> Iterator[Any]:
        from prometheus_client import metrics as prometheus_metrics
        from prometheus_client.metrics_core import Metric
        from prometheus_client.samples import Exemplar
        from prometheus_client.utils import floatToGoString

        created = getattr(prometheus_metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        cells = self.cells
        for name, (doc, _, label_names, bounds) in cells.meta.items():
            les = [*(floatToGoString(b) for b in bounds), "+Inf"]  # type: ignore[no-untyped-call]
            with cells.lock:
                rows = [_prometheus_row(labels, c) for labels, c in cells.cells[name].items()]
            fam = Metric(name, doc, "histogram")
            for labels, counts, total, since, exemplars in rows:
                base = dict(zip(label_names, labels, strict=True))
                acc = 0
                for le, n, ex in zip(les, counts, exemplars, strict=True):
                    acc += n
                    exemplar = Exemplar({"trace_id": f"{ex[4]:032x}"}, ex[1], ex[2] / 1e9) if ex is not None else None
                    fam.add_sample(f"{name}_bucket", {**base, "le": le}, acc, exemplar=exemplar)
                fam.add_sample(f"{name}_count", base, acc)
                fam.add_sample(f"{name}_sum", base, total)
                if created:
                    fam.add_sample(f"{name}_created", base, since / 1e9)
            yield fam

    def describe(self) -> list[Any]:
        """Every family ``collect`` yields, empty: the registry refuses a second metric of one of these names."""
        from prometheus_client.metrics_core import Metric

        return [Metric(name, doc, "histogram") for name, (doc, *_) in self.cells.meta.items()]


def _prometheus_row(labels: tuple[str, ...], cell: list[Any]) -> tuple[Any, ...]:
    """A cell as Prometheus counts it (under the cells' lock): every value, those OpenTelemetry refuses too."""
    counts, exemplars = list(cell[COUNTS]), list(cell[EXEMPLARS])
    refused = cell[REFUSED]
    if refused is not None:
        counts = [a + b for a, b in zip(counts, refused[0], strict=True)]
        exemplars = [b if b is not None and (a is None or b[0] > a[0]) else a for a, b in zip(exemplars, refused[1], strict=True)]
    return labels, counts, cell[SUM], cell[START], exemplars
