"""The one builder of pipelines, and the pipeline: its sinks and their lifecycle.

Live capture, ``torch-otel replay`` and ``torch-otel diff`` each describe what they need in a :class:`PipelineSpec`;
:func:`build_pipeline` is the one place that makes sinks from it, and :func:`metrics_backends` the one that builds
metrics backends. A :class:`Pipeline` owns its sinks as the OpenTelemetry SDK's tracer provider owns its span
processors: it makes the assemblers that feed them (with the derive step's parts: the tracing, the cache key history,
the mega-cache loads), and calls ``force_flush`` and ``shutdown`` on each in order, under one deadline shared by all,
each call guarded (an exception is caught, counted and logged once, and the next sink still runs).

Sinks are listed so that what is written on this machine comes before what waits on the network: the cache key index
and the run summary (or replay's report) first, then the delivery of spans and metrics.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .._analysis.cache_index import live_key_history
from .._analysis.caches import LOADED, KeyHistory
from .._analysis.recompile_guards import live_recompile_limit
from .._assemble.assembler import Assembler, CacheLoads, Tracing
from .._core.errors import record_error
from .._core.settings import Settings
from .._features import cache_lookups, graph_calls
from .._model.record import CompileRecord, Sink
from .._parse.trace_log import ReplayStats
from .._sinks.late_spans import LateSpans
from .._sinks.logs import LogSink
from .._sinks.metrics import Backend, CompileMetrics, OTelBackend, PrometheusBackend, series_table
from .._sinks.near_limit import NearLimitWarning
from .._sinks.replay_report import ReplayReport
from .._sinks.summary import RunSummary, SummariesByRank
from .._version import __version__

__all__ = [
    "MetricsSpec",
    "Pipeline",
    "PipelineSpec",
    "Push",
    "ReportSpec",
    "build_pipeline",
    "metrics_backends",
]

DEFAULT_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class Push:
    """Replay: the registry pushed to a Prometheus Pushgateway at shutdown, when ``when()`` (the replay succeeded)."""

    url: str
    run: str
    when: Callable[[], bool]
    out: IO[str]
    err: IO[str]
    job: str = "torch_compile_replay"


@dataclass(frozen=True)
class MetricsSpec:
    """Where the metrics go: a prometheus_client ``registry`` and/or an OpenTelemetry ``meter_provider``.

    ``scope`` and ``scope_version`` name the meter; ``run_id`` labels the rank fingerprints (None: torchrun's
    ``TORCHELASTIC_RUN_ID``). ``owned``: the pipeline shuts the meter provider down (replay's own).
    """

    registry: Any = None
    meter_provider: Any = None
    scope: str = "torch_otel"
    scope_version: str | None = __version__
    run_id: str | None = None
    owned: bool = False
    push: Push | None = None


@dataclass(frozen=True)
class ReportSpec:
    """Replay's report: where its text, ``--json`` and ``--html`` go, and the reader's stats it tells of."""

    stats: ReplayStats
    text: IO[str]
    err: IO[str]
    json_path: str | None = None
    html: str | None = None
    capture_payloads: bool = False  # --payloads: recompile reasons as torch wrote them


@dataclass(frozen=True)
class PipelineSpec:
    """One pipeline, described: which source feeds it and what each sink needs (None or False: not built).

    ``source`` is ``"live"`` (the bridge: the cache key index and the near-limit warning come with it, and a run
    summary when ``settings.summary`` names destinations or ``summary`` is given), ``"replay"`` (``report``: the
    summary, the divergence report and the reader's text) or ``"diff"`` (one run summary, and with ``per_rank`` one
    per rank; ``summary_source`` says what the summaries call their source). ``tracing`` builds each compile's
    trace in the derive step; ``spans`` (replay) delivers it. ``sinks`` are the caller's own, after the built ones.
    """

    source: str
    settings: Settings = field(default_factory=Settings)
    tracing: Tracing | None = None
    spans: Any = None  # replay's tracers (torch_otel._otel.replay_tracers.ReplayTracers)
    metrics: MetricsSpec | None = None
    logger_provider: Any = None
    summary: RunSummary | None = None  # live: the caller's, filled with every compile (instrument(summary=...))
    report: ReportSpec | None = None
    per_rank: bool = False
    summary_source: str = "replay"
    cache_keys: KeyHistory | None = None  # replay and diff: the key history (live builds its own from the settings)
    graphs: graph_calls.GraphCalls | None = None  # live: the graph counters (default: the process's)
    sinks: tuple[Sink, ...] = ()


class Pipeline:
    """Sinks, the derive step's parts, and the sinks' lifecycle: ``force_flush`` and ``shutdown`` in order, under one
    deadline, each guarded; ``shutdown`` is safe twice. What a caller reads back is kept by name: ``summary``,
    ``by_rank`` (diff), ``report`` (replay), ``metrics``, ``spans`` (replay's delivery: the spans it made)."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        tracing: Tracing | None = None,
        cache_keys: KeyHistory | None = None,
        cache_loads: CacheLoads | None = None,
        recompile_limit: Callable[[], int | None] | None = None,
        graphs: graph_calls.GraphCalls | None = None,
    ) -> None:
        self.sinks: tuple[Sink, ...] = tuple(sinks)
        self.tracing = tracing
        self.cache_keys = cache_keys
        self.graphs = graphs  # live: the graph counters the derive step tells each compile's graphs to
        self.cache_loads = cache_loads
        self.recompile_limit = recompile_limit
        self.summary: RunSummary | None = None
        self.by_rank: SummariesByRank | None = None
        self.report: ReplayReport | None = None
        self.metrics: CompileMetrics | None = None
        self.spans: SpanDelivery | None = None
        self._lock = threading.Lock()
        self._shut_down = False

    def assembler(
        self, max_open: int = 256, stamp: Callable[[CompileRecord, bool], None] | None = None, recent: int | None = None
    ) -> Assembler:
        """An assembler that hands its finished compiles to these sinks, deriving their facts with these parts."""
        parts: dict[str, Any] = {}
        if self.cache_keys is not None:
            parts[cache_lookups.NAME] = self.cache_keys
        if self.graphs is not None:
            parts[graph_calls.NAME] = self.graphs
        return Assembler(
            self.sinks,
            max_open,
            tracing=self.tracing,
            cache_loads=self.cache_loads,
            feature_states=parts or None,
            stamp=stamp,
            recent=recent,
            recompile_limit=self.recompile_limit,
        )

    def finish(self, record: CompileRecord) -> None:
        """A record made elsewhere (diff rebuilds them from spans): to every sink, as the assembler hands them."""
        for sink in self.sinks:
            try:
                sink.on_finish(record)
            except Exception as exc:  # noqa: BLE001 - one sink must not starve the others
                record_error(f"{type(sink).__name__}.on_finish", exc)

    def force_flush(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> bool:
        """Each sink delivers what it holds, in order, within what is left of ``timeout_millis``; False when one did
        not, or time ran out before every sink had its turn (as the SDK's span processors flush)."""
        deadline = time.monotonic() + timeout_millis / 1000
        done = True
        for sink in self.sinks:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                done = bool(sink.force_flush(int(left * 1000))) and done
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(sink).__name__}.force_flush", exc)
                done = False
        return done

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        """Each sink writes and delivers what it holds, then lets go, in order; every sink has its turn, with what is
        left of ``timeout_millis`` (none once it is spent). A second call does nothing."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        deadline = time.monotonic() + timeout_millis / 1000
        for sink in self.sinks:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                sink.shutdown(left)
            except Exception as exc:  # noqa: BLE001
                record_error(f"{type(sink).__name__}.shutdown", exc)


# -- the sinks the builder adds around the others' ---------------------------------------------------------------


class KeyIndexWriter(Sink):
    """The cache key index, the next run's baseline: its keys come from the derive step's key history; saved at
    shutdown (torch_otel._analysis.cache_index)."""

    def __init__(self, save: Callable[[], None]) -> None:
        self.save = save
        self._saved = False

    def on_finish(self, record: CompileRecord) -> None:
        pass

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        if self._saved:
            return
        self._saved = True
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the run is over; never fail its exit
            record_error("cache key index", exc)


class SpanDelivery(Sink):
    """Replay's spans, on their way: replay makes spans faster than an exporter sends them, so the batch queue is
    drained before it can overflow; at shutdown, an endpoint's TLS or protocol mix-up is one line, then the tracers'
    processors flush and stop."""

    def __init__(self, tracers: Any, every_spans: int = 1000) -> None:
        self.tracers = tracers
        self.every = every_spans
        self.pending = 0
        self.spans = 0  # every span the replay made (a compile's phases and its root)

    def on_finish(self, record: CompileRecord) -> None:
        n = sum(1 for _ in record.root.walk())
        self.spans += n
        self.pending += n
        if self.pending >= self.every:
            self.pending = 0
            self.tracers.force_flush()

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        self.tracers.force_flush()
        return True

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        from .._otel.delivery import problems_at_exit, targets

        problems_at_exit(sorted(targets()))  # a TLS or protocol mix-up: one line now, not after the retries
        self.tracers.shutdown()


class MetricsDelivery(Sink):
    """Replay's metrics, on their way at shutdown: the meter provider it made, stopped (its last export), and the
    registry pushed to the Pushgateway when the replay succeeded."""

    def __init__(self, spec: MetricsSpec) -> None:
        self.spec = spec
        self._done = False

    def on_finish(self, record: CompileRecord) -> None:
        pass

    def shutdown(self, timeout_millis: int = DEFAULT_TIMEOUT_MS) -> None:
        if self._done:
            return
        self._done = True
        spec, push = self.spec, self.spec.push
        if spec.owned and spec.meter_provider is not None:
            spec.meter_provider.shutdown()
        if push is None or spec.registry is None or not push.when():
            return
        from prometheus_client import push_to_gateway

        try:
            push_to_gateway(push.url, push.job, spec.registry, grouping_key={"run": push.run}, timeout=10)
            print(f"metrics pushed to {push.url} (job {push.job}, run {push.run})", file=push.out)
        except Exception as exc:  # noqa: BLE001
            print(f"torch-otel replay: cannot push metrics to {push.url} ({exc}); check --pushgateway", file=push.err)


# -- the one place backends are built, and the one place sinks are listed ------------------------------------------

_backends: weakref.WeakKeyDictionary[Any, Backend] = weakref.WeakKeyDictionary()
_backends_lock = threading.Lock()


def metrics_backends(spec: MetricsSpec) -> list[Backend]:
    """The backends of ``spec``: prometheus_client's series on its registry, OpenTelemetry's instruments on a meter of
    its meter provider. One set per registry and per meter provider, whoever asks (prometheus_client refuses a
    second metric of one name), so instrumenting again reuses them."""
    out: list[Backend] = []
    series = series_table()  # the record's own series and each added feature's, as the features' table stands
    with _backends_lock:
        if spec.registry is not None:
            b = _backends.get(spec.registry)
            if b is None:
                b = _backends[spec.registry] = PrometheusBackend(spec.registry, series)
            out.append(b)
        if spec.meter_provider is not None:
            b = _backends.get(spec.meter_provider)
            if b is None:
                meter = spec.meter_provider.get_meter(spec.scope, spec.scope_version)
                b = _backends[spec.meter_provider] = OTelBackend(meter, series)
            out.append(b)
    return out


def build_pipeline(spec: PipelineSpec) -> Pipeline:
    """The pipeline ``spec`` describes: every sink, in the order their ``shutdown`` runs (module docstring)."""
    settings = spec.settings
    sinks: list[Sink] = []
    cache_keys, cache_loads, recompile_limit = spec.cache_keys, None, None
    summary: RunSummary | None = None
    by_rank: SummariesByRank | None = None
    report: ReplayReport | None = None
    if spec.source == "live":
        cache_keys, save_index = live_key_history(settings)
        sinks.append(KeyIndexWriter(save_index))
        cache_loads, recompile_limit = LOADED, live_recompile_limit
        summary = spec.summary
        if summary is None and settings.summary:
            summary = RunSummary("live", settings.capture_payloads)
        if summary is not None:
            if settings.summary:
                summary.destinations = settings.summary  # TORCH_OTEL_SUMMARY: written at shutdown
            sinks.append(summary)
    elif spec.source == "replay":
        if spec.report is None:
            raise ValueError("a replay's pipeline needs its report (ReportSpec)")
        r = spec.report
        report = ReplayReport(r.stats, r.text, r.err, r.json_path, r.html, r.capture_payloads)
        summary = report.summary
        sinks.append(report)
    elif spec.source == "diff":
        summary = RunSummary(spec.summary_source)
        sinks.append(summary)
        if spec.per_rank:
            by_rank = SummariesByRank(spec.summary_source)
            sinks.append(by_rank)
    else:
        raise ValueError(f"no such pipeline source: {spec.source!r}; use live, replay or diff")
    spans = None
    if spec.spans is not None:
        spans = SpanDelivery(spec.spans)
        sinks.append(spans)
    metrics = None
    if spec.metrics is not None:
        backends = metrics_backends(spec.metrics)
        if backends:
            metrics = CompileMetrics(backends, run_id=spec.metrics.run_id, detail_ranks=settings.detail_ranks)
            sinks.append(metrics)
        if spec.metrics.owned or spec.metrics.push is not None:
            sinks.append(MetricsDelivery(spec.metrics))
    if spec.logger_provider is not None:
        sinks.append(
            LogSink(spec.logger_provider, settings.attribute_max_length, settings.redact_paths, not settings.capture_payloads)
        )
    graphs = None
    if spec.source == "live":
        sinks.append(NearLimitWarning())  # one line per frame near the recompile limit
        graphs = spec.graphs if spec.graphs is not None else graph_calls.GRAPHS
        tracer = getattr(spec.tracing, "tracer", None)
        if tracer is not None:  # each compiled graph's calls, at exit, in its compile's trace
            sinks.append(LateSpans(tracer, before=graphs.sample))
    sinks.extend(spec.sinks)
    pipeline = Pipeline(
        sinks,
        tracing=spec.tracing,
        cache_keys=cache_keys,
        cache_loads=cache_loads,
        recompile_limit=recompile_limit,
        graphs=graphs,
    )
    pipeline.summary, pipeline.by_rank, pipeline.report, pipeline.metrics = summary, by_rank, report, metrics
    pipeline.spans = spans
    return pipeline
