"""The histogram series served on a prometheus_client registry, counted by the bridge itself.

prometheus_client's ``Histogram.observe`` with an exemplar validates the exemplar's labels, takes a lock per bucket
and builds an ``Exemplar`` on every observation: about a quarter of what one compile's metrics cost. Here an
observation is a bucket found by bisection and three numbers set under one lock; the samples are built at scrape
time, as prometheus_client builds its own (``_bucket`` cumulative, with the last trace-id exemplar of each bucket,
``_count``, ``_sum``, ``_created``), so the exposition is the same. ``tests/fast/test_histograms.py`` compares the
two on any observations.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["HistogramTable"]


class HistogramTable:
    """A collector of histograms: ``(name, help, label names, bucket bounds)`` each; ``observe`` adds a value."""

    def __init__(self, histograms: Iterable[tuple[str, str, Sequence[str], Sequence[float]]]) -> None:
        histograms = list(histograms)
        self._lock = threading.Lock()
        self._meta = {name: (doc, tuple(labels)) for name, doc, labels, _ in histograms}
        self._bounds: dict[str, tuple[float, ...]] = {}
        for name, _, _, bounds in histograms:
            b = sorted(float(x) for x in bounds)
            self._bounds[name] = (*b, float("inf")) if not b or b[-1] != float("inf") else tuple(b)
        # name -> label values -> [per-bucket counts, sum, created, per-bucket (trace id, value, time) or None]
        self._cells: dict[str, dict[tuple[str, ...], list[Any]]] = {name: {} for name in self._meta}

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it as the process forked

    def observe(self, name: str, labels: tuple[str, ...], value: float, trace_id: str | None) -> None:
        bounds = self._bounds[name]
        i = bisect_left(bounds, value) if value == value else len(bounds)  # NaN: no bucket, as prometheus_client
        with self._lock:
            cell = self._cells[name].get(labels)
            if cell is None:
                n = len(bounds)
                cell = self._cells[name][labels] = [[0] * n, 0.0, time.time(), [None] * n]
            cell[1] += value
            if i < len(bounds):
                cell[0][i] += 1
                if trace_id is not None:
                    cell[3][i] = (trace_id, value, time.time())

    def collect(self) -> Iterator[Any]:
        from prometheus_client import metrics as prometheus_metrics
        from prometheus_client.metrics_core import Metric
        from prometheus_client.samples import Exemplar
        from prometheus_client.utils import floatToGoString

        created = getattr(prometheus_metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        for name, (doc, label_names) in self._meta.items():
            les = [floatToGoString(b) for b in self._bounds[name]]  # type: ignore[no-untyped-call]
            with self._lock:
                rows = [(labels, list(c[0]), c[1], c[2], list(c[3])) for labels, c in self._cells[name].items()]
            fam = Metric(name, doc, "histogram")
            for labels, counts, total, since, exemplars in rows:
                base = dict(zip(label_names, labels, strict=True))
                acc = 0
                for le, n, ex in zip(les, counts, exemplars, strict=True):
                    acc += n
                    exemplar = Exemplar({"trace_id": ex[0]}, ex[1], ex[2]) if ex is not None else None
                    fam.add_sample(f"{name}_bucket", {**base, "le": le}, acc, exemplar=exemplar)
                fam.add_sample(f"{name}_count", base, acc)
                fam.add_sample(f"{name}_sum", base, total)
                if created:
                    fam.add_sample(f"{name}_created", base, since)
            yield fam

    def describe(self) -> list[Any]:
        """Every family ``collect`` yields, empty: the registry refuses a second metric of one of these names."""
        from prometheus_client.metrics_core import Metric

        return [Metric(name, doc, "histogram") for name, (doc, _) in self._meta.items()]
