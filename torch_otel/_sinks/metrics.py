"""Finished compiles -> metric observations -> Prometheus series and/or OpenTelemetry instruments.

One table (``SERIES``: the record's own series, and each added feature's, declared beside its
kind in torch_otel._features) names every series once; one function (``CompileMetrics.on_finish``)
decides what a compile observes, with each added feature's view. Two backends
apply the same observations: a prometheus_client registry (``/metrics``,
Pushgateway, OpenMetrics exemplars) and an OpenTelemetry meter (OTLP), so both
expositions always carry the same series.

Names follow the contract: ``torch_compile_*``, histograms in ``_seconds``,
counters exposed with ``_total``, every series labelled ``rank``. Label values
come from bounded sets only.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from .._analysis.divergence import RankFingerprints
from .._core.categories import PHASES_ALSO, RECOMPILE_CATEGORIES, BoundedLabels, phase_label, recompile_category
from .._core.errors import record_error
from .._core.graph_breaks import graph_break_code
from .._core.ranks import RankSet, env_rank
from .._features.feature import Feature
from .._features.registry import features_or_default, series_of
from .._features.views import Observation, Series
from .._model.record import RUNTIME, CompileRecord, PhaseNode, Sink
from .._version import __version__, torch_version
from .histograms import PrometheusHistograms
from .store import SeriesStore, _family

# A further rank (not a detail rank): its failures and graph breaks by their first few kinds, the rest as ``other``
FURTHER_FAIL_TYPES = 4
FURTHER_GRAPH_BREAK_CODES = 8
# 10 ms .. 30 min: compiles of big models take many minutes.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)
GUARD_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000)

# The series of the record's own facts; each feature declares its own (torch_otel._features: ``metrics.series``).
CORE_SERIES: dict[str, Series] = {
    s.name: s
    for s in (
        Series(
            "torch_compile_frame_duration_seconds",
            "histogram",
            "A compile's time: torch's duration_us for a frame or a lazy backward, else its root span's (docs/metrics.md).",
            ("rank", "kind", "status"),
            "s",
            DURATION_BUCKETS,
        ),
        Series(
            "torch_compile_phase_duration_seconds",
            "histogram",
            "Time one compile spent in a phase: its stretches summed, parallel ones each, nested ones once (docs/metrics.md).",
            ("rank", "phase"),
            "s",
            DURATION_BUCKETS,
        ),
        Series("torch_compile_compiles", "counter", "Compiles finished.", ("rank", "kind", "status")),
        Series(
            "torch_compile_seconds",
            "counter",
            "Seconds spent compiling, as torch records them (duration_us), on every rank (docs/metrics.md).",
            ("rank", "kind", "status"),
            "s",
        ),
        Series("torch_compile_recompiles", "counter", "Recompiles, by guard-failure category.", ("rank", "reason")),
        Series(
            "torch_compile_graph_breaks", "counter", "Graph breaks, by torch's graph-break registry code.", ("rank", "reason")
        ),
        Series("torch_compile_failures", "counter", "Failed compiles, by torch's fail_type.", ("rank", "fail_type")),
        Series(
            "torch_compile_recompile_limit_hits",
            "counter",
            "Frames that hit the recompile limit and now run in eager.",
            ("rank",),
        ),
        Series("torch_compile_eager_fallbacks", "counter", "Compiles that left their frame running in eager.", ("rank", "kind")),
        Series("torch_compile_cache_requests", "counter", "Compile cache lookups.", ("rank", "cache", "location", "result")),
        Series(
            "torch_compile_cache_time_saved_seconds",
            "counter",
            "Compile time saved by FX graph cache hits, local and remote (torch's remote_cache_time_saved_s).",
            ("rank",),
            "s",
        ),
        Series("torch_compile_guards", "histogram", "Guards per compiled frame.", ("rank",), "", GUARD_BUCKETS),
        Series("torch_compile_in_progress", "updown", "Compiles running now.", ("rank", "kind")),
        Series(
            "torch_compile_rank_fingerprint",
            "gauge",
            "What this rank compiled so far, one number per aspect (compiles, cache, collectives, graphs): "
            "ranks of one job that compiled the same things show equal values (docs/distributed.md).",
            ("rank", "run_id", "aspect"),
        ),
        Series(
            "torch_compile_build_info",
            "gauge",
            "Versions of torch and torch-otel.",
            ("rank", "torch_version", "torch_otel_version"),
        ),
    )
}


def series_table(features: tuple[Feature, ...] | None = None) -> dict[str, Series]:
    """Every series, by name: the record's own, then each added feature's."""
    return {**CORE_SERIES, **{s.name: s for s in series_of(features)}}


SERIES = series_table()  # as the features' table stands at import: what backends serve unless given theirs


class Backend(Protocol):
    """Where a compile's observations go. A backend built on a :class:`SeriesStore` (its ``store``) has them applied there,
    once per store however many backends read it, and its ``record`` (None: nothing more) is given them too; any
    other backend is given them through ``apply_all``."""

    def apply(self, name: str, labels: tuple[str, ...], value: float, exemplar: tuple[int, int] | None) -> None: ...

    def apply_all(self, observations: Sequence[Observation]) -> None:
        """Each of ``observations`` (one compile's), as ``apply``; one that fails is counted, and the rest still go."""


def default_run_id() -> str:
    """The job's id, shared by its ranks: torchrun's ``TORCHELASTIC_RUN_ID`` (empty otherwise: Prometheus's ``job`` groups)."""
    return os.environ.get("TORCHELASTIC_RUN_ID", "").strip()[:64]


def default_rank() -> str:
    """The ``rank`` label when torch.distributed is not (yet) initialised: torchrun's RANK, else 0."""
    return str(env_rank())


def series_store(series: Mapping[str, Series] | None = None) -> SeriesStore:
    """A table of ``series`` (else ``SERIES``) for backends to serve (a histogram with no buckets: ``DURATION_BUCKETS``)."""
    return SeriesStore(SERIES if series is None else series, DURATION_BUCKETS)


class PrometheusBackend:
    """The series on a prometheus_client registry, with trace-id exemplars on histograms.

    Every series is a number kept in ``store`` (its own, unless given one another backend serves too) and read by a
    collector at scrape time, with the same exposition as prometheus_client's own metrics (``_total``, ``_created``; a
    histogram's ``_bucket`` with its exemplar, ``_count``, ``_sum``): an observation is a dict update (counters and
    gauges) or a bucket's (histograms, torch_otel._sinks.histograms).
    """

    record = None  # nothing of its own to record: everything it serves is the store's

    def __init__(
        self, registry: CollectorRegistry, series: Mapping[str, Series] | None = None, store: SeriesStore | None = None
    ) -> None:
        self.registry = registry
        self.store = series_store(series) if store is None else store
        registry.register(PrometheusHistograms(self.store.histograms))
        registry.register(self.store.numbers)
        registry.register(SelfMetrics())
        registry.register(TorchCounters())

    def after_fork_in_child(self) -> None:
        self.store.after_fork_in_child()

    def apply(self, name: str, labels: tuple[str, ...], value: float, exemplar: tuple[int, int] | None) -> None:
        self.store.apply_all(((name, labels, value, exemplar),))

    def apply_all(self, observations: Sequence[Observation]) -> None:
        self.store.apply_all(observations)


class _Families:
    """A collector of fixed families: ``FAMILIES`` names each once, ``collect`` fills them from ``rows``
    and ``describe`` returns them empty, so the registry knows every name before the first scrape."""

    FAMILIES: tuple[Series, ...] = ()

    def rows(self) -> dict[str, list[tuple[list[str], float]]]:
        """Each family's samples as they stand: its name -> (label values, value) for each series."""
        raise NotImplementedError

    def collect(self) -> Iterator[Any]:
        rows = self.rows()
        for s in self.FAMILIES:
            fam = _family(s)
            for labels, value in rows[s.name]:
                fam.add_metric(labels, value)
            yield fam

    def describe(self) -> list[Any]:
        return [_family(s) for s in self.FAMILIES]


class SelfMetrics(_Families):
    """The bridge's own health: items the exporters dropped, and internal errors caught."""

    FAMILIES = (
        Series(
            "torch_otel_dropped", "counter", "Spans, metric points and log records the exporters could not deliver.", ("signal",)
        ),
        Series("torch_otel_internal_errors", "counter", "Exceptions caught inside the bridge (torch.compile went on).", ()),
        Series(
            "torch_otel_unattributed_phases",
            "counter",
            "Phase events with no compile id (compile worker threads) that could not be given to a compile: "
            "more than one was in flight.",
            (),
        ),
        Series(
            "torch_otel_compiles_not_sampled",
            "counter",
            "Compiles the trace sampler dropped (no spans built; their metrics are counted as any others').",
            ("kind",),
        ),
        Series(
            "torch_otel_unmatched_phase_events",
            "counter",
            "Phase events torch logged that did not pair up: a begin that never ended (end: the end of what "
            "contained it), or an end with no begin open.",
            ("event",),
        ),
    )

    def rows(self) -> dict[str, list[tuple[list[str], float]]]:
        from .._core.errors import internal_error_count
        from .._core.health import live_stat, not_sampled
        from .._otel.delivery import dropped

        return {
            "torch_otel_dropped": [([signal], n) for signal, n in sorted(dropped().items())],
            "torch_otel_internal_errors": [([], internal_error_count())],
            "torch_otel_unattributed_phases": [([], live_stat("unattributed_phases"))],
            "torch_otel_compiles_not_sampled": [([kind], count) for kind, count in sorted(not_sampled().items())],
            "torch_otel_unmatched_phase_events": [
                (["begin"], live_stat("unmatched_phase_begins")),
                (["end"], live_stat("unmatched_phase_ends")),
            ],
        }


class TorchCounters(_Families):
    """torch's own compiled-autograd counter (``torch._dynamo.utils.counters["compiled_autograd"]``), read at scrape.

    ``captures`` counts the autograd graphs compiled autograd traced (each cache miss: a new graph or shape).
    Nothing is read before torch's dynamo is loaded, and nothing is hooked: the scrape reads the number.
    torch's other key there, ``compiles``, is not served: only a helper of torch's own tests adds to it, so it
    reads 0 in a user's run. The graphs compiled autograd compiled are the records of kind ``compiled_autograd``,
    counted in ``torch_compile_compiles_total{kind="compiled_autograd"}`` (live and on replay).
    """

    PREFIX = "torch_compile_compiled_autograd_"  # then torch's key
    FAMILIES = (
        Series(
            PREFIX + "captures",
            "counter",
            "Autograd graphs compiled autograd captured (torch's counter: one per cache miss).",
            ("rank",),
        ),
    )

    def rows(self) -> dict[str, list[tuple[list[str], float]]]:
        utils = sys.modules.get("torch._dynamo.utils")
        counters = getattr(utils, "counters", None)
        ca = counters.get("compiled_autograd", {}) if isinstance(counters, dict) else {}
        rank = default_rank()
        out: dict[str, list[tuple[list[str], float]]] = {}
        for s in self.FAMILIES:
            value = ca.get(s.name.removeprefix(self.PREFIX), 0) if hasattr(ca, "get") else 0
            out[s.name] = [([rank], value if isinstance(value, int) else 0)]
        return out


def phase_times(root: PhaseNode) -> dict[str, int]:
    """Per phase label, the time one compile spent in it (ns): the durations of its phases' stretches, summed.

    Every stretch counts once, however many run at the same time (inductor's parallel kernel builds, each
    ``compile_file``, as torch's ``compile_times()`` sums them). A stretch inside another of the same label (on
    its path from the root) is already in that one's time, and is not added again.
    """
    out: dict[str, int] = {}
    stack: list[tuple[PhaseNode, tuple[str, ...]]] = [(root, ())]  # each node, with the labels of the phases around it
    while stack:
        node, inside = stack.pop()
        below = inside
        end = node.end_ns
        if end is not None:
            phase = phase_label(node.name)
            if phase is not None:
                ns = max(0, (end or node.start_ns) - node.start_ns)
                also = PHASES_ALSO.get(node.name)
                for label in (phase,) if also is None else (phase, *also):
                    if label not in inside:
                        out[label] = out.get(label, 0) + ns
                        below = (*below, label)
        if node.children:
            stack.extend([(child, below) for child in node.children])
    return out


class CompileMetrics(Sink):
    """Turns each finished compile into observations and applies them to every backend."""

    def __init__(
        self,
        backends: list[Backend],
        run_id: str | None = None,
        detail_ranks: RankSet | None = None,
        features: tuple[Feature, ...] | None = None,
    ) -> None:
        self.backends = backends
        # what each compile's observations are applied with: each store once, then what a backend records itself
        stores: dict[int, SeriesStore] = {}
        recorders: list[tuple[str, Callable[[Sequence[Observation]], None]]] = []
        for b in backends:
            store = getattr(b, "store", None)
            if isinstance(store, SeriesStore):
                stores.setdefault(id(store), store)
                if b.record is not None:  # type: ignore[attr-defined]
                    recorders.append((type(b).__name__, b.record))  # type: ignore[attr-defined]
            else:
                recorders.append((type(b).__name__, b.apply_all))
        self._appliers = (*(("SeriesStore", st.apply_all) for st in stores.values()), *recorders)
        # the features that observe series of their own per compile (torch_otel._features)
        self._views = tuple(k.metrics for k in features_or_default(features) if k.metrics is not None)
        self._instruments = {name: s.instrument for name, s in series_table(features).items()}
        # the collected series' totals so far (a counter applies its growth): ``apply_collected``
        self._sampled_totals: dict[tuple[str, tuple[str, ...]], float] = {}
        self._sampled_lock = threading.Lock()
        self.run_id = default_run_id() if run_id is None else run_id
        self.detail_ranks = RankSet() if detail_ranks is None else detail_ranks
        for st in stores.values():
            st.numbers.detail_ranks = self.detail_ranks
        self._fingerprints = RankFingerprints()
        self._fingerprints_sent: dict[tuple[str, str, str], int] = {}  # each fingerprint's value the backends were given
        self._fail_types = BoundedLabels(50)
        self._gb_codes = BoundedLabels(200)
        # a further rank's label sets: its failures and graph breaks by their first few kinds (the rest: other)
        self._few_fail_types = BoundedLabels(FURTHER_FAIL_TYPES)
        self._few_gb_codes = BoundedLabels(FURTHER_GRAPH_BREAK_CODES)
        self._build_seen: set[str] = set()

    def _emit(self, observations: Iterable[Observation]) -> None:
        batch = observations if isinstance(observations, list) else list(observations)
        for name, apply in self._appliers:
            try:
                apply(batch)
            except Exception as exc:  # noqa: BLE001 - one broken backend never stops the others
                record_error(f"metrics backend {name}", exc)

    def _rank(self, rec: CompileRecord) -> str:
        return str(rec.rank) if rec.rank is not None else default_rank()

    def after_fork_in_child(self) -> None:
        """A forked child: the parent's threads may have held the sampled series' lock, or a backend's, as it forked."""
        self._sampled_lock = threading.Lock()
        for b in self.backends:
            fresh = getattr(b, "after_fork_in_child", None)
            if fresh is not None:
                fresh()

    def apply_collected(self, observations: list[Observation]) -> None:
        """The series the features' live states stand at (``FeatureState.collect``: each compiled graph's calls), into
        every backend: a gauge as it stands, a counter by its growth since the last read. The pipeline collects before
        each scrape, every few seconds, and at shutdown (before the meter's last export and the Pushgateway's push)."""
        out: list[Observation] = []
        with self._sampled_lock:
            for name, labels, value, ex in observations:
                if self._instruments.get(name) == "counter":
                    before = self._sampled_totals.get((name, labels), 0.0)
                    if value <= before:
                        continue  # counts only grow (a lost increment never shows as a decrease)
                    self._sampled_totals[(name, labels)] = value
                    value -= before
                out.append((name, labels, value, ex))
            self._emit(out)

    def _info(self, rank: str) -> Iterator[Observation]:
        """Once per rank: the build info, and the alerting counters at 0.

        A counter that first appears already at 1 shows no ``increase()`` in
        Prometheus, so the series alerts and dashboards rate on exist from the
        first compile on (bounded label sets only).
        """
        if rank in self._build_seen:
            return
        self._build_seen.add(rank)
        yield "torch_compile_build_info", (rank, torch_version(), __version__), 1, None
        for status in ("ok", "failed"):
            yield "torch_compile_compiles", (rank, "frame", status), 0, None
            yield "torch_compile_seconds", (rank, "frame", status), 0, None
        yield "torch_compile_recompile_limit_hits", (rank,), 0, None
        yield "torch_compile_eager_fallbacks", (rank, "frame"), 0, None
        if rank in self.detail_ranks:  # a further rank's recompiles appear with their first
            for reason in RECOMPILE_CATEGORIES:
                yield "torch_compile_recompiles", (rank, reason), 0, None

    def on_start(self, rec: CompileRecord) -> None:
        self._emit(self._start(rec))

    def _start(self, rec: CompileRecord) -> Iterator[Observation]:
        rank = self._rank(rec)
        yield from self._info(rank)
        if rec.kind != RUNTIME:
            yield "torch_compile_in_progress", (rank, rec.kind), 1, None

    def on_finish(self, rec: CompileRecord) -> None:
        self._emit(self.observations(rec))

    @staticmethod
    def _phases(rec: CompileRecord, rank: str, ex: tuple[int, int] | None) -> Iterator[Observation]:
        for phase, ns in phase_times(rec.root).items():  # one observation per phase per compile: the time spent in it
            yield "torch_compile_phase_duration_seconds", (rank, phase), ns / 1e9, ex

    def observations(self, rec: CompileRecord) -> Iterator[Observation]:
        """Everything one finished compile contributes to the series."""
        rank = self._rank(rec)
        yield from self._info(rank)
        ex = (rec.trace_id, rec.span_id or 0) if rec.trace_id else None
        detail = rank in self.detail_ranks
        if rec.kind == RUNTIME:  # not a compile: only the time its phases took (cudagraph set-up, autotuning)
            if detail:
                yield from self._phases(rec, rank, ex)
            return
        yield "torch_compile_in_progress", (rank, rec.kind), -1, None
        m: dict[str, Any] = rec.metrics or {}
        fail_type = rec.fail_type
        failed = fail_type is not None or rec.incomplete is not None
        status = "failed" if failed else "ok"
        if detail:
            yield "torch_compile_frame_duration_seconds", (rank, rec.kind, status), rec.duration_s, ex
            yield from self._phases(rec, rank, ex)
        yield "torch_compile_seconds", (rank, rec.kind, status), rec.duration_s, None
        yield "torch_compile_compiles", (rank, rec.kind, status), 1, None
        if rec.recompile_reason:
            yield "torch_compile_recompiles", (rank, recompile_category(rec.recompile_reason)), 1, None
        gb_codes = self._gb_codes if detail else self._few_gb_codes
        for gb in rec.handled_graph_breaks:  # one torch could not handle is the compile's failure, counted there
            yield "torch_compile_graph_breaks", (rank, gb_codes(graph_break_code(gb.gb_type, gb.reason))), 1, None
        if fail_type:
            yield "torch_compile_failures", (rank, (self._fail_types if detail else self._few_fail_types)(fail_type)), 1, None
        elif rec.incomplete:
            yield "torch_compile_failures", (rank, "Incomplete"), 1, None
        if rec.recompile_limit_hit:
            yield "torch_compile_recompile_limit_hits", (rank,), 1, None
        if rec.eager_fallback:
            yield "torch_compile_eager_fallbacks", (rank, rec.kind), 1, None
        if detail and rec.kind != "compiled_autograd" and not failed:
            gc = m.get("guard_count")
            if isinstance(gc, int) and not isinstance(gc, bool):
                yield "torch_compile_guards", (rank,), gc, None
        lookups = rec.cache_counts()
        served = rec.mega_cache_hits  # local hits on entries torch.compiler.load_cache_artifacts put there
        for (cache, location, result), n in lookups.items():
            if location == "local" and result == "hit" and served.get(cache):
                n -= min(n, served[cache])
                yield "torch_compile_cache_requests", (rank, cache, "mega_cache", result), served[cache], None
            if n:
                yield "torch_compile_cache_requests", (rank, cache, location, result), n, None
        for view in self._views:
            yield from view.observations(rec, rank)
        saved = m.get("remote_cache_time_saved_s")
        if isinstance(saved, (int, float)) and saved > 0:
            yield "torch_compile_cache_time_saved_seconds", (rank,), saved, None
        sent = self._fingerprints_sent
        for aspect, value in self._fingerprints.add(rank, rec, lookups).items():
            labels = (rank, self.run_id, aspect)
            if sent.get(labels) != value:  # a gauge: the same value again changes nothing
                sent[labels] = value
                yield "torch_compile_rank_fingerprint", labels, value, None
